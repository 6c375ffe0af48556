"""Where an output may go: refused when it exists (without force), is or
holds an input, lies inside an input folder or the Hugging Face cache
(which lg only reads), or is not a file or a model folder lg could have
written (an empty folder takes a model folder), and when its name says
another form than lg writes (a folder, one file, a PyTorch pickle).
Checked before any work, so that a bad output path fails fast; the writer
checks again."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import stat
import sys
from pathlib import Path

from ..errors import LgError, os_reason, shown
from .atomic import is_empty_folder
from .companions import COMPANION_FOLDER, is_companion_name
from .names import (CONFIG_NAME, PICKLE_SUFFIXES, README_NAME, SAFETENSORS_INDEX, STDIO, WEIGHTS_NAME,
                    not_a_model_folder)


def check_output(destination: str | os.PathLike, *, force: bool,
                 inputs: tuple[str | os.PathLike, ...] = (), folder: bool | None = None,
                 model: bool = True) -> None:
    """Refuse an output that exists (without force), is an input, or cannot be written.

    `folder`: whether the output is a model folder (a Hugging Face model),
    one file (a timm checkpoint, a learngene), or not known yet (None). Called
    before any work, so a bad output path fails fast; the writer checks again.
    An empty folder is taken (it holds nothing to lose) unless the output is
    one file (`check_form` says what to name instead once the form is known).
    `model`: False for a file that holds no weights (a model card): its form
    and name are its caller's to check, and an empty folder is refused.
    """
    dst = str(destination)
    if dst == STDIO:
        return
    path = Path(dst)
    if folder is not None and model:
        check_form(dst, folder=folder)
    _refuse_output_in_hub_cache(path)
    for src in inputs:
        _refuse_output_over_input(path, str(src))
    if os.path.lexists(path):
        kind = _not_a_file_or_folder(os.lstat(path).st_mode)
        if kind:  # cp writes through a device, mv replaces it; lg does neither
            raise LgError(f"{shown(dst)}: is {kind}, not a file; lg writes only files and model folders "
                          f"(for a pipe, use -o -)")
    if _names_folder(dst) and os.path.lexists(path) and not path.is_dir():
        # As `cp x FILE/` (not a directory): --force replaces an output, it does not change its form.
        raise LgError(f"{shown(dst)}: {_not_a_folder(path)}, not a folder (a trailing / names a folder; "
                      f"--force would not change that): choose another output")
    empty = False
    if path.is_dir() and not path.is_symlink():
        reason = _not_replaceable(path)
        empty = reason == EMPTY_FOLDER and model and folder is not False
        if reason and not empty:
            raise LgError(f"{shown(dst)}: {reason}; lg replaces only a model folder it could have written, and "
                          f"never deletes anything else: choose another output")
    if os.path.lexists(path) and not force and not empty:
        raise LgError(f"{shown(dst)}: exists; pass --force to overwrite it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        blocking = next((part for part in parent.parents if os.path.lexists(part) and not part.is_dir()), None)
        if os.path.lexists(parent) or blocking is not None:  # a file where a folder is needed
            part = parent if os.path.lexists(parent) else blocking
            raise LgError(f"{shown(dst)}: a part of the path is not a folder ({shown(str(part))} "
                          f"{_not_a_folder(part)})")
        raise LgError(f"{shown(dst)}: folder {shown(parent)} does not exist")


def check_form(destination: str | os.PathLike, *, folder: bool, shards: int = 1, shard_size: int | None = None,
               weight_bytes: int | None = None) -> None:
    """Refuse an output name that says the other form: a folder name (a
    trailing slash, or an empty folder) for a model written as one file, a
    `.safetensors` name for a model folder or a folder of shards, and a
    PyTorch pickle's name (`.pt`, `.pth`, `.bin`, `.ckpt`) for any: lg writes
    safetensors, which torch.load does not read. Known only once the model's
    family has planned its output (`lgcli.outputs.plan_output`), so apart
    from `check_output`'s other checks.

    `shards`: the safetensors files the weights are split into; more than
    one are a folder whatever the family writes, so `-o DIR/` names it.
    `shard_size`: the --shard-size that split them (None: the caller takes
    none). `weight_bytes`: the bytes of weights that could be split (two
    tensors or more; None: they cannot be), for the --shard-size a refused
    folder name is told to add."""
    dst = str(destination)
    if dst == STDIO:
        return
    one_file = not folder and shards <= 1
    name = dst.rstrip("/" + os.sep)
    if one_file and (_names_folder(dst) or is_empty_folder(Path(dst))):
        # An empty folder made for the output (`mkdir out`): the file goes inside it.
        inside = name and is_empty_folder(Path(dst))
        better = f"{name}/{WEIGHTS_NAME}" if inside else f"{name}.safetensors"
        as_file = f" (-o {shlex.quote(better)})" if name else ""
        as_shards = (f", or add --shard-size {shard_size_below(weight_bytes)} to write it as a folder of shards"
                     if shard_size is not None and weight_bytes is not None and weight_bytes > 1 else "")
        said = "names a folder" if _names_folder(dst) else "is an empty folder"
        raise LgError(f"{shown(dst)}: {said}; this model is one file: give a file name for the "
                      f"output{as_file}{as_shards}")
    suffix = Path(dst).suffix
    if suffix.lower() in PICKLE_SUFFIXES and not _names_folder(dst) and not Path(dst).is_dir():
        # A pickle's name on safetensors: torch.load('out.pt') fails on what lg wrote.
        stem = dst[:-len(suffix)]
        if one_file:
            raise LgError(f"{shown(dst)}: lg writes safetensors, not a PyTorch pickle (torch.load would not read "
                          f"it): give a .safetensors name (-o {shlex.quote(stem + '.safetensors')})")
        raise LgError(f"{shown(dst)}: lg writes this model as a folder of safetensors files, not a PyTorch "
                      f"pickle: give a folder name (-o {shlex.quote(stem + '/')})")
    if shards > 1 and not folder and suffix == ".safetensors" and not Path(dst).is_dir():
        # Shards are a folder: a name that says "one file" would not load as one.
        at = f"at --shard-size {shard_size:,} bytes " if shard_size is not None else ""
        raise LgError(f"{shown(dst)}: {at}the output is {shards} shards, which lg writes as a folder: give a "
                      f"folder name (no .safetensors suffix), or a larger --shard-size (0 never shards)")
    if folder and suffix == ".safetensors" and not Path(dst).is_dir():
        raise LgError(f"{shown(dst)}: a Hugging Face model is written as a folder (config.json, weights, "
                      f"tokenizer) that from_pretrained or timm's local-dir: loads: give a folder name, "
                      f"or -o - for a pipe")


def shard_size_below(total: int) -> str:
    """A --shard-size (as `parse_byte_size` reads it) of at most half of
    `total` bytes, so that weights of that size and two tensors or more are
    at least two shards: 605KB for 1,210,132 bytes."""
    half = max(total // 2, 1)
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if half >= scale:
            return f"{half // scale}{unit}"
    return str(half)


def _names_folder(dst: str) -> bool:
    """Whether the output's name ends in a slash: a folder, whatever is there."""
    return dst.endswith(("/", os.sep))


def _not_a_folder(path: Path) -> str:
    """What a path that is not a folder is, in words: "is a file", "is a link to nothing"."""
    if path.is_symlink():
        return "is a link to a file" if path.exists() else "is a link to nothing"
    return "is a file" if path.is_file() else "is not a folder"


# What a model folder may hold besides the files lg writes: what a Hugging
# Face snapshot adds (replacing the folder loses nothing that was not downloaded).
HUB_FILES = (README_NAME, ".gitattributes")
WEIGHT_FILE = re.compile(r"^(model|pytorch_model)(-[0-9]{5}-of-[0-9]{5})?\.(safetensors|bin)(\.index\.json)?$",
                         re.ASCII)
# Why `_not_replaceable` refuses an empty folder: `check_output` takes one for a model folder.
EMPTY_FOLDER = "is an empty folder"


def _not_replaceable(path: Path) -> str | None:
    """Why the folder `path` is not a model folder lg may replace (None when
    it is): it must hold a model (a Hugging Face config.json naming its
    model_type, or a shard index with a weight map) with its weights, and
    nothing but the files lg writes beside them (and a hub's README)."""
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        return f"is a folder lg cannot list ({os_reason(exc)})"
    if not entries:
        return EMPTY_FOLDER
    described = _json_object(path / CONFIG_NAME)
    index = _json_object(path / SAFETENSORS_INDEX)
    # A timm hub folder's config.json names its architecture, with its
    # constructor arguments or preprocessing, instead (lgcli.arch.vit reads it).
    timm_config = isinstance(described.get("architecture"), str) and any(
        isinstance(described.get(key), dict) for key in ("model_args", "pretrained_cfg"))
    if not (isinstance(described.get("model_type"), str) or timm_config or isinstance(index.get("weight_map"), dict)):
        return (f"is a folder that holds no model (no {CONFIG_NAME} naming a model_type or a timm architecture, "
                f"no {SAFETENSORS_INDEX} with a weight map)")
    if not any(WEIGHT_FILE.match(name) for name in entries):
        return "is a folder that holds a model's config but no weights"
    for name in entries:
        entry = path / name
        known = (name == CONFIG_NAME or name in HUB_FILES or WEIGHT_FILE.match(name)
                 or (is_companion_name(name) and entry.is_file() and not entry.is_symlink())
                 or (COMPANION_FOLDER.match(name) and entry.is_dir() and not entry.is_symlink()
                     and all(is_companion_name(f"{name}/{inner}") for inner in os.listdir(entry))))
        if not known:
            return f"holds {shown(name)}, which is not part of a model lg writes"
    return None


def _json_object(path: Path) -> dict:
    """A small JSON file's object, or {} (missing, unreadable, not an object)."""
    try:
        if not path.is_file() or path.stat().st_size > 1 << 24:
            return {}
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _not_a_file_or_folder(mode: int) -> str | None:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def _refuse_output_in_hub_cache(path: Path) -> None:
    """huggingface_hub owns its cache: a snapshot's files are links into
    blobs/ shared by revisions, and a hub id names what is there. An output
    written anywhere in it (over a hub id's snapshot, say) would change what
    that id means to lg and to transformers, so lg only reads the cache."""
    from ..hub import hub_cache

    cache = hub_cache()
    given, target = Path(os.path.abspath(path)), _resolved(path)
    if _inside(given, Path(os.path.abspath(cache))) or _inside(target, Path(os.path.realpath(cache))):
        raise LgError(f"{shown(str(path))}: is inside the Hugging Face cache ({shown(cache)}), which lg only reads "
                      f"(a hub id names what is there): write the output elsewhere")


def _refuse_output_over_input(path: Path, src: str) -> None:
    """The output may not be an input, lie inside an input folder (a shard,
    its config or tokenizer), or be a folder that holds an input: each would
    modify or delete what is being read (`lg shrink m -o m/config.json`).
    For stdin, the file the shell redirected (``< v.safetensors``)."""
    dst = shown(str(path))
    if src == STDIO:
        try:
            given = os.fstat(sys.stdin.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return  # not a file descriptor (a notebook, a test): nothing on disk to protect
        if os.path.exists(path) and stat.S_ISREG(given.st_mode):
            here = os.stat(path)
            if (here.st_dev, here.st_ino) == (given.st_dev, given.st_ino):
                raise LgError(f"{dst}: the output is the file on stdin; lg never modifies its inputs")
        return
    source = Path(src)
    if not source.exists():
        return
    if path.exists() and path.samefile(source):
        raise LgError(f"{dst}: the output is an input; lg never modifies its inputs")
    # A shard index reads the folder it is in.
    folder = source if source.is_dir() else (source.parent if source.name.endswith(".index.json") else None)
    target = _resolved(path)
    if folder is not None and _inside(target, folder.resolve()):
        problem = not_a_model_folder(source) if source.is_dir() else None
        if problem:  # an input that is no model is told so first
            raise LgError(problem)
        raise LgError(f"{dst}: is inside the input folder {shown(str(folder))}; lg never modifies its inputs: "
                      f"write the output elsewhere")
    if path.is_dir() and _inside(source.resolve(), target):
        raise LgError(f"{dst}: the output folder holds the input {shown(src)}; replacing it would delete the input")


def _resolved(path: Path) -> Path:
    """`path` made absolute through its existing folders (the last part may not exist yet)."""
    return path.parent.resolve() / path.name if not path.exists() else path.resolve()


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
