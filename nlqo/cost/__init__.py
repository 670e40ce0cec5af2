"""Cost models: a small expression language over named metrics of a plan tree."""

from nlqo.cost.metrics import CostContext, builtin_metrics, registry
from nlqo.cost.model import CostModel, load_cost_model

__all__ = ["CostContext", "CostModel", "builtin_metrics", "load_cost_model", "registry"]
