"""`lg shrink` / `lg grow` as a user runs them: pipes, provenance, --json,
and one-line errors that write nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import timm
import torch

import lgcli
from lgcli.checkpoint import read_bytes

from conftest import make_vit, sample_input


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    model = make_vit(depth=4, embed_dim=128, num_heads=4)     # head dim 32
    lgcli.save_model(model, folder / "a.safetensors")
    return folder, sample_input(model)


def test_pipe_shrink_then_grow_records_both_steps(source):
    folder, x = source
    lg = f"{sys.executable} -m lgcli"
    command = f"{lg} shrink a.safetensors --width 96 -o - | {lg} grow - --depth 8 -o b.safetensors"
    proc = subprocess.run(command, shell=True, cwd=folder, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""

    report = lgcli.inspect_checkpoint(folder / "b.safetensors")
    assert (report["depth"], report["width"], report["heads"], report["mlp_dim"]) == (8, 96, 3, 384)
    steps = report["provenance"]
    # The defaults by direction (docs/methods.md "Defaults"): clone grows where it
    # reaches the size (here: depth only), select shrinks.
    assert [s.get("method") for s in steps[:2]] == ["clone", "select"]
    assert steps[0]["options"]["direction"] == "grow" and steps[1]["options"]["direction"] == "shrink"
    assert steps[1]["file"] == "<stdin>" and steps[2]["file"] == "a.safetensors"
    model = eval(report["load_call"], {"timm": timm}).eval()
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()


def test_json_report_goes_to_stdout_only_when_the_checkpoint_does_not(source, lg, tmp_path):
    folder, _ = source
    out = tmp_path / "s.safetensors"
    result = lg("shrink", folder / "a.safetensors", "--depth", "2", "--method", "bot", "--json", "-o", out)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["target"]["depth"] == 2 and report["method"] == "bot"
    assert report["details"]["wavelet"] == "haar" and report["output"] == str(out)

    piped = lg("shrink", folder / "a.safetensors", "--depth", "2", "--json", "-o", "-")
    assert piped.code == 0, piped.stderr
    assert read_bytes(piped.stdout).lg["method"] == "select"       # stdout: the checkpoint alone
    assert json.loads(piped.stderr)["target"]["depth"] == 2         # the report: stderr


def test_existing_output_needs_force(source, lg, tmp_path):
    folder, _ = source
    out = tmp_path / "s.safetensors"
    out.write_bytes(b"keep")
    refused = lg("shrink", folder / "a.safetensors", "--depth", "2", "-o", out)
    assert refused.code != 0 and "--force" in refused.stderr and out.read_bytes() == b"keep"
    assert lg("shrink", folder / "a.safetensors", "--depth", "2", "-o", out, "--force").code == 0
    assert lgcli.load(out).spec.depth == 2


@pytest.mark.parametrize("args, message", [
    (["shrink", "--width", "100"], "width 100 is not a whole number of heads of dimension 32 (valid widths: 32, 64, 96, 128"),
    (["grow", "--depth", "2"], "grow cannot make the depth smaller (4 -> 2); run: lg shrink"),
    (["shrink", "--width", "256"], "shrink cannot make the width larger"),
    (["shrink", "--depth", "2", "--method", "bot", "--wavelet", "nope"], "unknown wavelet 'nope'"),
    (["shrink", "--depth", "2", "--method", "nope"], "unknown method 'nope'"),
    (["grow", "--depth", "8", "--method", "select"], "method 'select' cannot grow"),
    (["shrink", "--depth", "2", "--method", "select", "--wavelet", "db2"], "--wavelet does not apply"),
    (["shrink", "--depth", "2", "--method", "bot", "--fit", "cubic"], "--fit must be one of interp, crop"),
    (["shrink", "--depth", "2", "--wavelet", "db2"], "--wavelet does not apply"),  # the default, select, takes none
    (["grow", "--width", "256", "--heads", "4", "--method", "clone"], "clone keeps the head dim (32)"),
    (["grow", "--width", "256", "--method", "tleg-fit"], "tleg-fit changes depth only"),
    (["shrink", "--width", "64", "--heads", "3"], "width 64 does not split into 3 heads"),
    (["shrink"], "nothing to shrink"),
    (["shrink", "--kv-heads", "1"], "--kv-heads does not apply to a vit: its attention has a key/value head for each "
                                    "query head (no grouped-query attention); give --heads"),
    (["grow", "--depth", "8", "--kv-heads", "1"], "--kv-heads does not apply to a vit"),
    # The default grow (clone) named, not the fallback it would have taken for a size clone cannot reach.
    (["grow", "--depth", "8", "--data", "fashion-mnist-mini"], "--data does not apply to method 'clone'"),
])
def test_bad_requests_fail_in_one_line_and_write_nothing(source, lg, tmp_path, args, message):
    folder, _ = source
    out = tmp_path / "out.safetensors"
    command, *rest = args
    result = lg(command, folder / "a.safetensors", *rest, "-o", out)
    assert result.code != 0
    assert result.stdout == b""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("lg: error: ")
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_wavelet_is_a_usage_mistake(source, lg, tmp_path):
    folder, _ = source
    result = lg("shrink", folder / "a.safetensors", "--depth", "2", "--method", "bot", "--wavelet", "nope",
                "-o", tmp_path / "out.safetensors")
    assert result.code == 2 and "unknown wavelet 'nope'" in result.stderr  # a flag's value out of its range


def test_a_usage_mistake_is_said_before_an_existing_output(source, lg, tmp_path):
    """Fixing one thing should not meet the next: the bad flag value first."""
    folder, _ = source
    existing = tmp_path / "out.safetensors"
    existing.write_bytes(b"the user's file")
    for flags, said in ((["--method", "nope"], "unknown method 'nope'"), (["--device", "xyz"], "--device xyz")):
        result = lg("shrink", folder / "a.safetensors", "--depth", "2", *flags, "-o", existing)
        assert result.code == 2 and said in result.stderr, result.stderr
    assert existing.read_bytes() == b"the user's file"


def test_missing_output_is_an_error(source, lg):
    folder, _ = source
    result = lg("grow", folder / "a.safetensors", "--depth", "8")
    assert result.code != 0 and "-o FILE" in result.stderr and result.stdout == b""


def test_nothing_asked_names_the_models_own_depth_which_rewrites_it_in_the_outputs_form(lg, tmp_path):
    """A Hugging Face model piped into one file goes back to a folder by the
    size the refusal names: every tensor as it was, loaded strictly."""
    import re

    import transformers
    from safetensors.torch import load_file

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=50, n_positions=16,
                                     bos_token_id=0, eos_token_id=0, architectures=["GPT2LMHeadModel"])
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "src")
    piped = lg("shrink", tmp_path / "src", "--depth", "3", "-o", "-")
    assert piped.code == 0, piped.stderr
    (tmp_path / "one.safetensors").write_bytes(piped.stdout)
    refused = lg("shrink", tmp_path / "one.safetensors", "-o", tmp_path / "back")
    assert refused.code == 2 and "--depth 3, its own," in refused.stderr
    assert not (tmp_path / "back").exists()
    flags = re.search(r"\((--depth \S+), its own", refused.stderr).group(1).split()
    assert lg("shrink", tmp_path / "one.safetensors", *flags, "-o", tmp_path / "back").code == 0
    model, info = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back", output_loading_info=True)
    assert not any(info.values())
    source, back = load_file(tmp_path / "src" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert source.keys() == back.keys() and all(torch.equal(source[k], back[k]) for k in source)
