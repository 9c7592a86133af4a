"""What a run is about, built once from the config: the session and its search space."""

from autotune.session.session import Session
from autotune.session.space import SearchSpace

__all__ = ["SearchSpace", "Session"]
