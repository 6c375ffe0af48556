"""`lg shrink --calibrate DATA` without `--method` (lgcli.calibrated_shrink):
block ablation for the depth, activation importance for the width, both in
turn when both change, the result the same tensors as the two commands
piped, loading strictly in its library."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import make_vit, write_plain
from test_data_aware import IMAGES, text_file
from text_models import load_strict, make_model, metadata, save_folder, token_ids, weights

from lgcli.api import load
from lgcli.calibrated_shrink import calibrated_steps
from lgcli.sizing import target_spec

SAMPLES = ("--calibrate-samples", "8")
HEADS = ("--source-heads", "2")  # a foreign file does not record them (conftest's TINY: 2 heads of 32)


@pytest.mark.parametrize("sizes, steps", [
    (dict(depth=2), ("block-ablation",)),
    (dict(width=32), ("activation",)),
    (dict(mlp_dim=64), ("activation",)),
    (dict(depth=4, heads=1, width=32), ("activation",)),  # the source's depth: only the width changes
    (dict(depth=2, width=32), ("block-ablation", "activation")),
    (dict(depth=3, mlp_dim=128), ("block-ablation", "activation")),
])
def test_each_changed_axis_is_measured_by_its_method(tmp_path, sizes, steps):
    source = load(write_plain(make_vit(depth=4), tmp_path / "vit.safetensors"), heads=2).spec  # 4 x 64, mlp 256
    assert calibrated_steps(source, target_spec(source, **sizes)) == steps


def test_depth_and_width_are_the_pipe_of_the_two_methods_and_load_strictly(tmp_path, lg):
    """The in-process shrink writes the tensors the documented pipe writes
    (block ablation to depth 2, then activation importance to width 16),
    records both steps, and the folder loads strictly in transformers."""
    variant = "llama-gqa"
    source = save_folder(make_model(variant), tmp_path / "llama", variant)
    text = text_file(tmp_path / "calibration.txt")
    calibrate = ("--calibrate", text, *SAMPLES)
    both = lg("shrink", source, "--depth", "2", "--width", "16", *calibrate, "-o", tmp_path / "both", "--json")
    assert both.code == 0, both.stderr
    report = json.loads(both.stdout)
    assert report["method"] == "block-ablation, then activation"
    assert [step["method"] for step in report["steps"]] == ["block-ablation", "activation"]
    assert (report["source"]["depth"], report["target"]["depth"], report["target"]["width"]) == (3, 2, 16)

    first = lg("shrink", source, "--depth", "2", "--method", "block-ablation", *calibrate, "-o", "-")
    assert first.code == 0, first.stderr
    piped = lg("shrink", "-", "--width", "16", "--method", "activation", *calibrate, "-o", tmp_path / "piped",
               stdin=first.stdout)
    assert piped.code == 0, piped.stderr
    ours, theirs = weights(tmp_path / "both"), weights(tmp_path / "piped")
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key

    # The provenance too: both steps, each with what it chose, chained to the source as the pipe's; the step
    # between, held in memory, is named so, where the pipe's came through <stdin>.
    assert_the_pipes_record(metadata(tmp_path / "both"), metadata(tmp_path / "piped"))
    model = load_strict(tmp_path / "both", variant)  # no missing, unexpected or mismatched keys
    with torch.no_grad():
        logits = model(token_ids()).logits
    assert logits.shape[-1] == make_model(variant).config.vocab_size and torch.isfinite(logits).all()


@pytest.mark.parametrize("sizes, method", [(("--depth", "2"), "block-ablation"),
                                           (("--width", "32"), "activation")])
def test_one_changed_axis_is_that_method_byte_for_byte(tmp_path, lg, sizes, method):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    default = lg("shrink", source, *HEADS, *sizes, "--calibrate", IMAGES, *SAMPLES, "-o", tmp_path / "a.safetensors",
                 "--json")
    named = lg("shrink", source, *HEADS, *sizes, "--method", method, "--calibrate", IMAGES, *SAMPLES,
               "-o", tmp_path / "b.safetensors", "--json")
    assert default.code == 0 and named.code == 0, default.stderr + named.stderr
    assert json.loads(default.stdout)["method"] == method
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


@pytest.mark.parametrize("sizes, method", [(dict(depth=2), "block-ablation"), (dict(width=32), "activation")])
def test_the_resize_function_chooses_as_lg_shrink_does(tmp_path, sizes, method):
    """`lgcli.resize.resize` given calibration data and no method measures
    the model as `lg shrink` does: the one method's tensors, entry for entry."""
    from lgcli.resize import resize

    source = load(write_plain(make_vit(depth=4), tmp_path / "vit.safetensors"), heads=2)
    calibration = dict(calibrate=IMAGES, calibrate_samples=8, seed=0)
    _, default, report = resize(source, direction="shrink", **sizes, **calibration)
    _, named, _ = resize(source, direction="shrink", **sizes, method=method, **calibration)
    assert report["method"] == method
    ours, theirs = dict(default.items()), dict(named.items())
    assert ours.keys() == theirs.keys()
    for role in ours:
        assert torch.equal(ours[role].data, theirs[role].data), role


def test_the_resize_function_names_resize_file_for_both_axes(tmp_path):
    """Both axes are two steps, the model written and read back between
    them: the in-memory function says which function does that."""
    from lgcli.errors import UsageError
    from lgcli.resize import resize

    source = load(write_plain(make_vit(depth=4), tmp_path / "vit.safetensors"), heads=2)
    with pytest.raises(UsageError, match="block-ablation then activation.*resize_file"):
        resize(source, direction="shrink", depth=2, width=32, calibrate=IMAGES, calibrate_samples=8)


def test_a_dry_run_names_both_steps_and_writes_nothing(tmp_path, lg):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    out = tmp_path / "out.safetensors"
    result = lg("shrink", source, *HEADS, "--depth", "2", "--width", "32", "--calibrate", IMAGES, *SAMPLES,
                "-o", out, "--dry-run", "--json")
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["method"] == "block-ablation, then activation"
    assert (plan["target"]["depth"], plan["target"]["width"]) == (2, 32)
    assert "shrink (block-ablation, then activation): depth 4 -> 2, width 64 -> 32" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("method", ["block-ablation", "activation", None])
def test_a_dry_run_checks_the_calibration_data_and_runs_no_pass_over_it(tmp_path, lg, method):
    """A plan reads and checks the examples (as many as asked, of the
    model's kind) but measures nothing: greedy block ablation on a real
    model on a CPU is hours, and a dry run ran all of it. It runs one batch
    (twice) to say how long the passes will take."""
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    sizes = ("--depth", "2") if method == "block-ablation" else ("--width", "32") if method else \
        ("--depth", "2", "--width", "32")
    named = ("--method", method) if method else ()
    result = lg("shrink", source, *HEADS, *sizes, *named, "--calibrate", IMAGES, *SAMPLES, "--dry-run", "--json")
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["calibration"]["samples"], plan["calibration"]["measured"]) == (8, False)
    assert "calibrated on" not in result.stderr and "block-ablation: round" not in result.stderr
    assert "calibration data checked (8 examples" in result.stderr
    # Its passes when it runs, counted: greedy ablation of 4 blocks to 2 scores 4 then 3 blocks, each round with
    # the full model (and, after the first, the model without the removed block): 5 + 5, after the statistics'
    # pass; activation importance one pass. The time is one timed batch's, per pass.
    passes = {"block-ablation": 1 + 5 + 5, "activation": 1, None: 1 + 5 + 5 + 1}[method]
    assert plan["calibration"]["passes"] == passes
    assert plan["calibration"]["passes_skipping_blocks"] == (10 if method != "activation" else 0)
    # Both rounded (pass_seconds to 1 ms, the estimate to 0.1 s): within 0.05 + passes x 0.0005 of each other
    # (0.0 against 11 x 0.005 on a fast machine).
    assert plan["calibration"]["estimated_seconds"] == pytest.approx(plan["calibration"]["pass_seconds"] * passes,
                                                                     abs=0.05 + passes * 5e-4)
    skipped = " (10 with blocks skipped)" if method != "activation" else ""
    assert f"; {passes} pass{'es' * (passes > 1)} over them when the shrink runs{skipped}:" in result.stderr
    one_shot = lg("shrink", source, *HEADS, "--depth", "2", "--method", "block-ablation", "--ablation", "one-shot",
                  "--calibrate", IMAGES, *SAMPLES, "--dry-run", "--json")
    assert json.loads(one_shot.stdout)["calibration"]["passes"] == 1 + 4 + 1  # each block skipped alone, and the full
    too_many = lg("shrink", source, *HEADS, *sizes, *named, "--calibrate", IMAGES, "--calibrate-samples", "100000",
                  "--dry-run")
    assert too_many.code != 0 and "fewer than --calibrate-samples 100000" in too_many.stderr


def test_an_existing_output_is_refused_before_any_step(tmp_path, lg):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"keep me")
    result = lg("shrink", source, *HEADS, "--depth", "2", "--width", "32", "--calibrate", IMAGES, *SAMPLES,
                "-o", out)
    assert result.code != 0 and "--force" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert out.read_bytes() == b"keep me"


def test_without_data_the_default_is_still_weight_selection(tmp_path, lg):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    result = lg("shrink", source, *HEADS, "--depth", "2", "--width", "32", "-o", tmp_path / "o.safetensors",
                "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["method"] == "select"
    assert len(load_file(tmp_path / "o.safetensors")) > 0


def test_a_swin_is_shrunk_per_stage_in_two_steps_as_the_pipe(tmp_path, lg):
    """A model of stages: depth per stage by block ablation, then the first
    stage's width by activation importance, each stage choosing its own."""
    import lgcli
    from test_swin import make_swin

    source = tmp_path / "swin.safetensors"
    lgcli.save_model(make_swin(), source)  # 2 stages of 2 blocks, width 16
    calibrate = ("--calibrate", IMAGES, *SAMPLES)
    both = lg("shrink", source, "--depth", "1,1", "--width", "8", *calibrate, "-o", tmp_path / "both.safetensors",
              "--json")
    assert both.code == 0, both.stderr
    assert json.loads(both.stdout)["method"] == "block-ablation, then activation"
    first = lg("shrink", source, "--depth", "1,1", "--method", "block-ablation", *calibrate, "-o", "-")
    assert first.code == 0, first.stderr
    piped = lg("shrink", "-", "--width", "8", "--method", "activation", *calibrate,
               "-o", tmp_path / "piped.safetensors", stdin=first.stdout)
    assert piped.code == 0, piped.stderr
    ours, theirs = load_file(tmp_path / "both.safetensors"), load_file(tmp_path / "piped.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
    assert_the_pipes_record(file_metadata(tmp_path / "both.safetensors"), file_metadata(tmp_path / "piped.safetensors"))


def test_both_steps_name_the_real_source_not_a_phantom_stdin(tmp_path, lg):
    """The step between is held in memory, not piped: the output's
    provenance (as lg inspect reads it) and its card name the source the
    user gave, with that source's sha256, and <stdin> only where the user
    piped the source in."""
    from lgcli.checkpoint import read_checkpoint

    variant = "llama-gqa"
    source = save_folder(make_model(variant), tmp_path / "llama", variant)
    calibrate = ("--calibrate", text_file(tmp_path / "calibration.txt"), *SAMPLES)
    out = tmp_path / "out"
    result = lg("shrink", source, "--depth", "2", "--width", "16", *calibrate, "-o", out)
    assert result.code == 0, result.stderr
    shown = lg("inspect", out, "--json")
    assert shown.code == 0, shown.stderr
    chain = json.loads(shown.stdout)["provenance"]
    assert [step.get("method") for step in chain[:2]] == ["activation", "block-ablation"]
    real = read_checkpoint(source).sha256
    assert (chain[1]["file"], chain[1]["source_sha256"], chain[2]["file"]) == ("<in memory>", real, "llama")
    assert "<stdin>" not in json.dumps(chain)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "its weights come from `llama`" in card and f"- source: `llama`, sha256 `{real}`" in card
    assert "<stdin>" not in card

    # Piped in, the source is <stdin>: so it is recorded, with the sha256 of what came in.
    vit = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    piped = lg("shrink", "-", *HEADS, "--depth", "2", "--width", "32", "--calibrate", IMAGES, *SAMPLES,
               "-o", tmp_path / "piped.safetensors", stdin=vit.read_bytes())
    assert piped.code == 0, piped.stderr
    chain = json.loads(lg("inspect", tmp_path / "piped.safetensors", "--json").stdout)["provenance"]
    assert [step.get("method") for step in chain[:2]] == ["activation", "block-ablation"]
    assert (chain[1]["file"], chain[1]["source_sha256"]) == ("<in memory>", read_checkpoint(vit).sha256)
    assert chain[2]["file"] == "<stdin>"


def file_metadata(path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return f.metadata() or {}


def assert_the_pipes_record(ours: dict[str, str], piped: dict[str, str]) -> None:
    """The in-memory two steps record what the pipe of the two records, but
    for the name of the step between: <in memory>, not <stdin>."""
    ours, piped = dict(ours), dict(piped)
    our_between, piped_between = json.loads(ours.pop("lg.source")), json.loads(piped.pop("lg.source"))
    assert ours == piped
    assert (our_between.pop("file"), piped_between.pop("file")) == ("<in memory>", "<stdin>")
    assert our_between == piped_between


def test_lg_bench_has_the_calibrated_defaults_row(tmp_path):
    """`lg bench --methods block-ablation+activation`: the model `lg shrink
    --calibrate DATA` writes, probed like every row. Where one axis changes
    it is that method's model, so its probe row is the method's, figure for
    figure; where both change its cell records both steps; a grow is n/a."""
    import timm

    import lgcli
    from lgcli.bench import BenchSettings, bench, parse_sizes
    from lgcli.calibrated_shrink import BENCH_ROW
    from lgcli.evaluate import ProbeSettings

    torch.manual_seed(0)
    ancestry = tmp_path / "ancestry.safetensors"
    lgcli.save_model(timm.create_model("vit_base_patch16_224", depth=4, embed_dim=64, num_heads=2, patch_size=7,
                                       img_size=28, in_chans=1, num_classes=10).eval(), ancestry)
    settings = BenchSettings(sizes=parse_sizes("2x64,4x32,2x32,6x64"),
                             methods=[BENCH_ROW, "block-ablation", "activation"], budget=1, calibrate_samples=8,
                             probe=ProbeSettings(steps=2, eval_every=1, batch_size=16, progress=False),
                             subset="64", test_subset="40")
    report = bench(ancestry, IMAGES, tmp_path / "bench", settings, notify=lambda message: None)
    cells = {(c["method"], c["size"]): c for c in report["cells"]}
    assert cells[(BENCH_ROW, "2x64")]["row"]["curve"] == cells[("block-ablation", "2x64")]["row"]["curve"]
    assert cells[(BENCH_ROW, "4x32")]["row"]["curve"] == cells[("activation", "4x32")]["row"]["curve"]
    both = cells[(BENCH_ROW, "2x32")]
    assert both["status"] == "done" and both["details"]["method"] == "block-ablation, then activation"
    assert len(both["details"]["chosen"]["kept_layers"]) == 2 and both["details"]["distill"]["steps"] == 1
    assert cells[(BENCH_ROW, "6x64")]["status"] == "n/a" and "cannot grow" in cells[(BENCH_ROW, "6x64")]["reason"]
