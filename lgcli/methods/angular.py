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
    dropped_count = source.depth - target.depth
    report: dict[str, Any] = {"calibration": context.calibration.describe()}
    if dropped_count == 0:
        kept = list(range(source.depth))
    else:
        distance = context.calibration.angular_distance(dropped_count).float()
        start = int(torch_argmin_first(distance))
        kept = [l for l in range(source.depth) if not start <= l < start + dropped_count]
        report["angular_distance"] = [round(v, 6) for v in distance.tolist()]
    report.update(kept_layers=kept, dropped_layers=sorted(set(range(source.depth)) - set(kept)))
    return MethodResult(selected_stack(stack, source, target, kept, uniform), report)


def torch_argmin_first(values) -> int:
    """The index of the smallest value, the first of equal ones."""
    smallest = values.min()
    return int((values == smallest).nonzero()[0, 0])


METHOD = Method("angular", angular, (SHRINK,),
                "Gromov et al.: drop the contiguous blocks with the smallest angular distance on calibration data",
                options=CALIBRATION_OPTIONS, calibrated=True)
