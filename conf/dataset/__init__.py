"""Hydra config package: found as pkg://autotune.conf."""
