"""Every resize method, over size pairs that change depth only, width only and
both (including ratios that are not powers of two), writes a file that loads
strictly in timm with the call `lg inspect` prints and runs to finite outputs."""

from __future__ import annotations

import pytest
import timm
import torch

import lgcli
from lgcli.resize import resize_file

from conftest import make_vit, sample_input

# Source: depth 4, width 96 = 3 heads of 32, MLP 384.
SOURCE = dict(depth=4, embed_dim=96, num_heads=3)
SHRINK_PAIRS = {"depth 4->3": dict(depth=3), "width 96->64": dict(width=64),
                "both 4->2, 96->32": dict(depth=2, width=32)}
GROW_PAIRS = {"depth 4->6": dict(depth=6), "width 96->128": dict(width=128),
              "both 4->8, 96->192": dict(depth=8, width=192)}
CLONE_PAIRS = {"depth 4->7": dict(depth=7), "width 96->192": dict(width=192),
               "both 4->6, 96->288": dict(depth=6, width=288)}
CASES = (
    [("shrink", m, name, sizes) for m in ("bot", "select", "heur-lg", "auto-lg")
     for name, sizes in SHRINK_PAIRS.items()]
    + [("grow", m, name, sizes) for m in ("bot", "heur-lg", "auto-lg") for name, sizes in GROW_PAIRS.items()]
    + [("grow", "clone", name, sizes) for name, sizes in CLONE_PAIRS.items()]
    + [("shrink", "tleg-fit", "depth 4->3", dict(depth=3)), ("grow", "tleg-fit", "depth 4->6", dict(depth=6))]
    + [("grow", "depth-upscale", "depth 4->6", dict(depth=6)), ("grow", "identity-insert", "depth 4->7", dict(depth=7)),
       ("grow", "stack", "depth 4->12", dict(depth=12))]
)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    model = make_vit(**SOURCE)
    path = tmp_path_factory.mktemp("src") / "src.safetensors"
    lgcli.save_model(model, path)
    return path, sample_input(model)


def load_with_printed_call(path):
    call = lgcli.inspect_checkpoint(path)["load_call"]
    return eval(call, {"timm": timm}).eval()


@pytest.mark.parametrize("direction, method, name, sizes", CASES,
                         ids=[f"{d}-{m}-{n}" for d, m, n, _ in CASES])
def test_method_writes_a_strict_timm_checkpoint(direction, method, name, sizes, source, tmp_path):
    src, x = source
    out = tmp_path / "out.safetensors"
    report = resize_file(src, out, direction=direction, method=method, seed=0, **sizes)

    model = load_with_printed_call(out)
    assert len(model.blocks) == report["target"]["depth"] == sizes.get("depth", 4)
    assert model.embed_dim == report["target"]["width"] == sizes.get("width", 96)
    assert model.blocks[0].attn.num_heads == report["target"]["width"] // 32  # head dim kept
    assert model.blocks[0].mlp.fc1.out_features == 4 * model.embed_dim      # MLP ratio kept
    with torch.no_grad():
        logits = model(x)
    assert logits.shape == (x.shape[0], 5)
    assert torch.isfinite(logits).all()
    # The file records what made it.
    lg = lgcli.load(out).checkpoint.lg
    assert lg["method"] == method and lg["options"]["direction"] == direction


def test_source_file_is_never_modified(source, tmp_path):
    src, _ = source
    before = src.read_bytes()
    resize_file(src, tmp_path / "a.safetensors", direction="shrink", depth=2, width=64)
    assert src.read_bytes() == before


def test_fp16_source_is_written_in_fp16(tmp_path):
    model = make_vit(depth=2, embed_dim=64, num_heads=2).half()
    src = tmp_path / "half.safetensors"
    lgcli.save_model(model, src)
    out = tmp_path / "out.safetensors"
    resize_file(src, out, direction="grow", depth=4, width=128)
    tensors = lgcli.load(out).checkpoint.tensors
    assert {t.dtype for t in tensors.values()} == {torch.float16}


# One case per (direction, method): its last size pair (depth and width for most).
ONE_PER_METHOD = list({(d, m): (d, m, n, s) for d, m, n, s in CASES}.values())


@pytest.mark.parametrize("direction, method, name, sizes", ONE_PER_METHOD,
                         ids=[f"{d}-{m}" for d, m, _, _ in ONE_PER_METHOD])
def test_same_command_writes_identical_bytes(direction, method, name, sizes, source, tmp_path, lg):
    """Determinism, metadata included: two runs of one command, one file.
    Through the CLI, and once with a different seed to show the seed is used."""
    src, _ = source
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
    outs = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.safetensors"
        result = lg(direction, src, "--method", method, "--seed", "7", *flags, "-o", out)
        assert result.code == 0, result.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    if method in ("heur-lg", "auto-lg") and direction == "grow":
        other = tmp_path / "c.safetensors"
        assert lg(direction, src, "--method", method, "--seed", "8", *flags, "-o", other).code == 0
        assert other.read_bytes() != outs[0]
