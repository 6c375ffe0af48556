"""Checkpoint I/O: every source form, provenance, atomic writes, and bad input."""

from __future__ import annotations

import json
import os
import pickle
import struct

import pytest
import torch

import lgcli
from lgcli.checkpoint import read_checkpoint, write_checkpoint
from lgcli.errors import LgError

from conftest import make_vit, run_lg, write_plain


@pytest.fixture
def vit_file(tmp_path):
    return write_plain(make_vit("cls-token"), tmp_path / "vit.safetensors")


def assert_one_line_failure(result, *, mentions: str):
    assert result.code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lg: error: ") and mentions in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == b""


def test_sharded_folder_reads_like_the_single_file(vit_file, tmp_path):
    from safetensors.torch import save_file

    whole = read_checkpoint(vit_file)
    keys = sorted(whole.tensors)
    folder = tmp_path / "sharded"
    folder.mkdir()
    halves = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    weight_map = {}
    for shard, shard_keys in halves.items():
        save_file({k: whole.tensors[k] for k in shard_keys}, str(folder / shard))
        weight_map.update({k: shard for k in shard_keys})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    sharded = read_checkpoint(folder)
    assert set(sharded.tensors) == set(whole.tensors)
    assert all(torch.equal(sharded.tensors[k], whole.tensors[k]) for k in keys)
    assert lgcli.load(folder, heads=2).spec == lgcli.load(vit_file, heads=2).spec


def test_pth_wrappers_and_prefixes_are_unwrapped(tmp_path):
    model = make_vit("cls-token")
    state = model.state_dict()
    wrapped = {"model": {f"module._orig_mod.{k}": v for k, v in state.items()}, "epoch": 3}
    path = tmp_path / "ckpt.pth"
    torch.save(wrapped, path)
    got = read_checkpoint(path).tensors
    assert set(got) == set(state) and all(torch.equal(got[k], state[k]) for k in state)
    ema = tmp_path / "ema.pt"
    torch.save({"model_ema": state}, ema)
    assert set(read_checkpoint(ema).tensors) == set(state)


def test_write_is_atomic_refuses_overwrite_and_keeps_inputs(vit_file, tmp_path):
    loaded = lgcli.load(vit_file, heads=2)
    before = vit_file.read_bytes()
    out = tmp_path / "out.safetensors"
    lgcli.save(out, loaded.spec, loaded.stack, source=loaded)
    first = out.read_bytes()
    with pytest.raises(LgError, match="exists; pass --force"):
        lgcli.save(out, loaded.spec, loaded.stack, source=loaded)
    assert out.read_bytes() == first
    with pytest.raises(LgError, match="is an input"):
        lgcli.save(vit_file, loaded.spec, loaded.stack, source=loaded, force=True)
    lgcli.save(out, loaded.spec, loaded.stack, source=loaded, force=True)
    assert vit_file.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.safetensors", "vit.safetensors"]


def test_failed_write_leaves_nothing(tmp_path):
    bad = {"a": torch.zeros(2), "b": "not a tensor"}
    with pytest.raises(Exception):
        write_checkpoint(tmp_path / "x.safetensors", bad, {})
    assert list(tmp_path.iterdir()) == []


def test_metadata_and_provenance_chain_through_pipes(vit_file, tmp_path):
    loaded = lgcli.load(vit_file, heads=2)
    step1 = tmp_path / "step1.safetensors"
    lgcli.save(step1, loaded.spec, loaded.stack, method="first", options={"a": 1}, source=loaded)
    second = lgcli.load(step1)
    step2 = tmp_path / "step2.safetensors"
    lgcli.save(step2, second.spec, second.stack, method="second", source=second)
    meta = read_checkpoint(step2).metadata
    assert meta["format"] == "pt" and meta["lg.kind"] == "model" and meta["lg.family"] == "vit"
    assert json.loads(meta["lg.config"])["num_heads"] == 2
    assert meta["lg.version"] == lgcli.__version__
    assert meta["lg.source_sha256"] == second.checkpoint.sha256
    chain = lgcli.inspect_checkpoint(step2)["provenance"]
    assert [s.get("method") for s in chain] == ["second", "first", None]
    assert chain[1]["file"] == "step1.safetensors" and chain[1]["options"] == {"a": 1}
    assert chain[2]["file"] == "vit.safetensors"
    assert chain[1]["source_sha256"] == loaded.checkpoint.sha256


def test_dtype_is_kept(tmp_path):
    model = make_vit("cls-token").half()
    path = write_plain(model, tmp_path / "half.safetensors")
    loaded = lgcli.load(path, heads=2)
    out = tmp_path / "out.safetensors"
    lgcli.save(out, loaded.spec, loaded.stack, source=loaded)
    assert {t.dtype for t in read_checkpoint(out).tensors.values()} == {torch.float16}


# ------------------------------------------------------------------ bad input, through the CLI

def test_missing_file(tmp_path, lg):
    assert_one_line_failure(lg("inspect", tmp_path / "nope.safetensors"), mentions="no such file")


def test_random_bytes(tmp_path, lg):
    path = tmp_path / "random.safetensors"
    path.write_bytes(os.urandom(4096))
    assert_one_line_failure(lg("inspect", path), mentions="not a safetensors file")


def test_truncated_file(vit_file, tmp_path, lg):
    data = vit_file.read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[: len(data) // 2])
    assert_one_line_failure(lg("inspect", path), mentions="truncated")
    assert_one_line_failure(lg("inspect", "-", stdin=data[: len(data) // 2]), mentions="<stdin>")


def test_header_larger_than_file_and_than_allowed(tmp_path, lg):
    bigger = tmp_path / "bigger.safetensors"
    bigger.write_bytes(struct.pack("<Q", 5000) + b'{"a": 1}')
    assert_one_line_failure(lg("inspect", bigger), mentions="header claims 5000 bytes")
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 200_000_000) + b"{}" * 10)
    assert_one_line_failure(lg("inspect", huge), mentions="allows at most")


def test_empty_stdin(lg):
    assert_one_line_failure(lg("inspect", "-", stdin=b""), mentions="empty input")


class _Payload:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_with_code_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "payload-ran"
    path = tmp_path / "evil.pth"
    with open(path, "wb") as f:
        pickle.dump({"state_dict": {"x": _Payload(str(marker))}}, f)
    # Sanity: a plain unpickle would run it.
    assert not marker.exists()
    result = run_lg("inspect", path)
    assert_one_line_failure(result, mentions="refused")
    assert not marker.exists(), "the pickle's payload ran"


def test_a_pickle_too_large_for_memory_is_said_so_not_called_unreadable(tmp_path, monkeypatch):
    """torch's CPU allocator failing mid-read raises a RuntimeError, as a
    corrupt file does: it is memory this machine lacks, said with the size."""
    path = tmp_path / "big.pth"
    torch.save({"x": torch.zeros(2)}, path)

    def allocator_fails(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 1610612736 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(torch, "load", allocator_fails)
    with pytest.raises(LgError) as refused:
        read_checkpoint(path)
    assert str(refused.value) == f"{path}: reading it needs more memory than is free (tried to allocate 1.5 GiB)"
    monkeypatch.setattr(torch, "load", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("invalid magic number")))
    with pytest.raises(LgError, match=r": not a readable PyTorch checkpoint \(invalid magic number\)$"):
        read_checkpoint(path)


def test_unknown_keys_and_shapes(tmp_path, lg):
    state = make_vit("cls-token").state_dict()
    from safetensors.torch import save_file

    extra = tmp_path / "extra.safetensors"
    save_file({**state, "attn_pool.latent": torch.zeros(1, 1, 64)}, str(extra))
    assert_one_line_failure(lg("inspect", extra), mentions="unexpected keys attn_pool.latent")
    bad_shape = dict(state)
    bad_shape["blocks.1.mlp.fc1.weight"] = torch.zeros(100, 64)
    shaped = tmp_path / "shape.safetensors"
    save_file(bad_shape, str(shaped))
    assert_one_line_failure(lg("inspect", shaped), mentions="not a timm VisionTransformer")
    other = tmp_path / "bert.safetensors"
    save_file({"encoder.layer.0.attention.self.query.weight": torch.zeros(4, 4)}, str(other))
    assert_one_line_failure(lg("inspect", other), mentions="not a bert checkpoint lg reads: no token embedding")
    unknown = tmp_path / "unknown.safetensors"
    save_file({"decoder.block.0.layer.0.SelfAttention.q.weight": torch.zeros(4, 4)}, str(unknown))
    assert_one_line_failure(lg("inspect", unknown), mentions="expected a timm VisionTransformer")


def test_debug_shows_the_traceback(tmp_path, lg):
    path = tmp_path / "random.safetensors"
    path.write_bytes(os.urandom(100))
    result = run_lg("--debug", "inspect", path)
    assert result.code != 0 and "Traceback" in result.stderr


@pytest.mark.parametrize("args", [["inspect"], ["eval"], ["grow", "x", "--bogus"], ["grow", "x", "--depth", "abc"],
                                  ["grow", "x", "--depth", "0"], ["grow", "x", "--seed", str(2**64)]])
def test_usage_error_is_one_line_and_exits_2(lg, args):
    result = lg(*args)
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: ") and "Error" not in lines[0].split(":")[2]


def test_process_substitution_is_read_as_a_stream(vit_file):
    """`lg inspect <(cat f)`: /dev/fd/N is a pipe (its size is 0), read as stdin is."""
    import subprocess
    import sys

    command = f"{sys.executable} -m lgcli inspect --json <(cat {vit_file}) --heads 2"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["depth"] == 2 and "<file>" in report["load_call"]
    assert report["sha256"] == lgcli.inspect_checkpoint(vit_file, heads=2)["sha256"]


def test_a_forged_newline_in_a_name_stays_on_one_line(tmp_path, lg):
    result = lg("inspect", str(tmp_path / "x\nlg: error: forged"))
    assert result.code == 1
    assert result.stderr.count("\n") == 1 and result.stderr.count("lg: error:") == 2  # the second is quoted
    assert "'" in result.stderr and "\\n" in result.stderr


def test_help_and_version_do_not_import_torch():
    import subprocess
    import sys

    code = ("import sys\nfrom lgcli.cli import main\nfor args in (['--help'], ['--version']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and "lg 0." in proc.stdout


def test_strict_header_refuses_what_the_library_refuses_and_more(tmp_path):
    """Hand-made headers: each refused in one sentence, none coerced."""
    from lgcli.checkpoint import read_bytes

    def blob(header: str, data: bytes = bytes(8)) -> bytes:
        raw = header.encode()
        return struct.pack("<Q", len(raw)) + raw + data

    entry = '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
    assert read_bytes(blob("{" + entry + "}")).tensors["a"].shape == (2,)
    refused = {
        "string shape": '{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}',
        "float offset": '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}}',
        "bool shape": '{"a":{"dtype":"F32","shape":[true,2],"data_offsets":[0,8]}}',
        "aliasing": '{' + entry + ',"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
        "duplicate name": '{' + entry + ',' + entry + '}',
        "metadata twice": '{"__metadata__":{},"__metadata__":{},' + entry + '}',
        "metadata list": '{"__metadata__":[],' + entry + '}',
        "NaN": '{' + entry + ',"x":NaN}',
        "unknown dtype": '{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}',
    }
    for case, header in refused.items():
        try:
            read_bytes(blob(header))
        except LgError as exc:
            assert "\n" not in str(exc)
        else:
            pytest.fail(f"accepted: {case}")
    with pytest.raises(LgError, match="after the last tensor"):
        read_bytes(blob("{" + entry + "}", bytes(9)))
    utf16 = ("{" + entry + "}").encode("utf-16")
    with pytest.raises(LgError, match="UTF-8"):
        read_bytes(struct.pack("<Q", len(utf16)) + utf16 + bytes(8))


def test_writer_output_is_read_exactly_by_safetensors_itself(tmp_path):
    from safetensors.torch import load_file

    base = torch.randn(4, 6)
    tensors = {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(7).to(torch.bfloat16),
        "f16": torch.randn(2, 3).half(),
        "i64": torch.arange(5),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "view_row": base[1],          # views of one storage, written without copies
        "view_cols": base[:, 2:4],    # non-contiguous
    }
    path = tmp_path / "t.safetensors"
    digest = write_checkpoint(path, tensors, {"k": "v"})
    import hashlib

    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    theirs = load_file(str(path))
    ours = read_checkpoint(path)
    assert ours.sha256 == digest and ours.metadata == {"format": "pt", "k": "v"}
    for key, value in tensors.items():
        for got in (theirs[key], ours.tensors[key]):
            assert got.dtype == value.dtype and got.shape == value.shape
            assert torch.equal(got, value), key


def test_reading_never_writes_to_the_file(vit_file):
    before = vit_file.read_bytes()
    checkpoint = read_checkpoint(vit_file)
    for tensor in checkpoint.tensors.values():
        tensor.zero_()  # copy-on-write mapping: the file must not change
    assert vit_file.read_bytes() == before


def test_misaligned_tensor_data_is_read_correctly(tmp_path):
    import json as json_module

    values = torch.arange(6, dtype=torch.float32)
    header = {"pad": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [1, 25]}}
    encoded = json_module.dumps(header).encode()
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"\x07" + values.numpy().tobytes())
    got = read_checkpoint(path).tensors
    assert torch.equal(got["x"], values.reshape(2, 3)) and got["pad"].tolist() == [7]


def test_header_shape_that_does_not_fill_its_bytes_is_refused(tmp_path, lg):
    import json as json_module

    header = {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}
    encoded = json_module.dumps(header).encode()
    path = tmp_path / "lying.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(8))
    assert_one_line_failure(lg("inspect", path), mentions="data_offsets give 8")


def test_written_file_gets_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "m.safetensors"
        write_checkpoint(path, {"x": torch.zeros(2)}, {})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_stream_whose_header_length_starts_like_a_pickle_is_read():
    """A header of 0x280 bytes is b'\\x80\\x02...' little-endian: the first two
    bytes of a protocol-2 pickle. Only a header that does not parse is taken
    for a pickle."""
    import json as _json
    import struct

    from lgcli.checkpoint import read_bytes

    body = _json.dumps({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    body += b" " * (0x280 - len(body))
    data = struct.pack("<Q", len(body)) + body + struct.pack("<2f", 1.5, -2.0)
    assert data[:2] == b"\x80\x02"
    assert read_bytes(data).tensors["t"].tolist() == [1.5, -2.0]
    with pytest.raises(LgError, match="looks like a PyTorch pickle"):
        read_bytes(b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01u.")
