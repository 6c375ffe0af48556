"""How sources and the files of a model folder are named: '-' for stdin or
stdout, and the names Hugging Face gives a model folder's config, weights
and shard index."""

from __future__ import annotations

import os

from ..errors import shown
from ..hub import hub_name_of_path

STDIO = "-"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# A Hugging Face model folder: its config and its weights (one file, or
# shards with an index).
CONFIG_NAME, WEIGHTS_NAME, PICKLED_WEIGHTS_NAME = "config.json", "model.safetensors", "pytorch_model.bin"
# A model folder's card, as the Hub shows it (lg writes one into every output folder).
README_NAME = "README.md"
# A PyTorch pickle's names (read with weights_only; lg never writes one, so
# an output under such a name is refused: torch.load would not read it).
PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
# The name provenance gives a model lg held in memory between two steps of
# one command (lg shrink's depth step before its width step): never a file.
IN_MEMORY = "<in memory>"


def _source_label(source: str) -> str:
    return "<stdin>" if source == STDIO else str(source)


def _display_name(source: str) -> str:
    """The source's file name as provenance records it: always valid Unicode,
    so the file reads back (a byte that is not UTF-8 in a name, which Python
    keeps as a lone surrogate, is written as \\xNN)."""
    if source == STDIO:
        return "<stdin>"
    # A cached snapshot's folder is named by its commit: the hub id says more.
    name = hub_name_of_path(source) or os.path.basename(str(source).rstrip("/"))
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def not_a_model_folder(folder: str | os.PathLike) -> str | None:
    """Why a folder holds no model by these names (neither a config beside
    its weights nor a shard index), as the reader says it; None when it
    may hold one (the reader checks the rest)."""
    has = {name: os.path.lexists(os.path.join(folder, name)) for name in (CONFIG_NAME, WEIGHTS_NAME, SAFETENSORS_INDEX)}
    if has[CONFIG_NAME] or has[SAFETENSORS_INDEX]:
        return None
    if has[WEIGHTS_NAME]:
        return f"{shown(str(folder))}: a model folder must hold {CONFIG_NAME} beside {WEIGHTS_NAME}"
    return (f"{shown(str(folder))}: a folder must hold a Hugging Face model ({CONFIG_NAME} and its weights) or "
            f"{SAFETENSORS_INDEX} (a sharded safetensors checkpoint)")
