"""Depth up-scaling (SOLAR, Kim et al. 2023), SPEC.md "Growth that LLM users
pick": copy the L-layer model twice, drop the last m layers of the first copy
and the first m of the second, and join them, so that the seam sits between
source layers L - m and m + 1 (1-based):

    target = [1 .. L - m] + [m + 1 .. L],      D = 2L - 2m      (SOLAR: L = 32, m = 8 -> 48)

m is not an option: the target depth fixes it, m = (2L - D) / 2, so the
depths it reaches are the even ones from L + 1 (or L + 2) to 2L (m = 0: the two
copies whole, which `stack` also makes). A depth kept is kept (a Swin stage
that --depth leaves alone). Width, heads and MLP are the source's
(`Method.depth_only`); the globals are kept. The function is not kept: the
second copy reads features the first copy's top layers made for the head.
"""

from __future__ import annotations

from typing import Any

from ..errors import LgError
from ..stack import ArchSpec, Stack
from .common import GROW, Method, MethodContext, MethodResult, copy_layers


def seam(source_depth: int, target_depth: int) -> int:
    """m, the layers dropped on each side of the seam: D = 2L - 2m."""
    return (2 * source_depth - target_depth) // 2


def reachable(source_depth: int) -> list[int]:
    """The depths above L that 2L - 2m reaches, m = 0 .. L - 1."""
    return [2 * source_depth - 2 * m for m in range(source_depth) if 2 * source_depth - 2 * m > source_depth][::-1]


def layer_plan(source_depth: int, target_depth: int) -> list[int]:
    """The source layer (0-based) each target layer copies."""
    if target_depth == source_depth:
        return list(range(source_depth))
    m = seam(source_depth, target_depth)
    return list(range(source_depth - m)) + list(range(m, source_depth))


def validate(options: dict[str, Any], source: ArchSpec, target: ArchSpec, direction: str) -> None:
    if target.depth == source.depth or target.depth in reachable(source.depth):
        return
    depths = reachable(source.depth)
    raise LgError(f"depth-upscale makes 2L - 2m layers from L = {source.depth} (m dropped at the seam of two "
                  f"copies): depth {target.depth} is not one; it reaches {', '.join(map(str, depths))}")


def depth_upscale(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
                  context: MethodContext) -> MethodResult:
    validate(options, source, target, context.direction)
    plan = layer_plan(source.depth, target.depth)
    report = {"seam": None if target.depth == source.depth else seam(source.depth, target.depth),
              "layers": plan}
    return MethodResult(copy_layers(stack, target, plan), report)


METHOD = Method("depth-upscale", depth_upscale, (GROW,),
                "SOLAR depth up-scaling: two copies of the model joined, m layers dropped at the seam",
                validate=validate, depth_only=True)
