"""The logical optimizer: rewrite rules, pair relations, search, cost, verification."""

from nlqo.optimizer.optimizer import Optimizer, optimize

__all__ = ["Optimizer", "optimize"]
