"""Planning an output before any tensor is made: where it goes and in
which form (file, folder, shards, stream), every entry and its dtype, the
model folder's companion files, and a --card file beside it. `save` writes
what the plan says; `--dry-run` reports it."""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .arch import get_adapter
from .checkpoint import (STDIO, Checkpoint, atomic_path, check_form, check_output, companion_bytes,
                         companion_metadata, companion_size)
from .checkpoint.writing import shard_parts
from .errors import LgError, notify_stderr, shown
from .lazy import torch
from .loading import Loaded, dominant_dtype
from .stack import ArchSpec, Stack


@dataclass(frozen=True)
class CheckedOutput:
    """An output, and the --card file beside it, checked once
    (`checked_output`): before any work, by the command that was given them.
    What runs after (planning, saving) takes it as it is and checks only what
    it alone knows: the form the family writes (`check_form`). The writer's
    own guard at the moment of writing (`lgcli.checkpoint.writing`) is not a
    check of the user's path but the refusal of a file that appeared since."""

    path: str | os.PathLike
    force: bool
    card_file: str | None = None


def checked_output(destination: str | os.PathLike | CheckedOutput, *, force: bool,
                   inputs: tuple[str | os.PathLike, ...] = (), card_file: str | None = None,
                   folder: bool | None = None) -> CheckedOutput:
    """Refuse an output (and a --card file) that exists without force, is or
    holds an input, or cannot be written; one already checked is returned as
    it is (it carries its own card file). `folder`, where the caller knows
    the form before any work (a learngene is one file: False), has the form
    checked too (`check_form`), not only once the model is planned."""
    if isinstance(destination, CheckedOutput):
        if card_file is not None and card_file != destination.card_file:  # a caller's bug, not a user error
            raise ValueError("a checked output carries its own card file")
        return destination
    check_output(destination, force=force, inputs=inputs, folder=folder)
    if card_file is not None:
        check_card_file(card_file, destination, force=force, inputs=inputs)
    return CheckedOutput(destination, force, card_file)


@dataclass
class OutputPlan:
    """What `save` will write, known before any tensor is made: the
    adapter's groups of tensors, every entry (name, dtype, shape) in file
    order, and the form the output takes."""

    parent: Checkpoint | None
    folder_config: dict[str, Any] | None  # a model folder's config.json; None: weights only
    groups: list
    entries: list
    target_dtype: torch.dtype
    shards: int  # safetensors files the weights are split into

    @property
    def tensor_bytes(self) -> int:
        return sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in self.entries)

    def form(self, destination: str | os.PathLike) -> str:
        """stream ('-'), folder (a model folder), shards (a folder of shards) or file."""
        if str(destination) == STDIO:
            return "stream"
        return "folder" if self.folder_config is not None else "shards" if self.shards > 1 else "file"


def plan_output(destination: str | os.PathLike | CheckedOutput, spec: ArchSpec, stack: Stack, *,
                source: Loaded | Checkpoint | None = None, force: bool = False, dtype: torch.dtype | None = None,
                shard_size: int | None = None) -> OutputPlan:
    """Check the output (where it goes, unless `destination` was checked
    already; its form; that the family loads it strictly) and plan it from
    the stack's shapes alone: what `save` writes, and what `--dry-run` reports.
    `force` (overwrite an existing output) is read only when `destination`
    is a path: a `CheckedOutput` was checked with its own."""
    parent = source.checkpoint if isinstance(source, Loaded) else source
    target = checked_output(destination, force=force, inputs=(parent.source,) if parent else ())
    destination = target.path
    adapter = get_adapter(spec.family)
    # A folder's config.json, or None: the output is one file (the family's
    # form, or the source's: a timm ViT read from a timm hub folder).
    folder_config = adapter.folder_config(spec)
    groups = adapter.write_plan(spec, stack)
    shapes = {key: shape for group in groups for key, shape in group.entries}
    try:
        adapter.check_loadable(spec, shapes)  # what lg writes, the family's library loads strictly
    except LgError as refused:  # "refusing to write: ...": which output, said first
        raise LgError(f"{shown(str(destination))}: {refused}") from None
    # Each tensor in its own dtype in the source (blocks float16 and the rest
    # float32 stay so), a new one (a grown block) in the source's dominant
    # dtype; `dtype` sets every one.
    target_dtype = dtype or (dominant_dtype(parent.tensors) if parent else None) or torch.float32
    entries = [(key, dtype or _own_dtype(parent, key) or target_dtype, shape) for key, shape in shapes.items()]
    shards = 1 if str(destination) == STDIO else len(shard_parts(entries, shard_size))
    plan = OutputPlan(parent=parent, folder_config=folder_config, groups=groups, entries=entries,
                      target_dtype=target_dtype, shards=shards)
    # Shards are a folder whatever the family writes: the form is known once they are.
    check_form(destination, folder=folder_config is not None, shards=shards, shard_size=shard_size,
               weight_bytes=plan.tensor_bytes if len(entries) > 1 else None)
    return plan


def check_card_file(card_file: str, destination: str | os.PathLike, *, force: bool,
                    inputs: tuple[str | os.PathLike, ...] = ()) -> None:
    """Refuse a --card file as an output is refused (exists without force,
    an input, no such folder), or one that names the output itself."""
    if card_file == STDIO or os.path.abspath(card_file) == os.path.abspath(destination):
        raise LgError(f"--card {card_file}: give a file of its own for the model card (not the output, not '-')")
    name = card_file.rstrip("/" + os.sep)
    if name != card_file:
        raise LgError(f"--card {card_file}: names a folder; the model card is one file: give a file name"
                      + (f" (--card {shlex.quote(name + '.md')})" if name else ""))
    check_output(card_file, force=force, inputs=inputs, model=False)


def write_card(card_file: str, text: str, *, force: bool) -> None:
    """The model card as a file of its own, written as outputs are (atomically; never over one without force)."""
    check_output(card_file, force=force, model=False)
    with atomic_path(card_file) as tmp:
        tmp.write_text(text, encoding="utf-8")


# Companions up to this size are read, for the adapter to rewrite a size
# they state (a pooling config); larger ones (tokenizers) are streamed as they are.
REWRITTEN_COMPANION_BYTES = 1 << 20


def folder_files(adapter, spec: ArchSpec, parent: Checkpoint | None,
                 config: Mapping[str, Any]) -> dict[str, Any]:
    """What a model folder holds beside its weights: `config` (the adapter's
    `folder_config`) as config.json, and the source folder's tokenizer and
    generation files, copied (the adapter rewrites what states a size)."""
    import json

    files: dict[str, Any] = {"config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()}
    companions = parent.companions if parent is not None else {}
    for name, item in companions.items():
        if companion_size(item) > REWRITTEN_COMPANION_BYTES:
            files[name] = item
        else:
            files[name] = adapter.rewrite_companion(name, companion_bytes(companions, name), spec)
    # What the family writes where the source had none (an image model's preprocessor_config.json).
    for name, data in adapter.written_companions(spec).items():
        files.setdefault(name, data)
    return files


def carried_companions(parent: Checkpoint | None, notify: Callable[[str], None] = notify_stderr) -> dict[str, str]:
    """The metadata entries that carry the source's tokenizer (and other
    companion) files through a single file: a pipe, or a learngene, whose
    model folder at the end of the line then holds them again."""
    if parent is None or not parent.companions:
        return {}
    entries, total = companion_metadata(parent.companions)
    if not entries:
        notify(f"the source's tokenizer and config files hold {total / 2**20:.0f} MiB, more than a safetensors "
               f"header carries: copy them into the final model folder yourself")
    return entries


def _own_dtype(parent: Checkpoint | None, key: str) -> torch.dtype | None:
    """The floating dtype of the source's tensor of that name, if it has one."""
    tensor = parent.tensors.get(key) if parent is not None else None
    return tensor.dtype if tensor is not None and tensor.is_floating_point() else None
