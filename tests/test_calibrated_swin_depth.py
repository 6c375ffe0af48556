"""`lg shrink --calibrate DATA` (no --method) of a Swin's depth and width:
the depth its two steps write is the one its dry run plans. A Swin's one
`--depth N` is its deepest stage's depth; the width step, handed the
model between (2,2 -> 2,1), must not read N again against that model,
whose deepest stage is another one (it wrote 1,1)."""

from __future__ import annotations

import pytest
import transformers

import lgcli
from conftest import make_vit, write_plain
from lgcli.api import load
from lgcli.resize import resize_file
from lgcli.sizing import depths_of
from test_hf_swin import TINY
from test_swin import make_swin

CALIBRATION = dict(calibrate="fashion-mnist-mini", calibrate_samples=8)


def timm_swin(tmp_path):
    lgcli.save_model(make_swin(), tmp_path / "swin.safetensors")
    return tmp_path / "swin.safetensors"


def hf_swin(tmp_path):
    folder = tmp_path / "hf-swin"
    transformers.SwinForImageClassification(transformers.SwinConfig(**TINY)).save_pretrained(folder)
    return folder


def shrunk(source, out, **options):
    """(the dry run's planned stage depths, the written file's, the run's report's)."""
    plan = resize_file(source, out, direction="shrink", dry_run=True, **options)
    report = resize_file(source, out, direction="shrink", **options)
    planned = tuple(stage["depth"] for stage in plan["target"]["stages"])
    reported = tuple(stage["depth"] for stage in report["target"]["stages"])
    return planned, depths_of(load(out).spec), reported, report["method"]


@pytest.mark.parametrize("make", [timm_swin, hf_swin], ids=["timm", "transformers"])
def test_a_swins_two_step_shrink_writes_the_planned_depths(tmp_path, make):
    source = make(tmp_path)  # 2 stages of 2 blocks, width 16
    out = tmp_path / ("out.safetensors" if source.suffix else "out")
    planned, written, reported, method = shrunk(source, out, depth=1, width=8, **CALIBRATION)
    assert method == "block-ablation, then activation"  # both steps ran: the path at fault
    # One number is the deepest stage's depth: the later stage loses a block, the first keeps its two.
    assert planned == written == reported == (2, 1)
    selected = tmp_path / ("select.safetensors" if source.suffix else "select")
    resize_file(source, selected, direction="shrink", method="select", depth=1, width=8)
    assert depths_of(load(selected).spec) == written


def test_a_swins_budget_shrink_writes_the_planned_depths(tmp_path):
    """A --params budget's depth is one number too (8K of 35.2K: depth 1 at width 8), handed to both steps."""
    source = timm_swin(tmp_path)
    planned, written, reported, method = shrunk(source, tmp_path / "out.safetensors", params=8000, **CALIBRATION)
    assert method == "block-ablation, then activation"
    assert planned == written == reported == (2, 1)


def test_a_vits_two_step_shrink_writes_the_asked_sizes(tmp_path):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")  # 4 x 64
    out = tmp_path / "out.safetensors"
    options = dict(depth=2, width=32, source_heads=2, **CALIBRATION)
    plan = resize_file(source, out, direction="shrink", dry_run=True, **options)
    report = resize_file(source, out, direction="shrink", **options)
    spec = load(out, heads=1).spec
    assert report["method"] == "block-ablation, then activation"
    assert (plan["target"]["depth"], plan["target"]["width"]) == (spec.depth, spec.width) == (2, 32)
