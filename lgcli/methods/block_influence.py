"""Block influence (ShortGPT, Men et al. 2024; SPEC.md "Data-aware
resizing"): drop the blocks that change their input least.

BI_l = 1 - E[cos(h_l, h_{l+1})] over the calibration positions, h_l the
hidden state entering block l. The D blocks of largest BI are kept, in their
order. Any width change keeps weight selection's uniform elements: this
method measures depth only (`activation` measures width).
"""

from __future__ import annotations

from typing import Any

from ..stack import ArchSpec, Stack
from .calibrated import CALIBRATION_OPTIONS, most_important, selected_stack, uniform
from .common import SHRINK, Method, MethodContext, MethodResult


def block_influence(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
                    context: MethodContext) -> MethodResult:
    influence = context.calibration.block_influence().float()
    kept = kept_layers(context.calibration, source.depth, target.depth)
    report = {"calibration": context.calibration.describe(),
              "block_influence": [round(v, 6) for v in influence.tolist()],
              "kept_layers": kept, "dropped_layers": sorted(set(range(source.depth)) - set(kept))}
    return MethodResult(selected_stack(stack, source, target, kept, uniform), report)


def kept_layers(calibration, depth: int, keep: int) -> list[int]:
    """The `keep` of `depth` layers of largest block influence, in their order
    (also the SWS learngene's data-aware stage map, `learngenes.sws`)."""
    return most_important(calibration.block_influence().float(), min(keep, depth)).tolist()


METHOD = Method("block-influence", block_influence, (SHRINK,),
                "ShortGPT: keep the blocks that change their input most on calibration data",
                options=CALIBRATION_OPTIONS, calibrated=True)
