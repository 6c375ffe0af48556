"""Training-free TLEG fit (SPEC.md "TLEG", lg's own addition): fit the
learngene's line per element over depth, then evaluate it at the new depth.

TLEG Eq. 1: theta_l = theta_B + ((l - 1) / L) * theta_A, l = 1..L. From an
L-layer model, A and B are the ordinary least-squares line of every element
against x_l = (l - 1) / L; the target's layers are B + ((l - 1) / L') * A.
Width is unchanged (a learngene's width is its own); globals are kept.

The report gives the fit's relative residual ||theta - fit|| / ||theta|| and
R^2 per role: on ordinary checkpoints a line over depth explains little
(SPEC measures R^2 ~ 0.10 on DINOv2 ViT-S), so this is a baseline close to
the mean layer unless the source was trained under the TLEG constraint.
"""

from __future__ import annotations

from typing import Any

from ..errors import RefusedWithPipe
from ..lazy import torch
from ..stack import LAYER, ArchSpec, Named, Stack
from .clone import width_step
from .common import GROW, SHRINK, Method, MethodContext, MethodResult, as_compute, per_role


def depth_positions(depth: int) -> torch.Tensor:
    """x_l = (l - 1) / L for l = 1..L (TLEG Eq. 1)."""
    return torch.arange(depth, dtype=torch.float64) / depth


def fit_line(stacked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Least-squares (A, B) per element of a (L, ...) stack, and the residual.
    One layer has no slope: A = 0, B = that layer."""
    depth = stacked.shape[0]
    theta = as_compute(stacked).reshape(depth, -1)
    x = depth_positions(depth)
    centred = (x - x.mean()).to(theta)
    mean = theta.mean(dim=0)
    sxx = float((centred ** 2).sum())
    slope = (centred @ theta) / sxx if sxx > 0 else torch.zeros_like(mean)
    base = mean - slope * float(x.mean())
    residual = theta - (base + x.to(theta)[:, None] * slope)
    shape = stacked.shape[1:]
    return slope.reshape(shape), base.reshape(shape), residual.reshape(stacked.shape)


def _width_then_depth(source: ArchSpec, target: ArchSpec, direction: str) -> tuple[str, str]:
    """(words, pipe) of the commands that do what was asked: the width with
    another method, then the depth with tleg-fit, each as it will run. The
    pipe is a `RefusedWithPipe` template: the caller writes in the source,
    the output and the flags the user gave about them."""
    step = width_step(source, target)
    if step is None:  # sizes that grow and shrink at once: no single command
        return "change the width with another method first (lg grow, lg shrink), then the depth with tleg-fit", ""
    width_direction, flags = step
    if target.depth == source.depth:
        return ("change the width with another method: ",
                f"`lg {width_direction} {{src}}{{given}} {flags} -o {{out}}{{written}}`")
    return ("change the width first with another method: ",
            f"`lg {width_direction} {{src}}{{given}} {flags} -o - | "
            f"lg {direction} - --depth {target.depth} --method tleg-fit -o {{out}}{{written}}`")


def tleg_fit(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
             context: MethodContext) -> MethodResult:
    widths = {axis: (size, target.axis_sizes()[axis]) for axis, size in source.axis_sizes().items()
              if axis != LAYER and size != target.axis_sizes()[axis]}
    if widths:
        axis, (before, after) = next(iter(widths.items()))
        words, pipe = _width_then_depth(source, target, context.direction)
        raise RefusedWithPipe(f"tleg-fit changes depth only ({axis} {before} -> {after} asked): {words}", pipe)
    x_target = depth_positions(target.depth)
    # Filled in as the writer makes each role (None until then): per-role fit
    # quality, and the whole model's relative residual over the roles made.
    report: dict[str, Any] = {"relative_residual": None, "roles": {}}
    energies = {"lost": 0.0, "total": 0.0}

    def fitted(role: str, named: Named, per_layer: bool) -> torch.Tensor:
        if not per_layer:
            return named.data  # globals are kept
        stacked = named.data
        slope, base, residual = fit_line(stacked)
        theta = as_compute(stacked)
        energy = float(torch.linalg.vector_norm(theta)) ** 2
        spread = float(torch.linalg.vector_norm(theta - theta.mean(dim=0))) ** 2
        lost = float(torch.linalg.vector_norm(residual)) ** 2
        del residual, theta, stacked
        energies["lost"] += lost
        energies["total"] += energy
        report["roles"][role] = {"relative_residual": (lost / energy) ** 0.5 if energy else 0.0,
                                 "r2": 1.0 - lost / spread if spread else 1.0}
        total = energies["total"]
        report["relative_residual"] = (energies["lost"] / total) ** 0.5 if total else 0.0
        return base.unsqueeze(0) + x_target.to(slope).view(-1, *([1] * slope.dim())) * slope.unsqueeze(0)

    return MethodResult(per_role(stack, target, fitted), report)


METHOD = Method("tleg-fit", tleg_fit, (SHRINK, GROW),
                "least-squares TLEG line per element over depth, evaluated at the new depth",
                # TLEG Eq. 1 is one line over one model's depth; a Swin stage
                # holds 2 blocks (most of them), through which a line fits
                # exactly and says nothing about a third.
                not_per_stage="its line (TLEG Eq. 1) runs over one depth axis, and a stage of 2 blocks fits "
                              "any line exactly; resize each stage with select, bot, clone, heur-lg or auto-lg")
