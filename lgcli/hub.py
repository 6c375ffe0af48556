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
    local cache, never leaving it; a one-line LgError that names the path
    when a step leads elsewhere, and says how to get the model when it is not
    there.

    Each step keeps huggingface_hub's rules for its cache (its
    file_download: refs/<revision> holds the 40-hex commit the revision
    points to, snapshots/<commit> is a folder of the repository's own, and a
    snapshot's files are links into the same repository's blobs/), and
    anything else is refused rather than followed: a ref holding a path
    (``../../elsewhere``, ``/abs``), a snapshot folder that is a link, a
    file linking outside blobs/. Nothing is downloaded or requested."""
    cache = hub_cache()
    repo_folder = Path(cache) / (REPO_FOLDER_PREFIX + repo_id.replace("/", REPO_ID_SEPARATOR))
    try:
        if not repo_folder.is_dir():
            raise LgError(_not_cached_message(repo_id, revision, cache))
        real_repo = Path(os.path.realpath(repo_folder))
        if real_repo.parent != Path(os.path.realpath(cache)):
            raise LgError(f"{shown(repo_folder)}: is a link out of the Hugging Face cache ({shown(cache)}); "
                          f"lg reads a cached model only inside the cache")
        commit = _commit_of(repo_folder, real_repo, revision, repo_id, cache)
        snapshot = repo_folder / "snapshots" / commit
        if not os.path.lexists(snapshot):
            raise LgError(_not_cached_message(repo_id, revision, cache))
        if os.path.realpath(snapshot) != str(real_repo / "snapshots" / commit) or not snapshot.is_dir():
            raise LgError(f"{shown(snapshot)}: is not a snapshot folder of the cache (a link, or not a folder); "
                          f"lg reads a cached model only from the repository's own snapshots/ and blobs/")
        _check_snapshot_links(snapshot, real_repo)
        _check_complete(repo_id, commit, cache, repo_folder, revision)
    except OSError as exc:
        raise LgError(f"{shown(cache)}: cannot read the Hugging Face cache ({os_reason(exc)})") from None
    return str(snapshot)


def _check_complete(repo_id: str, commit: str, cache: str, repo_folder: Path, revision: str | None) -> None:
    """Refuse a snapshot that huggingface_hub's own listing of the commit's
    files (trees/<commit>.json) says lacks some: a download cut short. Its
    offline snapshot_download (local_files_only: no request at all) checks
    that, at the commit already resolved above. HF_HUB_OFFLINE is not set
    here: it is read once, when huggingface_hub is imported, and would turn
    a notebook's later downloads (transformers' from_pretrained) off."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot_download(repo_id, revision=commit, cache_dir=cache, local_files_only=True)
    except LocalEntryNotFoundError:
        wanted = repo_id if revision is None else f"{repo_id}@{revision}"
        raise LgError(f"{wanted}: its snapshot in the local Hugging Face cache ({repo_folder}) is incomplete; "
                      f"{_how_to_get(repo_id, revision)}") from None


def _commit_of(repo_folder: Path, real_repo: Path, revision: str | None, repo_id: str, cache: str) -> str:
    """The commit `revision` names: itself when it is a 40-hex commit, else
    what refs/<revision> holds, which must be one (huggingface_hub writes
    nothing else there)."""
    if revision is not None and COMMIT_HASH.fullmatch(revision):
        return revision
    name = revision or DEFAULT_REVISION
    ref = repo_folder / "refs" / name
    if not os.path.lexists(ref):
        raise LgError(_not_cached_message(repo_id, revision, cache))
    if os.path.realpath(ref) != str(real_repo / "refs" / name) or not ref.is_file():
        raise LgError(f"{shown(ref)}: is not a file of the cache's own (a link, or not a file); lg reads a "
                      f"revision only from the repository's refs/")
    if ref.stat().st_size > 4096:
        raise LgError(f"{shown(ref)}: over 4 KiB; a revision's ref holds one commit hash")
    held = ref.read_text(errors="replace").strip()
    if not held:
        raise LgError(f"{shown(ref)}: is empty, where the commit of revision {shown(name)} belongs (a download "
                      f"cut short?); download {repo_id} again")
    if not COMMIT_HASH.fullmatch(held):
        raise LgError(f"{shown(ref)}: holds {shown(held[:80])}, not a 40-hex commit hash; lg follows a revision "
                      f"only to the snapshot of the commit it names")
    return held


def _check_snapshot_links(snapshot: Path, real_repo: Path) -> None:
    """Refuse a snapshot that leads outside its repository: every link in it
    (at any depth) must lead to a file directly in the same repository's
    blobs/, as huggingface_hub makes them; its folders must be folders, not
    links. A plain file (a cache made without links) is the repository's own."""
    blobs = real_repo / "blobs"
    for folder, folders, files in os.walk(snapshot):
        for name in folders + files:
            entry = Path(folder) / name
            if not entry.is_symlink():
                continue
            target = Path(os.path.realpath(entry))
            if name in folders or target.parent != blobs or not target.is_file():
                raise LgError(f"{shown(entry)}: links to {shown(os.readlink(entry))}, outside the repository's "
                              f"blobs/ ({shown(blobs)}); lg follows a cached snapshot's links into its own blobs/ "
                              f"only")


def _how_to_get(repo_id: str, revision: str | None) -> str:
    download = f"hf download {repo_id}" + ("" if revision is None else f" --revision {revision}")
    return (f"lg never downloads: fetch it where there is a network with `{download}` and copy the cache here, "
            f"or pass a local path")


def _not_cached_message(repo_id: str, revision: str | None, cache: str) -> str:
    """Why `repo_id@revision` is not in the cache, and how to put it there."""
    wanted = repo_id if revision is None else f"{repo_id}@{revision}"
    how = _how_to_get(repo_id, revision)
    repo_folder = Path(cache) / (REPO_FOLDER_PREFIX + repo_id.replace("/", REPO_ID_SEPARATOR))
    if not repo_folder.is_dir():
        org, name = repo_id.split("/")
        if revision is None and os.path.isdir(org):  # a local path mistyped, more likely than a hub id
            return (f"{repo_id}: no such file or folder ({org}/ holds no {name}), nor a model of that id in the "
                    f"local Hugging Face cache ({cache})")
        return f"{wanted} is not in the local Hugging Face cache ({cache}); {how}"
    name = revision or DEFAULT_REVISION
    ref = repo_folder / "refs" / name
    if not COMMIT_HASH.fullmatch(name) and ref.is_file() and not ref.is_symlink():
        commit = ref.read_text(errors="replace").strip()
        if COMMIT_HASH.fullmatch(commit):  # the revision is there, its snapshot is not
            return (f"{wanted}: revision {shown(name)} names commit {commit}, whose snapshot is not in the local "
                    f"Hugging Face cache ({repo_folder}); {how}")
    refs = repo_folder / "refs"
    held_refs = sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file()) if refs.is_dir() else []
    holds = f"it holds {', '.join(held_refs)}" if held_refs else "it holds no named revision"
    return (f"{repo_id}: revision {shown(name)} is not in the local Hugging Face cache "
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
