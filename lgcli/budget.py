"""`lg shrink --params N` and `--memory BYTES`: a budget instead of sizes.
The request is checked here, and the shape it buys is
`sizing.shape_for_budget`'s rule (docs/methods.md "Sizes as budgets")."""

from __future__ import annotations

from typing import Any

from .errors import UsageError
from .loading import Loaded
from .methods import SHRINK
from .sizing import BUDGET_FILL, BudgetShape, check_heads_known, shape_for_budget


def check_budget_request(direction: str, params: int | None, memory: int | None, sizes: tuple) -> None:
    """A budget asked as one (no sizes beside it, one kind, a shrink): said before any model is read."""
    if params is None and memory is None:
        return
    flag = "--params" if params is not None else "--memory"
    if params is not None and memory is not None:
        raise UsageError("give --params or --memory, not both: each is the whole budget")
    if direction != SHRINK:
        raise UsageError(f"{flag} picks the shape of a smaller model: use lg shrink")
    if any(size is not None for size in sizes):
        raise UsageError(f"{flag} picks the depth and width itself: leave out --depth, --width, --heads, "
                         f"--kv-heads and --mlp-dim (or give those and no {flag})")


def budget_shape(loaded: Loaded, *, direction: str, params: int | None, memory: int | None,
                 sizes: tuple) -> BudgetShape:
    """The shape a `--params` or `--memory` budget buys (`sizing.shape_for_budget`),
    after the checks that the request is one."""
    check_budget_request(direction, params, memory, sizes)
    check_heads_known(loaded.spec, moves_heads=True, where=loaded.checkpoint.label)
    if params is not None:
        return shape_for_budget(loaded.spec, params)
    return shape_for_budget(loaded.spec, memory, unit="bytes", bytes_per_parameter=loaded.dtype.itemsize)


def budget_report(shape: BudgetShape) -> dict[str, Any]:
    """What a budget chose, for the report and the line lg prints."""
    report = {"budget": shape.budget, "unit": shape.unit, "depth": shape.depth, "width": shape.width,
              "parameters": shape.parameters}
    if shape.unit == "bytes":
        report["bytes"] = shape.used
    report["used"] = round(shape.used / shape.budget, 4)
    report["rule"] = (f"narrow first, as Minitron found width pruning better than depth pruning after distillation "
                      f"and lg on its example ViT, docs/methods.md \"Sizes as budgets\": the deepest shape "
                      f"within {1 - BUDGET_FILL:.0%} of the most parameters any depth's widest width fits")
    return report


__all__ = ["budget_report", "budget_shape"]
