"""Learngene kinds, one module each (`tleg.py`, `wave.py`, `peg.py`, `sws.py`, `lets.py`), and their registry.

A kind condenses a teacher into its own tensors and expands them into a
canonical Stack of any size it can reach; `base.LearngeneKind` is the
protocol. The file format, `lg inspect` and the CLI know no kind's details:
they ask the kind. A kind reads no data and trains nothing itself: the
commands above do (`lgcli.condense`, and `lgcli.fitting` through the
`ExpandContext` a kind's `expand` is handed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError
from . import lets, peg, sws, tleg, wave
from ..stack import ArchSpec
from .base import ExpandContext, Learngene, LearngeneKind
from .stages import StagedKind

if TYPE_CHECKING:
    from .generated import GeneratedModel

KINDS: dict[str, LearngeneKind] = {kind.name: kind for kind in (tleg.KIND, wave.KIND, peg.KIND, sws.KIND, lets.KIND)}


def get_kind(name: str | None, spec: ArchSpec | None = None) -> LearngeneKind:
    """The kind `name`; for a model of stages (`spec.stages`: Swin), the kind
    applied stage by stage (`stages.StagedKind`)."""
    try:
        kind = KINDS[str(name)]
    except KeyError:
        raise UsageError(f"unknown learngene kind {name!r} (known: {', '.join(KINDS)})") from None
    return for_spec(kind, spec) if spec is not None else kind


def for_spec(kind: LearngeneKind, spec: ArchSpec) -> LearngeneKind:
    """`kind` as it applies to a model of `spec`: stage by stage for a model of stages."""
    return StagedKind(kind) if spec.stages else kind


def __getattr__(name: str):
    # GeneratedModel is an nn.Module: its module imports torch, so it is
    # imported when first asked for (PEP 562), not with the registry.
    if name == "GeneratedModel":
        from .generated import GeneratedModel

        return GeneratedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KINDS", "get_kind", "Learngene", "LearngeneKind", "GeneratedModel", "ExpandContext"]
