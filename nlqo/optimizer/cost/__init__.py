"""Cost models: a small expression language over named metrics of a plan tree."""

from nlqo.optimizer.cost.metrics import CostContext, Structure, builtin_metrics, registry, structural
from nlqo.optimizer.cost.model import CostModel, load_cost_model
from nlqo.optimizer.cost.shape import Shape

__all__ = [
    "CostContext",
    "CostModel",
    "Shape",
    "Structure",
    "builtin_metrics",
    "load_cost_model",
    "registry",
    "structural",
]
