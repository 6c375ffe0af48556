"""The Python API given a live model where it reads a checkpoint: a
TypeError naming what to do, not a missing file named by the model's repr."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm

import lgcli
from lgcli.resize import resize


@pytest.mark.parametrize("call", [lgcli.load, lgcli.load_model, lgcli.inspect_checkpoint,
                                  lambda model: resize(model, direction="shrink", depth=1)],
                         ids=["load", "load_model", "inspect_checkpoint", "resize"])
def test_a_live_model_where_a_checkpoint_is_read_is_a_type_error_that_says_what_to_do(call):
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=16, depth=2, num_classes=3)
    with pytest.raises(TypeError) as raised:
        call(model)
    message = str(raised.value)
    assert "not a VisionTransformer" in message and "lgcli.spec_of_model(model)" in message
    assert "\n" not in message  # one line, not the model's repr
    spec, _ = lgcli.spec_of_model(model)  # the way it names works
    assert spec.depth == 2


@pytest.mark.parametrize("method, flags, kwargs", [
    ("select", [], {}),
    ("heur-lg", ["--seed", "3"], {"seed": 3}),
    ("block-influence", ["--calibrate", "fashion-mnist-mini", "--calibrate-samples", "8"],
     {"calibrate": "fashion-mnist-mini", "calibrate_samples": 8}),
])
def test_a_resize_saved_from_python_records_what_lg_shrink_records(method, flags, kwargs, lg, tmp_path):
    """`lgcli.save(..., method=report["method"], options=recorded_options(report))` after `resize` writes
    the provenance `lg shrink` writes (lg distill reads the teacher blocks a student holds from it)."""
    from lgcli.checkpoint import read_checkpoint
    from lgcli.resize import recorded_options

    example = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"
    by_cli = tmp_path / "cli.safetensors"
    assert lg("shrink", example, "--depth", "3", "--method", method, *flags, "-o", by_cli).code == 0
    loaded = lgcli.load(example)
    spec, stack, report = resize(loaded, direction="shrink", depth=3, method=method, notify=lambda m: None,
                                 **kwargs)
    by_api = tmp_path / "api.safetensors"
    lgcli.save(by_api, spec, stack, source=loaded, method=report["method"], options=recorded_options(report))
    cli, api = read_checkpoint(by_cli).lg, read_checkpoint(by_api).lg
    assert api["method"] == cli["method"] == method
    assert api["options"] == cli["options"] and api["options"]["direction"] == "shrink"
