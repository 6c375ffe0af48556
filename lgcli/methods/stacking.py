"""Stacking (G_stack, Du et al. 2024, "Stacking Your Transformers"), SPEC.md
"Growth that LLM users pick": a model of depth kL is the L-layer model's
layers repeated k times in order,

    target = [1 .. L] + [1 .. L] + ... (k copies).

Only whole copies: the paper's operator grows by a whole factor, and a partial
last copy would end the model on a low layer where the source ended on its
top one, so a depth that is not a multiple of L is refused with the depths
that are. k = 1 keeps the model (a Swin stage that --depth leaves alone).
Width, heads and MLP are the source's (`Method.depth_only`); the globals are
kept. The function is not kept: the second copy reads the first copy's
output as if it were the embedding.
"""

from __future__ import annotations

from typing import Any

from ..errors import LgError
from ..stack import ArchSpec, Stack
from .common import GROW, Method, MethodContext, MethodResult, copy_layers


def layer_plan(source_depth: int, target_depth: int) -> list[int]:
    """The source layer (0-based) each target layer copies."""
    return [layer % source_depth for layer in range(target_depth)]


def validate(options: dict[str, Any], source: ArchSpec, target: ArchSpec, direction: str) -> None:
    if target.depth % source.depth:
        multiples = ", ".join(str(source.depth * k) for k in range(2, 6))
        raise LgError(f"stack repeats all {source.depth} layers a whole number of times: depth {target.depth} "
                      f"is not a multiple of {source.depth} ({multiples}, ...)")


def stack_layers(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
                 context: MethodContext) -> MethodResult:
    validate(options, source, target, context.direction)
    plan = layer_plan(source.depth, target.depth)
    report = {"copies": target.depth // source.depth, "layers": plan}
    return MethodResult(copy_layers(stack, target, plan), report)


METHOD = Method("stack", stack_layers, (GROW,), "G_stack: the source's layers repeated k times in order",
                validate=validate, depth_only=True)
