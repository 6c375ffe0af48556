"""Legacy PyTorch pickles (.pth, .pt, .bin, .ckpt), read with
``weights_only`` (tensors and plain containers, never code), and the state
dict unwrapped from a training checkpoint's containers."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any, Mapping

from ..errors import LgError, one_line, shown
from ..lazy import torch
from .hashing import _sha256_file
from .loaded import Checkpoint, dtype_names
from .memory import out_of_memory

# A training checkpoint's wrappers ({'model': {'state_dict': ...}}) are
# followed this deep at most.
MAX_WRAPPERS = 8
# Containers that training scripts wrap a state dict in (timm, DeiT, MAE, ...),
# in the order we prefer them.
WRAPPER_KEYS = ("model", "state_dict", "model_ema")
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def _read_pickle(path: Path) -> Checkpoint:
    # weights_only=True: the unpickler only rebuilds tensors and plain
    # containers, so a checkpoint that carries code cannot run it. torch's
    # own warnings (old protocols, storage types) are not the user's concern.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = _one_line(exc).split(". ")[0]
        raise LgError(f"{shown(path)}: refused: the pickle holds more than tensors, and lg never "
                      f"unpickles code ({first})") from None
    except RecursionError:
        raise LgError(f"{shown(path)}: refused: the pickle is nested too deeply") from None
    except MemoryError:
        raise LgError(f"{shown(path)}: refused: the pickle asks for more memory than there is") from None
    except Exception as exc:  # torch raises a variety of types on garbage
        # A tensor the allocator could not make (a RuntimeError) is memory
        # this machine lacks, not a file at fault.
        if (asked := out_of_memory(exc)) is not None:
            raise LgError(f"{shown(path)}: reading it needs more memory than is free"
                          f"{f' ({asked})' if asked else ''}") from None
        raise LgError(f"{shown(path)}: not a readable PyTorch checkpoint ({_one_line(exc)})") from None
    state = unwrap_state_dict(obj, str(path))
    return Checkpoint(tensors=state, metadata={}, digest=_sha256_file(path), source=str(path),
                      nbytes=path.stat().st_size)


def unwrap_state_dict(obj: Any, name: str) -> dict[str, torch.Tensor]:
    """The state dict inside a training checkpoint, with wrapper prefixes removed.

    Follows at most MAX_WRAPPERS wrapper keys and refuses a container that
    holds itself (a pickle can build ``d['model'] is d``)."""
    seen: set[int] = set()
    while isinstance(obj, Mapping):
        if id(obj) in seen or len(seen) >= MAX_WRAPPERS:
            raise LgError(f"{shown(name)}: refused: its wrappers ({'/'.join(WRAPPER_KEYS)}) "
                          f"{'contain themselves' if id(obj) in seen else 'nest too deeply'}")
        seen.add(id(obj))
        inner = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, Mapping):
        raise LgError(f"{shown(name)}: expected a state dict (a mapping of names to tensors), "
                      f"found {type(obj).__name__}")
    out: dict[str, torch.Tensor] = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise LgError(f"{shown(name)}: a state dict's keys are names; found the {type(key).__name__} "
                          f"{shown(repr(key)[:40])}")
        if not isinstance(value, torch.Tensor):
            raise LgError(f"{shown(name)}: entry {shown(key)} is a {type(value).__name__}, not a tensor")
        if value.layout != torch.strided:
            raise LgError(f"{shown(name)}: entry {shown(key)} is a sparse tensor ({value.layout}); "
                          f"lg reads dense tensors only (call .to_dense() and save again)")
        if value.device.type == "meta":
            raise LgError(f"{shown(name)}: entry {shown(key)} is a tensor on the meta device, which holds no "
                          f"values: this state dict describes a model without its weights")
        if value.dtype not in dtype_names():
            raise LgError(f"{shown(name)}: entry {shown(key)} has dtype {value.dtype}, which lg does not read "
                          f"(known: {', '.join(dtype_names().values())})")
        clean = key
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if clean.startswith(prefix):
                    clean, stripped = clean[len(prefix):], True
        if clean in out:
            raise LgError(f"{shown(name)}: entries {shown(key)} and another both name {shown(clean)} once "
                          f"{'/'.join(WRAPPER_PREFIXES)} prefixes are removed")
        out[clean] = value
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return one_line(text[0]) if text else "no details"
