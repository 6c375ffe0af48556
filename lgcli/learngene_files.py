"""Learngene files: telling one from a model, reading one (its kind, the
configuration it expands from, its tensors by role) and writing one."""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Mapping

from .arch import get_adapter
from .checkpoint import Checkpoint, provenance_metadata, read_checkpoint, write_checkpoint
from .errors import LgError
from .loading import LEARNGENE, MODEL
from .outputs import CheckedOutput, carried_companions, checked_output
from .learngenes import Learngene, for_spec, get_kind
from .learngenes.base import check_tensors
from .preprocessing import PREPROCESSING, resolve, with_preprocessing


def is_learngene(checkpoint: Checkpoint) -> bool:
    return checkpoint.lg.get("kind") == LEARNGENE


def load_learngene(source: str | os.PathLike | Checkpoint, *, stdin: BinaryIO | None = None) -> Learngene:
    """Read a learngene file: its kind, the family configuration it expands
    from, its tensors by role, and what condensing recorded."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
    lg = checkpoint.lg
    if lg.get("kind", MODEL) != LEARNGENE:
        raise LgError(f"{checkpoint.label}: is a model checkpoint, not a learngene (make one with "
                      f"`lg condense TEACHER --method tleg|wave --data D -o OUT`)")
    try:
        named = get_kind(lg.get("method"))
    except LgError as exc:  # what the file says, not a mistyped flag: a refusal of the file (exit 1)
        raise LgError(f"{checkpoint.label}: refused: metadata lg.method: {exc}") from None
    adapter = get_adapter(lg.get("family") or "")
    spec, template = adapter.template_from_config(lg.get("config") or {})
    try:  # the preprocessing its teacher was condensed with, for its descendants
        spec = with_preprocessing(spec, resolve(checkpoint, spec, adapter))
    except LgError as exc:
        raise LgError(f"{checkpoint.label}: {exc}") from None
    kind = for_spec(named, spec)
    info = lg.get("learngene") or {}
    sizes, condensed = info.get("sizes", {}), info.get("condensed", {})
    if not isinstance(sizes, dict) or not isinstance(condensed, dict):
        raise LgError(f"{checkpoint.label}: refused: metadata lg.learngene must hold objects 'sizes' and 'condensed'")
    learngene = Learngene(kind=kind.name, spec=spec, tensors=dict(checkpoint.tensors), sizes=sizes,
                          condensed=condensed, checkpoint=checkpoint)
    check_tensors(learngene, kind.expected_tensors(learngene, template), checkpoint.label)
    return learngene


def save_learngene(destination: str | os.PathLike | CheckedOutput, learngene: Learngene, *,
                   options: Mapping[str, Any] | None = None,
                   source: Checkpoint | None = None, force: bool = False,
                   stdout: BinaryIO | None = None) -> str:
    """Write a learngene file (kind ``learngene``): its tensors by role in
    float32, the family configuration it expands from, its sizes, the condense
    settings (`options`) and the teacher's provenance (`source`). `destination`
    is checked unless it is a `CheckedOutput` (checked before any work)."""
    destination = checked_output(destination, force=force, inputs=(source.source,) if source else ()).path
    adapter = get_adapter(learngene.spec.family)
    preprocessing = learngene.spec.extras.get(PREPROCESSING)
    metadata = provenance_metadata(kind=LEARNGENE, family=learngene.spec.family,
                                   config=adapter.config(learngene.spec), method=learngene.kind,
                                   options=options, source=source,
                                   learngene={"sizes": learngene.sizes, "condensed": learngene.condensed},
                                   preprocessing=preprocessing.record() if preprocessing else None)
    metadata.update(carried_companions(source))
    tensors = {name: t.detach().float().contiguous() for name, t in learngene.tensors.items()}
    return write_checkpoint(destination, tensors, metadata, force=force, stdout=stdout)
