"""Sizes as budgets (`lg shrink --params N`, `--memory SIZE`): the rule of
docs/methods.md "Sizes as budgets" checked shape by shape on a tiny ViT whose
every candidate's parameters are timm's own count; grouped-query groups kept
on a Llama; the bytes of `--memory` are those written; `--dry-run` shows the
shape; a budget no shape meets (and other misuses) is refused in one line,
nothing written."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
from lgcli.sizing import BUDGET_FILL

from conftest import TINY, make_vit
from text_models import Sources, load_strict, outputs, token_ids

# Source: depth 4, width 96 = 3 heads of 32 (MLP ratio 4). timm counts its
# shapes (depth x width: parameters):
#          depth 1   depth 2   depth 3   depth 4
#   w 32    19,685    32,389    45,093    57,797
#   w 64    63,941   113,925   163,909   213,893
#   w 96   132,773   244,613   356,453   468,293
SOURCE = dict(depth=4, embed_dim=96, num_heads=3)


def timm_count(depth: int, width: int) -> int:
    model = timm.create_model("vit_base_patch16_224", **{**TINY, "depth": depth, "embed_dim": width,
                                                         "num_heads": width // 32})
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget") / "src.safetensors"
    lgcli.save_model(make_vit(**SOURCE), path)
    return path


def test_the_table_is_timms():
    assert [timm_count(d, 32) for d in range(1, 5)] == [19685, 32389, 45093, 57797]
    assert [timm_count(d, 64) for d in range(1, 5)] == [63941, 113925, 163909, 213893]
    assert [timm_count(d, 96) for d in range(1, 5)] == [132773, 244613, 356453, 468293]
    assert BUDGET_FILL == 0.9  # the expectations below are worked out at 90 %


@pytest.mark.parametrize("budget, depth, width", [
    # Widest within 230,000 at each depth: 4 x 64 (213,893), 3 x 64, 2 x 64, 1 x 96 (132,773).
    # 4 x 64 is the most: all layers kept, narrowed.
    (230_000, 4, 64),
    # Within 250,000: 4 x 64 (213,893), 3 x 64, 2 x 96 (244,613), 1 x 96. Narrowing alone
    # leaves 12.6 % of the most unused (213,893 < 0.9 x 244,613 = 220,152): two layers go.
    (250_000, 2, 96),
    # Within 468,292 (one less than the source): 4 x 64, 3 x 96 (356,453): 213,893 < 320,808.
    (468_292, 3, 96),
    # Within 60,000: every depth at width 32; 4 x 32 (57,797) is the most.
    (60_000, 4, 32),
    # Within 100,000: 4 x 32 (57,797), 3 x 32, 2 x 32, 1 x 64 (63,941, the most). 4 x 32 holds
    # 90.4 % of it: the layers are kept, though one layer at width 64 has more parameters.
    (100_000, 4, 32),
])
def test_the_rule_shape_by_shape(budget, depth, width, source, tmp_path, lg):
    out = tmp_path / "out.safetensors"
    result = lg("shrink", source, "--params", budget, "--json", "-o", out)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["target"]["depth"], report["target"]["width"]) == (depth, width)
    assert report["budget"]["parameters"] == timm_count(depth, width) <= budget
    model = eval(lgcli.inspect_checkpoint(out)["load_call"], {"timm": timm}).eval()  # a strict load
    assert sum(p.numel() for p in model.parameters()) == timm_count(depth, width)
    assert lgcli.load(out).checkpoint.lg["options"]["params"] == budget  # the file says what chose its shape
    assert f"--params {budget:,}: chose depth {depth}, width {width}" in result.stderr


def test_memory_counts_the_bytes_written_at_the_sources_dtype(tmp_path, lg):
    """bf16: 2 bytes a parameter, so 500,000 bytes buy what 250,000 parameters do (2 x 96)."""
    src = tmp_path / "bf16.safetensors"
    lgcli.save_model(make_vit(**SOURCE).to(torch.bfloat16), src)
    plan = lg("shrink", src, "--memory", "500KB", "--dry-run", "--json", "-o", tmp_path / "out.safetensors")
    assert plan.code == 0, plan.stderr
    report = json.loads(plan.stdout)
    assert (report["target"]["depth"], report["target"]["width"]) == (2, 96)
    assert report["output"]["tensor_bytes"] == report["budget"]["bytes"] == 2 * 244_613 <= 500_000
    assert "chose depth 2, width 96" in plan.stderr and list(tmp_path.iterdir()) == [src]


def test_grouped_query_groups_are_kept(tmp_path_factory, lg, tmp_path):
    """4 heads sharing 2 key/value heads: the narrower shapes have 2 heads (1 key/value head), never 3 or 1."""
    src, model = Sources(tmp_path_factory)("llama-gqa", num_hidden_layers=4, hidden_size=32, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=48)
    full = lgcli.load(src).stack.num_parameters()
    out = tmp_path / "out"
    result = lg("shrink", src, "--params", full - 1, "--json", "-o", out)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    target = report["target"]
    assert (target["heads"], target["kv_heads"], target["head_dim"]) in ((4, 2, 8), (2, 1, 8))
    reloaded = load_strict(out, "llama-gqa")
    assert reloaded.num_parameters() == report["budget"]["parameters"] <= full - 1
    assert torch.isfinite(outputs(reloaded, token_ids())).all()


def test_a_learngene_takes_sizes_not_a_budget(source, tmp_path, lg):
    learngene = tmp_path / "peg.lg.safetensors"
    assert lg("condense", source, "--method", "peg", "-o", learngene).code == 0
    result = lg("shrink", learngene, "--params", "10K", "-o", tmp_path / "out.safetensors")
    assert result.code != 0 and "a learngene builds the sizes it is given: --depth and --width" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.safetensors").exists()


def test_a_swin_budget_sets_its_deepest_stage_and_first_width(tmp_path, lg):
    from conftest import printed_model
    from test_swin import FOUR_STAGES, make_swin

    src = tmp_path / "swin.safetensors"
    model = make_swin(**FOUR_STAGES)
    lgcli.save_model(model, src)
    full = sum(p.numel() for p in model.parameters())
    out = tmp_path / "out.safetensors"
    result = lg("shrink", src, "--params", full // 2, "--json", "-o", out)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    resized = printed_model(out)  # timm.create_model + a strict load, as lg inspect prints
    assert sum(p.numel() for p in resized.parameters()) == report["budget"]["parameters"] <= full // 2


@pytest.mark.parametrize("args, message", [
    (("shrink", "--params", "19K"),
     "--params 19K: no shape lg can shrink this vit to is that small; the smallest, depth 1 at width 32, "
     "has 19.7K parameters"),
    (("shrink", "--params", "468293"), "--params 468K: the source has 468K parameters already; nothing to shrink"),
    # A budget past the largest suffix is echoed in the units the user gave it, never as an exponent.
    (("shrink", "--memory", "5TB"), "--memory 5TB: the source has 1.87MB already; nothing to shrink"),
    (("shrink", "--params", "5000B"), "--params 5,000B: the source has 468K parameters already; nothing to shrink"),
    (("shrink", "--params", "60M", "--depth", "2"), "--params picks the depth and width itself"),
    (("shrink", "--params", "100K", "--memory", "1MB"), "give --params or --memory, not both"),
    (("shrink", "--params", "lots"), "--params takes a count such as 60M, 1.5B or 500K, not 'lots'"),
    (("grow", "--params", "100K"), "No such option: --params"),
])
def test_budgets_are_refused_in_one_line(args, message, source, tmp_path, lg):
    out = tmp_path / "out.safetensors"
    result = lg(args[0], source, *args[1:], "-o", out)
    assert result.code != 0 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
