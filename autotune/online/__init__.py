"""Tuning inside the user's own training run: ``autotune.DataLoader``, torch's DataLoader
whose loader settings may change between two batches without losing or repeating a sample."""
