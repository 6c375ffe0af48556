"""Angular distance of a block of layers (Gromov et al. 2024, "The
unreasonable ineffectiveness of the deeper layers"; SPEC.md "Data-aware
resizing"): drop the n contiguous blocks whose output is closest to their
input.

d(l, n) = E[arccos(cos(h_l, h_{l+n}))] / π over the calibration positions
(every position, where the paper takes each sequence's last token:
`lgcli.calibration`). With n = L - D, the blocks l*..l*+n-1 are dropped,
l* = argmin_l d(l, n) (the first on ties). Any width change keeps weight
selection's uniform elements.
"""

from __future__ import annotations

from typing import Any

from ..stack import ArchSpec, Stack
from .calibrated import CALIBRATION_OPTIONS, selected_stack, uniform
from .common import SHRINK, Method, MethodContext, MethodResult


def angular(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
            context: MethodContext) -> MethodResult:
    report: dict[str, Any] = {"calibration": context.calibration.describe()}
    kept = kept_layers(context.calibration, source.depth, target.depth)
    if target.depth < source.depth:
        distance = context.calibration.angular_distance(source.depth - target.depth).float()
        report["angular_distance"] = [round(v, 6) for v in distance.tolist()]
    report.update(kept_layers=kept, dropped_layers=sorted(set(range(source.depth)) - set(kept)))
    return MethodResult(selected_stack(stack, source, target, kept, uniform), report)


def kept_layers(calibration, depth: int, keep: int) -> list[int]:
    """The `keep` of `depth` layers this method keeps: all but the n = depth -
    keep contiguous blocks from l* = argmin_l d(l, n) (also the SWS
    learngene's data-aware stage map, `learngenes.sws`)."""
    dropped_count = depth - keep
    if dropped_count <= 0:
        return list(range(depth))
    start = torch_argmin_first(calibration.angular_distance(dropped_count).float())
    return [l for l in range(depth) if not start <= l < start + dropped_count]


def torch_argmin_first(values) -> int:
    """The index of the smallest value, the first of equal ones."""
    smallest = values.min()
    return int((values == smallest).nonzero()[0, 0])


METHOD = Method("angular", angular, (SHRINK,),
                "Gromov et al.: drop the contiguous blocks with the smallest angular distance on calibration data",
                options=CALIBRATION_OPTIONS, calibrated=True)
