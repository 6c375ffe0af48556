"""Property-based hostile input (issue 20): hypothesis mutates small valid
checkpoints and model folders, and on every example `lg` keeps its
contract: exit 0 with an output that safetensors reads and `lg inspect`
describes, or a non-zero exit with exactly one line `lg: error: ...` that is
not "a bug in lg", nothing written (no output, no temporary file) and the
input unchanged. The seeded, hand-made cases live in hostile_cases.py; these
explore around them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import safetensors.torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_vit, run_lg_inproc

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def vit_bytes(tmp_path_factory) -> bytes:
    model = make_vit(depth=2, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7, num_classes=10)
    path = tmp_path_factory.mktemp("vit") / "v.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path.read_bytes()


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> Path:
    from text_models import make_model, save_folder

    return save_folder(make_model("gpt2-lm"), tmp_path_factory.mktemp("gpt2"), "gpt2-lm")


def _digest(folder: Path) -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _keeps_the_contract(args: list, work: Path, source: Path, output: Path) -> None:
    before = _digest(source) if source.is_dir() else {source.name: hashlib.sha256(source.read_bytes()).hexdigest()}
    listing = sorted(os.listdir(work))
    result = run_lg_inproc(*args)
    after = _digest(source) if source.is_dir() else {source.name: hashlib.sha256(source.read_bytes()).hexdigest()}
    assert after == before, "the input changed"
    if result.code == 0:
        if output.is_dir():
            weights = output / "model.safetensors"
            assert weights.exists()
            safetensors.torch.load_file(str(weights))
        else:
            safetensors.torch.load_file(str(output))
        assert run_lg_inproc("inspect", output).code == 0
        shutil.rmtree(output) if output.is_dir() else output.unlink()
    else:
        assert result.code in (1, 2), (result.code, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("lg: error: "), result.stderr
        assert sum(line.startswith("lg: error: ") for line in lines) == 1, result.stderr
        assert "Traceback" not in result.stderr and "bug in lg" not in result.stderr, result.stderr
        assert not os.path.lexists(output)
    assert sorted(os.listdir(work)) == listing, "something was left beside the output"


def _mutate(data: bytes, draw) -> bytes:
    """One of: flip bytes, cut, insert, or rewrite a header value."""
    kind = draw(st.sampled_from(["flip", "cut", "insert", "header"]))
    if kind == "flip":
        positions = draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=8))
        out = bytearray(data)
        for position in positions:
            out[position] ^= draw(st.integers(1, 255))
        return bytes(out)
    if kind == "cut":
        return data[:draw(st.integers(0, len(data) - 1))]
    if kind == "insert":
        position = draw(st.integers(0, len(data)))
        return data[:position] + draw(st.binary(min_size=1, max_size=16)) + data[position:]
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    key = draw(st.sampled_from(sorted(header)))
    values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.text(max_size=8),
                       st.lists(st.integers(-3, 2**40), max_size=4), st.dictionaries(st.text(max_size=4),
                                                                                      st.integers(), max_size=2))
    if key == "__metadata__" or draw(st.booleans()):
        header[key] = draw(values)
    else:
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
        header[key][field] = draw(values)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + length:]


@SETTINGS
@given(data=st.data())
def test_a_mutated_checkpoint_keeps_the_contract(vit_bytes, tmp_path_factory, data):
    work = tmp_path_factory.mktemp("case")
    source = work / "v.safetensors"
    source.write_bytes(_mutate(vit_bytes, data.draw))
    output = work / "o.safetensors"
    command = data.draw(st.sampled_from([["shrink", "--depth", "1"], ["grow", "--depth", "3"],
                                         ["shrink", "--depth", "1", "--method", "bot"]]))
    _keeps_the_contract([command[0], source, *command[1:], "-o", output], work, source, output)


@SETTINGS
@given(data=st.data())
def test_a_mutated_model_folder_keeps_the_contract(gpt2_folder, tmp_path_factory, data):
    work = tmp_path_factory.mktemp("case")
    source = work / "m"
    shutil.copytree(gpt2_folder, source)
    config = json.loads((source / "config.json").read_text())
    change = data.draw(st.sampled_from(["config-value", "config-drop", "drop-file", "weights"]))
    if change in ("config-value", "config-drop"):
        key = data.draw(st.sampled_from(sorted(config)))
        if change == "config-drop":
            del config[key]
        else:
            config[key] = data.draw(st.one_of(st.none(), st.booleans(), st.integers(-5, 2**40),
                                              st.floats(allow_nan=True), st.text(max_size=6),
                                              st.lists(st.integers(0, 9), max_size=3)))
        (source / "config.json").write_text(json.dumps(config))
    elif change == "drop-file":
        name = data.draw(st.sampled_from(sorted(os.listdir(source))))
        os.unlink(source / name)
    else:
        weights = source / "model.safetensors"
        weights.write_bytes(_mutate(weights.read_bytes(), data.draw))
    output = work / "out"
    _keeps_the_contract(["shrink", source, "--depth", "1", "-o", output], work, source, output)
