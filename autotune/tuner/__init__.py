"""The study: the search and its polish, the objective, the confirmation, the metrics a config
is judged by, and the store that keeps the record on the Optuna study."""
