"""Hub ids (`org/name`, `org/name@revision`) read from the local Hugging Face
cache, never from the network.

`resolve_source` turns a source argument into a local path: `-` and any path
that exists are returned as they are; a hub id becomes its snapshot in the
cache (`<cache>/models--org--name/snapshots/<commit>`), found by
huggingface_hub's own offline look-up, so HF_HUB_CACHE and HF_HOME mean what
they mean to `hf download` and transformers. huggingface_hub is imported only
when a hub id is resolved.

The other functions describe a path inside that cache: the blobs folder a
snapshot's links lead to (the reader follows those links and no others), and
the `org/name@commit` a snapshot path stands for (provenance and `lg inspect`
name it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .errors import LgError, os_reason, shown

STDIO = "-"

# A repository name as the Hub allows it: ASCII letters, digits, '.', '_'
# and '-', starting and ending with a letter or digit, at most 96 characters
# (huggingface_hub's validator also forbids '--' and '..', checked below).
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
# A revision: a commit hash, or a branch or tag, which may hold '/' (refs/pr/1).
_REVISION = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:/[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)*"
HUB_ID = re.compile(rf"(?P<repo_id>{_NAME}/{_NAME})(?:@(?P<revision>{_REVISION}))?", re.ASCII)
COMMIT_HASH = re.compile(r"[0-9a-f]{40}", re.ASCII)
# A name ending as a checkpoint file does is a file the user meant (a typo, a
# missing folder), never a hub id: it keeps the reader's "no such file" message.
FILE_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".json")
DEFAULT_REVISION = "main"
CONFIG_NAME, WEIGHTS_NAME, PICKLED_WEIGHTS_NAME = "config.json", "model.safetensors", "pytorch_model.bin"
# A model repository's folder in the cache: models--{org}--{name} (huggingface_hub's repo_folder_name).
REPO_FOLDER_PREFIX, REPO_ID_SEPARATOR = "models--", "--"


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """(repo_id, revision or None) when `text` is spelled as a hub id, else None."""
    match = HUB_ID.fullmatch(text)
    if match is None:
        return None
    repo_id = match["repo_id"]
    revision = match["revision"]
    if "--" in repo_id or ".." in repo_id or (revision is not None and ".." in revision):
        return None
    if repo_id.lower().endswith(FILE_SUFFIXES):
        return None
    return repo_id, revision


def resolve_source(text: str) -> str:
    """The local path a source argument stands for.

    `-` and an existing path come back unchanged: a local path ALWAYS wins
    over a hub id of the same spelling (a folder `org/name` in the current
    folder is read, not the cache), so that what is on disk where the user
    stands is never silently replaced. A hub id (`org/name`, `org/name@rev`)
    becomes the model in its cached snapshot (`model_in_snapshot`); anything
    else comes back unchanged, for the reader to say there is no such file."""
    if text == STDIO or os.path.lexists(text):
        return text
    parsed = parse_hub_id(text)
    if parsed is None:
        return text
    repo_id, revision = parsed
    return model_in_snapshot(Path(cached_snapshot(repo_id, revision)))


def hub_cache() -> str:
    """The cache huggingface_hub reads: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub (its own constant, so lg and `hf download`
    never disagree)."""
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def cached_snapshot(repo_id: str, revision: str | None) -> str:
    """The snapshot folder of `repo_id` at `revision` (default: main) in the
    local cache, found by huggingface_hub offline; a one-line LgError that
    says how to get it when it is not there."""
    # local_files_only=True: snapshot_download reads refs/<revision> and
    # snapshots/<commit> from the cache and makes no request at all. HF_HUB_OFFLINE
    # is not set here: it is read once, when huggingface_hub is imported, and
    # would turn a notebook's later downloads (transformers' from_pretrained) off.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = hub_cache()
    try:
        return snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=True)
    except LocalEntryNotFoundError:
        raise LgError(_not_cached_message(repo_id, revision, cache)) from None
    except HFValidationError as exc:
        raise LgError(f"{shown(repo_id)}: not a Hugging Face model id ({exc})") from None
    except OSError as exc:
        raise LgError(f"{shown(cache)}: cannot read the Hugging Face cache ({os_reason(exc)})") from None


def _not_cached_message(repo_id: str, revision: str | None, cache: str) -> str:
    """Why `repo_id@revision` is not in the cache, and how to put it there."""
    wanted = repo_id if revision is None else f"{repo_id}@{revision}"
    download = f"hf download {repo_id}" + ("" if revision is None else f" --revision {revision}")
    how = (f"lg never downloads: fetch it where there is a network with `{download}` and copy the cache here, "
           f"or pass a local path")
    repo_folder = Path(cache) / (REPO_FOLDER_PREFIX + repo_id.replace("/", REPO_ID_SEPARATOR))
    if not repo_folder.is_dir():
        return f"{wanted} is not in the local Hugging Face cache ({cache}); {how}"
    commit = revision if revision is not None and COMMIT_HASH.fullmatch(revision) else None
    ref = repo_folder / "refs" / (revision or DEFAULT_REVISION)
    if commit is None and ref.is_file():
        commit = ref.read_text().strip()
    if commit is not None and (repo_folder / "snapshots" / commit).is_dir():
        # snapshot_download found the snapshot but its cached file list says files are missing.
        return f"{wanted}: its snapshot in the local Hugging Face cache ({repo_folder}) is incomplete; {how}"
    refs = repo_folder / "refs"
    held = sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file())
    holds = f"it holds {', '.join(held)}" if held else "it holds no named revision"
    return (f"{repo_id}: revision {shown(revision or DEFAULT_REVISION)} is not in the local Hugging Face cache "
            f"({repo_folder}; {holds}); {how}")


def model_in_snapshot(snapshot: Path) -> str:
    """What lg reads in a snapshot: the folder itself when it is a model
    folder lg reads (its config.json names a transformers model_type, or a
    timm architecture, as timm's hub folders do: their sizes and heads come
    from it), else its single weights file."""
    config_path = snapshot / CONFIG_NAME
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_bytes())
        except (ValueError, OSError):
            config = None  # the folder reader says what is wrong with it
        if not isinstance(config, dict) or "model_type" in config or isinstance(config.get("architecture"), str):
            return str(snapshot)
    for weights in (WEIGHTS_NAME, PICKLED_WEIGHTS_NAME):
        if (snapshot / weights).is_file():
            return str(snapshot / weights)
    return str(snapshot)


def snapshot_blobs(folder: str | os.PathLike) -> Path | None:
    """The blobs folder of the cached repository whose snapshot `folder` is
    (`.../models--org--name/snapshots/<commit>`), or None when it is no snapshot.
    huggingface_hub stores each file once in blobs/ and makes the snapshot's
    files links to it: those links, and only those, the reader follows."""
    real = Path(os.path.realpath(folder))
    repo_folder = real.parent.parent
    if real.parent.name != "snapshots" or not repo_folder.name.startswith(REPO_FOLDER_PREFIX):
        return None
    blobs = repo_folder / "blobs"
    if blobs.is_symlink() or not blobs.is_dir():
        return None
    return blobs


def open_snapshot_link(folder: str | os.PathLike, name: str) -> int | None:
    """A read-only descriptor on the blob that `name` (a link in the snapshot
    `folder`, possibly in a subfolder) leads to, or None when `folder` is no
    snapshot or the link does not lead straight into its blobs folder. Only a
    file directly in blobs/ is opened, by its own name and without following
    any further link, whatever the link says."""
    blobs = snapshot_blobs(folder)
    if blobs is None:
        return None
    link = Path(folder) / name
    try:
        target = os.readlink(link)
    except OSError:
        return None
    blob_name = os.path.basename(target)
    target_folder = os.path.realpath(os.path.join(link.parent, os.path.dirname(target)))
    if blob_name in ("", ".", "..") or target_folder != str(blobs):
        return None
    blobs_fd = os.open(blobs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        # O_NONBLOCK: a FIFO in blobs/ must not block the open (the caller refuses it).
        return os.open(blob_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=blobs_fd)
    finally:
        os.close(blobs_fd)


def hub_name_of_path(path: str | os.PathLike) -> str | None:
    """`org/name@<commit>` when `path` is a cached snapshot or a file at its
    top (what `resolve_source` returns), else None."""
    path = Path(os.path.abspath(path))
    snapshot = path if path.parent.name == "snapshots" else path.parent
    repo_folder = snapshot.parent.parent
    if snapshot.parent.name != "snapshots" or not repo_folder.name.startswith(REPO_FOLDER_PREFIX):
        return None
    org_and_name = repo_folder.name[len(REPO_FOLDER_PREFIX):].split(REPO_ID_SEPARATOR)
    if len(org_and_name) != 2 or not COMMIT_HASH.fullmatch(snapshot.name):
        return None
    return f"{'/'.join(org_and_name)}@{snapshot.name}"
