"""``mode=diagnose``: measure where the time goes (``measure``, ``storage``, ``page_cache``),
judge what binds (``verdict``) and write it up (``markdown``)."""
