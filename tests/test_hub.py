"""Hub ids (`org/name[@revision]`) read from the local Hugging Face cache,
offline: a cache laid out as huggingface_hub lays it out (refs/ -> snapshots/
-> links into blobs/) in tmp_path, and no socket may be opened."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_vit, run_lg
from text_models import load_strict, make_model, metadata, outputs, save_folder, token_ids

import lgcli
from lgcli.hub import parse_hub_id, resolve_source

COMMIT_MAIN = "a" * 40
COMMIT_V2 = "b" * 40
REPO_ID = "org/name"


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to resolve a host or connect a socket is recorded and
    refused; the test fails at its end if there was one."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("the network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield
    assert attempts == [], f"lg tried to reach the network: {attempts}"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, no_network) -> Path:
    """An empty Hugging Face cache that huggingface_hub, already imported in
    this process, reads (its constant is set as the environment would set it)."""
    import huggingface_hub.constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def add_to_cache(cache: Path, repo_id: str, folder: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> Path:
    """Put `folder` in the cache as huggingface_hub does: each file once in
    blobs/<sha256>, the snapshot's files relative links to it, each ref a
    file holding the commit. Returns the snapshot folder."""
    repo_folder = cache / ("models--" + repo_id.replace("/", "--"))
    blobs = repo_folder / "blobs"
    snapshot = repo_folder / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (repo_folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo_folder / "refs" / ref).write_text(commit)  # no newline, as huggingface_hub writes it
    return snapshot


def gpt2_folder(root: Path, name: str, **overrides) -> tuple[Path, torch.nn.Module]:
    model = make_model("gpt2-lm", **overrides)
    return save_folder(model, root / name, "gpt2-lm"), model


def blob_digests(cache: Path) -> dict[str, str]:
    return {str(p.relative_to(cache)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(cache.rglob("*")) if p.is_file() and not p.is_symlink()}


def inspected(lg, source) -> dict:
    result = lg("inspect", source, "--json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def test_inspect_of_a_hub_id_is_the_inspection_of_its_snapshot(hub_cache, tmp_path, lg):
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    snapshot = add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    by_id = inspected(lg, REPO_ID)
    assert by_id == inspected(lg, snapshot)
    assert by_id == {**inspected(lg, folder), "file": by_id["file"], "hub": by_id["hub"],
                     "load_call": by_id["load_call"]}
    assert Path(by_id["file"]).resolve() == snapshot.resolve()
    assert by_id["hub"] == f"{REPO_ID}@{COMMIT_MAIN}"
    assert (by_id["family"], by_id["depth"], by_id["width"]) == ("gpt2", 3, 32)
    table = lg("inspect", REPO_ID)
    assert table.code == 0, table.stderr
    assert f"{REPO_ID}@{COMMIT_MAIN}" in table.stdout.decode()
    # The notebook surface resolves the same way.
    assert lgcli.load(REPO_ID).spec.depth == 3


def test_a_revision_resolves_by_commit_hash_and_by_named_ref(hub_cache, tmp_path, lg):
    main_folder, _ = gpt2_folder(tmp_path, "main")
    v2_folder, _ = gpt2_folder(tmp_path, "v2", n_layer=2)
    add_to_cache(hub_cache, REPO_ID, main_folder, COMMIT_MAIN)
    add_to_cache(hub_cache, REPO_ID, v2_folder, COMMIT_V2, refs=("v2", "refs/pr/1"))
    depths = {source: inspected(lg, source)["depth"]
              for source in (REPO_ID, f"{REPO_ID}@main", f"{REPO_ID}@{COMMIT_MAIN}", f"{REPO_ID}@v2",
                             f"{REPO_ID}@{COMMIT_V2}", f"{REPO_ID}@refs/pr/1")}
    assert depths == {REPO_ID: 3, f"{REPO_ID}@main": 3, f"{REPO_ID}@{COMMIT_MAIN}": 3,
                      f"{REPO_ID}@v2": 2, f"{REPO_ID}@{COMMIT_V2}": 2, f"{REPO_ID}@refs/pr/1": 2}
    assert inspected(lg, f"{REPO_ID}@v2")["hub"] == f"{REPO_ID}@{COMMIT_V2}"


def test_an_id_not_in_the_cache_is_one_line_that_says_how_to_get_it(hub_cache, lg):
    result = lg("inspect", "facebook/dinov2-small")
    assert result.code == 1
    assert result.stdout == b""
    assert result.stderr == (f"lg: error: facebook/dinov2-small is not in the local Hugging Face cache "
                             f"({hub_cache}); lg never downloads: fetch it where there is a network with "
                             f"`hf download facebook/dinov2-small` and copy the cache here, or pass a local path\n")


def test_a_revision_not_in_the_cache_is_named(hub_cache, tmp_path, lg):
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    for revision in ("v9", "c" * 40):
        result = lg("shrink", f"{REPO_ID}@{revision}", "--depth", "2", "-o", tmp_path / "out")
        assert result.code == 1
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
        assert result.stderr.startswith(f"lg: error: {REPO_ID}: revision {revision} is not in the local "
                                        f"Hugging Face cache ")
        assert "it holds main" in result.stderr
        assert f"`hf download {REPO_ID} --revision {revision}`" in result.stderr
        assert not (tmp_path / "out").exists()


def test_a_local_folder_of_the_same_spelling_wins_over_the_cache(hub_cache, tmp_path, monkeypatch, lg):
    cached, _ = gpt2_folder(tmp_path, "cached")
    add_to_cache(hub_cache, REPO_ID, cached, COMMIT_MAIN)
    work = tmp_path / "work"
    (work / "org").mkdir(parents=True)
    gpt2_folder(work / "org", "name", n_layer=2)
    monkeypatch.chdir(work)
    assert resolve_source(REPO_ID) == REPO_ID
    report = inspected(lg, REPO_ID)
    assert (report["file"], report["depth"], report["hub"]) == (REPO_ID, 2, None)


def test_a_name_that_is_no_hub_id_keeps_the_no_such_file_message(hub_cache, lg):
    for source in ("runs/model.safetensors", "a/b/c", "./org/name", "org/name@"):
        assert resolve_source(source) == source
        result = lg("inspect", source)
        assert (result.code, result.stderr) == (1, f"lg: error: {source}: no such file or folder\n")


def test_a_mistyped_path_in_a_local_folder_is_told_as_a_path_first(hub_cache, tmp_path, monkeypatch, lg):
    """`runs/modle` beside a folder runs/: a path, not a hub id, was meant;
    it used to be told only that runs/modle is not in the cache."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    result = lg("inspect", "runs/modle")
    assert (result.code, result.stderr) == (1, f"lg: error: runs/modle: no such file or folder (runs/ holds no "
                                               f"modle), nor a model of that id in the local Hugging Face cache "
                                               f"({hub_cache})\n")
    assert "hf download" in lg("inspect", "elsewhere/modle").stderr  # no such folder: a hub id, as before


@pytest.mark.parametrize("text, parsed", [
    ("org/name", ("org/name", None)),
    ("timm/vit_small_patch16_224.augreg_in21k", ("timm/vit_small_patch16_224.augreg_in21k", None)),
    ("org/name@main", ("org/name", "main")),
    ("org/name@refs/pr/1", ("org/name", "refs/pr/1")),
    ("org/name@" + COMMIT_MAIN, ("org/name", COMMIT_MAIN)),
    ("name", None), ("org/name/extra", None), ("/org/name", None), ("org/name/", None),
    ("org/-name", None), ("org/name.", None), ("org/na--me", None), ("org/na..me", None),
    ("org/name@../x", None), ("org/name@a b", None), ("org/nåme", None),
    ("org/model.safetensors", None), ("org/weights.bin", None), ("org/" + "n" * 97, None),
])
def test_what_is_spelled_as_a_hub_id(text, parsed):
    assert parse_hub_id(text) == parsed


def test_shrink_from_a_hub_id_writes_a_model_and_leaves_the_cache_as_it_was(hub_cache, tmp_path, lg):
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    snapshot = add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    before = blob_digests(hub_cache)
    links_before = {p: os.readlink(p) for p in snapshot.rglob("*") if p.is_symlink()}
    out = tmp_path / "out"
    result = lg("shrink", REPO_ID, "--depth", "2", "-o", out)
    assert result.code == 0, result.stderr
    assert blob_digests(hub_cache) == before
    assert {p: os.readlink(p) for p in snapshot.rglob("*") if p.is_symlink()} == links_before
    model = load_strict(out, "gpt2-lm")
    assert model.config.n_layer == 2
    assert outputs(model, token_ids()).isfinite().all()
    # The tokenizer files, links in the cache, are copied as plain files.
    assert (out / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    assert not (out / "tokenizer.json").is_symlink()
    # Provenance names the model by its hub id and commit, not by the snapshot folder's name.
    assert json.loads(metadata(out)["lg.source"])["file"] == f"{REPO_ID}@{COMMIT_MAIN}"


def test_no_output_is_written_into_the_cache_even_with_force(hub_cache, tmp_path, lg):
    """An output over a hub id's own snapshot (the path form of which is
    refused as an input) used to replace its links with the shrunk model, so
    the id then named another model; a new folder in the cache, a file in
    blobs/ or another repository's snapshot were written too."""
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    snapshot = add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    other = add_to_cache(hub_cache, "other-org/other", gpt2_folder(tmp_path, "other")[0], COMMIT_V2)
    before = blob_digests(hub_cache)
    listing = sorted(str(p) for p in hub_cache.rglob("*"))
    for output in (snapshot, other, hub_cache / "new-model", snapshot.parent.parent / "blobs" / "x.safetensors",
                   snapshot / "model.safetensors"):
        result = lg("shrink", REPO_ID, "--depth", "2", "-o", output, "--force")
        assert result.code == 1, (output, result.stderr)
        assert result.stderr.count("\n") == 1 and "is inside the Hugging Face cache" in result.stderr, result.stderr
    assert blob_digests(hub_cache) == before
    assert sorted(str(p) for p in hub_cache.rglob("*")) == listing
    assert inspected(lg, REPO_ID)["depth"] == inspected(lg, folder)["depth"] == 3


def test_a_sharded_model_in_the_cache_reads_as_its_folder_does(hub_cache, tmp_path):
    model = make_model("gpt2-lm")
    folder = save_folder(model, tmp_path / "sharded", "gpt2-lm", max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").exists()
    add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    by_id, direct = lgcli.load(REPO_ID), lgcli.load(folder)
    assert by_id.checkpoint.sha256 == direct.checkpoint.sha256
    for roles, direct_roles in ((by_id.stack.layers, direct.stack.layers), (by_id.stack.globals, direct.stack.globals)):
        assert sorted(roles) == sorted(direct_roles)
        for role in direct_roles:
            assert torch.equal(roles[role].data, direct_roles[role].data)


def test_a_timm_repository_reads_as_a_timm_folder(hub_cache, tmp_path, lg):
    # A timm repository is the folder timm's save_for_hf writes: lg reads it as
    # that folder, its sizes and heads from config.json (docs/checkpoints.md).
    from timm.models import save_for_hf

    folder = tmp_path / "timm"
    save_for_hf(make_vit(), str(folder), safe_serialization=True)
    snapshot = add_to_cache(hub_cache, "timm/vit_tiny_test.augreg", folder, COMMIT_MAIN)
    assert resolve_source("timm/vit_tiny_test.augreg") == str(snapshot.resolve())
    report = inspected(lg, "timm/vit_tiny_test.augreg")
    assert report["file"] == str(snapshot.resolve())
    assert (report["family"], report["depth"], report["width"], report["heads_assumed"]) == ("vit", 2, 64, False)
    assert report["hub"] == f"timm/vit_tiny_test.augreg@{COMMIT_MAIN}"


def test_a_snapshot_link_that_leaves_the_blobs_folder_is_refused(hub_cache, tmp_path, lg):
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    snapshot = add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    secret = tmp_path / "secret.json"
    secret.write_text('{"not": "a tokenizer"}')
    (snapshot / "tokenizer.json").unlink()
    (snapshot / "tokenizer.json").symlink_to(secret)
    result = lg("inspect", REPO_ID)
    assert result.code == 1
    # Refused as the hub id is resolved, naming the link and where it leads (issue 32).
    assert result.stderr.startswith(f"lg: error: {snapshot / 'tokenizer.json'}: links to {secret}, outside the "
                                    f"repository's blobs/ ")
    assert len(result.stderr.splitlines()) == 1


def test_the_cache_is_found_through_hf_home_in_a_fresh_process(tmp_path, monkeypatch):
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    home = tmp_path / "hf-home"
    add_to_cache(home / "hub", REPO_ID, folder, COMMIT_MAIN)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run_lg("inspect", REPO_ID, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["hub"] == f"{REPO_ID}@{COMMIT_MAIN}"
    missing = run_lg("inspect", "org/absent")
    assert missing.code == 1
    assert f"not in the local Hugging Face cache ({home / 'hub'})" in missing.stderr


def test_only_a_hub_id_imports_huggingface_hub():
    # `lg inspect x.safetensors` and `lg --help` pay for neither huggingface_hub nor torch.
    script = ("import sys\nfrom lgcli.hub import resolve_source\n"
              "assert [resolve_source(s) for s in ('-', 'README.md', 'runs/x.safetensors', 'a/b/c')] == "
              "['-', 'README.md', 'runs/x.safetensors', 'a/b/c']\n"
              "print(sorted(m for m in ('huggingface_hub', 'torch') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr


def test_an_incomplete_snapshot_is_said_to_be_incomplete(hub_cache, tmp_path, lg):
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    # huggingface_hub's listing of the commit's files (trees/<commit>.json),
    # naming one the snapshot lacks: a download cut short.
    listed = {path.name: {"size": path.stat().st_size, "blob_id": "0" * 40} for path in folder.iterdir()}
    listed["model-extra.safetensors"] = {"size": 10, "blob_id": "1" * 40}
    trees = hub_cache / "models--org--name" / "trees"
    trees.mkdir()
    (trees / f"{COMMIT_MAIN}.json").write_text(json.dumps({"format_version": 1, "files": listed}))
    result = lg("inspect", REPO_ID)
    assert result.code == 1
    assert result.stderr.startswith(f"lg: error: {REPO_ID}: its snapshot in the local Hugging Face cache (")
    assert "is incomplete; lg never downloads: fetch it" in result.stderr
    assert len(result.stderr.splitlines()) == 1
