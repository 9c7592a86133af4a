"""``mode=verify``: best.yaml's figures checked in real epochs.

``checks`` refuses what cannot be verified (no best.yaml, another machine, changed data),
``plan`` sets up the three arms and the epoch size, ``rounds`` runs them interleaved in fresh
processes (each times real epochs: ``runtime.epochs``), ``figures`` and ``verdict`` judge the
claims, ``result`` gathers them, ``output`` writes verify.md, verify.json and the study's
attribute, and ``command`` runs it all.
"""
