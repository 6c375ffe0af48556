"""Writing a model: a (spec, stack) or a live model as its family's plain
checkpoint with lg's metadata, streamed group by group as its plan says
(`lgcli.outputs`), with its model card."""

from __future__ import annotations

import contextlib
import os
from typing import Any, BinaryIO, Iterator, Mapping

from .arch import get_adapter
from .card import CardFacts, model_card
from .checkpoint import STDIO, Checkpoint, atomic_path, provenance_metadata, write_tensors
from .lazy import nn, torch
from .loading import MODEL, Loaded, spec_of_model, task_of
from .outputs import CheckedOutput, carried_companions, checked_output, folder_files, plan_output
from .preprocessing import PREPROCESSING, preprocessing_of_spec, with_preprocessing
from .stack import ArchSpec, Stack


def save(destination: str | os.PathLike | CheckedOutput, spec: ArchSpec, stack: Stack, *, kind: str = MODEL,
         method: str | None = None, options: Mapping[str, Any] | None = None,
         source: Loaded | Checkpoint | None = None, companions: Checkpoint | None = None, force: bool = False,
         dtype: torch.dtype | None = None, stdout: BinaryIO | None = None,
         shard_size: int | None = None, card: CardFacts | None = None, card_file: str | None = None) -> str:
    """Write (spec, stack) as the family's plain checkpoint with lg metadata.

    The file is streamed: its header is written from the stack's shapes, then
    the adapter's groups of roles are made (a lazy stack computes them now)
    and written one group at a time, so only one group is ever in memory.
    Every float tensor is written in `dtype`, by default the source's (so
    bf16 in, bf16 out; methods compute in float32). Past `shard_size` bytes
    the output is a sharded folder with its index. A folder output holds
    its model card (README.md, `lgcli.card`), `card` adding what the
    metadata does not say; `card_file` gets the same text whatever the
    output. `destination` is checked (with the card file) unless it is a
    `CheckedOutput`, which the command checked before any work. Returns the
    sha256 of what was written. The tokenizer and other companion files are
    `source`'s, or those of `companions` where given (a live model has none).
    """
    # How an image model's images are prepared: what its metadata, folder
    # configs, load line and card all state (a live model's spec may carry none).
    spec = with_preprocessing(spec, preprocessing_of_spec(spec, get_adapter(spec.family)))
    parent = source.checkpoint if isinstance(source, Loaded) else source
    # Checked once: here, unless the command that was given it checked it before any work.
    target = checked_output(destination, force=force, inputs=(parent.source,) if parent else (),
                            card_file=card_file)
    destination, card_file = target.path, target.card_file
    plan = plan_output(target, spec, stack, source=source, dtype=dtype, shard_size=shard_size)
    folder_config = plan.folder_config
    adapter = get_adapter(spec.family)

    # A folder holds the source's tokenizer files beside the weights; a
    # single file (a pipe) carries them in its header, to the folder at its end.
    as_folder = folder_config is not None and str(destination) != STDIO
    holder = companions if companions is not None else parent
    files = folder_files(adapter, spec, holder, folder_config) if as_folder else None
    carried = {} if as_folder else carried_companions(holder)

    preprocessing = spec.extras.get(PREPROCESSING)

    def metadata(source_sha256: str | None = None) -> dict[str, str]:
        return {**provenance_metadata(kind=kind, family=spec.family, config=adapter.config(spec), method=method,
                                      options=options, source=parent, source_sha256=source_sha256,
                                      preprocessing=preprocessing.record() if preprocessing else None), **carried}

    def card_text(meta: Mapping[str, str], folder: bool) -> str:
        return model_card(spec, str(destination) if str(destination) != STDIO else "<file>", folder=folder,
                          metadata=meta, task=task_of(spec), parameters=stack.num_parameters(), source=parent,
                          facts=card)

    def readme(meta: Mapping[str, str]) -> bytes:
        return card_text(meta, folder=True).encode()

    # The source's sha256 (the provenance) is computed in the background from
    # the moment it is read. When the output is smaller than the source, the
    # work goes ahead while it finishes, and the header is completed at the
    # end: hashing the output back is then cheaper than waiting.
    with contextlib.ExitStack() as card_output:
        # The card's temporary file is made before the model is written, so a
        # --card that cannot be written fails before the model is (a command
        # that fails writes nothing); it is renamed into place just after.
        card_tmp = card_output.enter_context(atomic_path(card_file)) if card_file is not None else None
        if parent is not None and not parent.digest_ready and plan.tensor_bytes < parent.nbytes and files is None:
            digest = write_tensors(destination, plan.entries, _made(plan.groups), metadata("0" * 64), force=force,
                                   stdout=stdout, shard_size=shard_size, final_metadata=metadata, readme=readme)
        else:
            digest = write_tensors(destination, plan.entries, _made(plan.groups), metadata(), force=force,
                                   stdout=stdout, shard_size=shard_size, folder_files=files, readme=readme)
        if card_tmp is not None:
            card_tmp.write_text(card_text(metadata(), folder=os.path.isdir(destination)), encoding="utf-8")
    return digest


def _made(plan) -> Iterator[tuple[str, torch.Tensor]]:
    """The plan's tensors, group after group; what a group held is handed back
    to the system before the next is made (the peak stays one group's)."""
    from .checkpoint.memory import release_freed_memory

    for group in plan:
        yield from group.make()
        release_freed_memory()


def save_model(model: nn.Module, destination: str | os.PathLike, *, method: str | None = None,
               options: Mapping[str, Any] | None = None, source: Loaded | Checkpoint | None = None,
               force: bool = False, dtype: torch.dtype | None = None, family: str | None = None,
               stdout: BinaryIO | None = None) -> str:
    """Write a live timm model with lg metadata (heads, pooling, provenance)."""
    spec, stack = spec_of_model(model, family)
    return save(destination, spec, stack, method=method, options=options, source=source,
                force=force, dtype=dtype or next(model.parameters()).dtype, stdout=stdout)
