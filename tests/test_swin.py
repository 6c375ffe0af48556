"""timm Swin Transformers (issue 21, item 2): a model of stages, each resized
by the method as a model of its own, read and written strictly as timm
builds it."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from safetensors.torch import save_file

import lgcli
import lgcli.sizing
from lgcli.arch import get_adapter
from lgcli.errors import LgError, UsageError
from lgcli.methods.common import uniform_indices
from lgcli.options import parse_depth
from lgcli.resize import resize_file
from lgcli.sizing import stage_depths
from lgcli.stack import ArchSpec

from conftest import printed_model

# Tiny Swins (timm kwargs): two stages of head dim 8, and four stages whose
# last is smaller than the window (timm clamps its window to 2 and does not shift).
TWO_STAGES = dict(embed_dim=16, depths=(2, 2), num_heads=(2, 4), img_size=32, patch_size=2, window_size=4,
                  num_classes=5)
FOUR_STAGES = dict(embed_dim=16, depths=(1, 1, 2, 1), num_heads=(2, 4, 8, 16), img_size=32, patch_size=2,
                   window_size=4, num_classes=3)


def make_swin(seed: int = 0, **kwargs) -> torch.nn.Module:
    """A tiny timm Swin whose every parameter is random and non-trivial
    (norm weights off 1, biases off 0, position tables off their init)."""
    torch.manual_seed(seed)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **{**TWO_STAGES, **kwargs})
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() <= 1 and "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.add_(0.05 * torch.randn_like(param))
    return model.eval()


def images(model: torch.nn.Module, batch: int = 2) -> torch.Tensor:
    torch.manual_seed(1)
    size = model.patch_embed.img_size
    return torch.randn(batch, model.patch_embed.proj.in_channels, *size)


@pytest.fixture(scope="module", params=["two-stages", "four-stages"])
def source(request, tmp_path_factory):
    model = make_swin(**(TWO_STAGES if request.param == "two-stages" else FOUR_STAGES))
    path = tmp_path_factory.mktemp("swin") / "swin.safetensors"
    lgcli.save_model(model, path)
    return model, path


def test_read_and_written_back_exactly(source):
    model, path = source
    adapter = get_adapter("swin")
    state = model.state_dict()
    spec, stack = adapter.to_stack(state, config=adapter.config(lgcli.load(path).spec))
    back = adapter.from_stack(spec, stack)
    assert set(back) == set(state)
    for key, tensor in state.items():
        assert torch.equal(back[key], tensor), key
    assert adapter.parameter_count(spec) == sum(p.numel() for p in model.parameters())
    assert [s.depth for s in spec.stages] == [len(s.blocks) for s in model.layers]
    assert [s.heads for s in spec.stages] == [s.blocks[0].attn.num_heads for s in model.layers]


def test_printed_line_loads_strictly_and_keeps_the_logits(source):
    model, path = source
    loaded = printed_model(path)
    x = images(model)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_clone_to_the_same_size_keeps_the_logits(source, tmp_path):
    model, path = source
    depths = tuple(len(s.blocks) for s in model.layers)
    resize_file(path, tmp_path / "same.safetensors", direction="grow", method="clone", depth=depths, width=16)
    x = images(model)
    with torch.no_grad():
        torch.testing.assert_close(printed_model(tmp_path / "same.safetensors")(x), model(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("insert_top_depth", [False, True])
def test_clone_wider_and_deeper_keeps_the_logits(source, tmp_path, insert_top_depth):
    """Width by repetition (patch merging's 4 blocks each tiled and divided,
    the head tables tiled with the heads); depth by identity blocks on top of
    each stage: a block inserted between two would change which of the
    following blocks timm shifts (odd ones in a stage), so only --insert top
    keeps the function when depth grows (docs/methods.md)."""
    model, path = source
    depths = tuple(len(s.blocks) + (2 if insert_top_depth else 0) for s in model.layers)
    out = tmp_path / "wide.safetensors"
    resize_file(path, out, direction="grow", method="clone", depth=depths, width=32, insert="top")
    grown = printed_model(out)
    assert [len(s.blocks) for s in grown.layers] == list(depths)
    x = images(model)
    with torch.no_grad():
        torch.testing.assert_close(grown(x), model(x), atol=1e-5, rtol=0)


SUPPORTED = [("select", "shrink"), ("bot", "shrink"), ("heur-lg", "shrink"), ("auto-lg", "shrink"),
             ("clone", "grow"), ("bot", "grow"), ("heur-lg", "grow"), ("auto-lg", "grow")]


@pytest.mark.parametrize("method,direction", SUPPORTED)
def test_every_method_gives_a_model_timm_loads_strictly(source, tmp_path, method, direction):
    model, path = source
    stages = len(model.layers)
    if direction == "shrink":
        depths, width = (1,) * stages, 8        # head dim 8: one head in the first stage
    else:
        depths, width = tuple(len(s.blocks) + 1 + i % 2 for i, s in enumerate(model.layers)), 32
    out = tmp_path / f"{method}.safetensors"
    report = resize_file(path, out, direction=direction, method=method, depth=depths, width=width, seed=3)
    assert [s["depth"] for s in report["target"]["stages"]] == list(depths)
    assert [s["width"] for s in report["target"]["stages"]] == [width * 2 ** i for i in range(stages)]
    assert [s["heads"] for s in report["target"]["stages"]] == [width * 2 ** i // 8 for i in range(stages)]
    assert len(report["details"]["stages"]) == stages
    resized = printed_model(out)            # timm.create_model(...) + load_state_dict(strict=True)
    with torch.no_grad():
        logits = resized(images(model))
    assert logits.shape == (2, model.num_classes) and torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ["swin.safetensors", "swin.bin"])  # .bin: a name timm would read as a pickle
def test_the_load_call_is_one_expression_whose_value_is_the_loaded_model(source, tmp_path, lg, name):
    """As every family's: `load_call` (JSON) is the expression after
    `model = `, so eval gives the model, with the file's tensors exactly, and
    the two printed lines run as printed."""
    model, path = source
    out = tmp_path / name
    out.write_bytes(path.read_bytes())
    report = json.loads(lg("inspect", out, "--json").stdout)
    call = report["load_call"]
    assert "model." not in call and ";" not in call, call  # no statement that needs `model` already made
    scope: dict = {}
    exec(report["load_imports"], scope)
    loaded = eval(call, scope).eval()
    state = loaded.state_dict()
    assert all(torch.equal(state[key], tensor) for key, tensor in model.state_dict().items())
    printed = lg("inspect", out).stdout.decode().split("load with:\n", 1)[1]
    lines = [line.strip() for line in printed.splitlines()]
    assert lines[1] == f"model = {call}"
    ran: dict = {}
    exec("\n".join(lines[:2]), ran)
    with torch.no_grad():
        assert torch.equal(ran["model"].eval()(images(model)), model.eval()(images(model)))


def test_bot_round_trip_per_stage_is_exact(source, tmp_path):
    """SPEC.md "BoT": with haar, periodization and no rescaling,
    shrink(grow(x)) == x, here on every stage and patch merging at once."""
    model, path = source
    depths = tuple(len(s.blocks) for s in model.layers)
    options = dict(method="bot", wavelet="haar", rescale="none", fit="interp")
    resize_file(path, tmp_path / "big.safetensors", direction="grow", depth=tuple(2 * d for d in depths),
                width=32, **options)
    resize_file(tmp_path / "big.safetensors", tmp_path / "back.safetensors", direction="shrink", depth=depths,
                width=16, **options)
    back = lgcli.load(tmp_path / "back.safetensors")
    state = get_adapter("swin").from_stack(back.spec, back.stack)
    for key, tensor in model.state_dict().items():
        torch.testing.assert_close(state[key], tensor, atol=1e-6, rtol=0, msg=key)


def test_patch_merging_and_head_tables_by_hand(tmp_path):
    """Select at width 16 -> 8 (stage 1: 32 -> 16, merging from 16 -> 8 per
    neighbour), entry by entry: the reduction (out, 4 x C) keeps rows
    0, 2, 4, ... and, within each of the 4 neighbours' blocks, columns 0, 2,
    ...; its norm likewise per block; the relative position tables keep the
    selected heads. Clone: every block tiled, columns divided by 2."""
    model = make_swin()
    path = tmp_path / "swin.safetensors"
    lgcli.save_model(model, path)
    resize_file(path, tmp_path / "small.safetensors", direction="shrink", method="select", width=8)
    resize_file(path, tmp_path / "wide.safetensors", direction="grow", method="clone", width=32)
    source = model.state_dict()
    small = printed_model(tmp_path / "small.safetensors").state_dict()
    wide = printed_model(tmp_path / "wide.safetensors").state_dict()
    reduction, norm = source["layers.1.downsample.reduction.weight"], source["layers.1.downsample.norm.weight"]
    assert small["layers.1.downsample.reduction.weight"].shape == (16, 32)
    for i in range(16):
        for k in range(4):
            for c in range(8):
                assert small["layers.1.downsample.reduction.weight"][i, k * 8 + c] == reduction[2 * i, k * 16 + 2 * c]
                assert small["layers.1.downsample.norm.weight"][k * 8 + c] == norm[k * 16 + 2 * c]
    for i in range(64):
        for k in range(4):
            for c in range(32):
                assert wide["layers.1.downsample.reduction.weight"][i, k * 32 + c] == reduction[i % 32, k * 16 + c % 16] / 2
                assert wide["layers.1.downsample.norm.weight"][k * 32 + c] == norm[k * 16 + c % 16]
    for stage, (heads, kept) in enumerate(((2, 1), (4, 2))):
        table = source[f"layers.{stage}.blocks.1.attn.relative_position_bias_table"]
        chosen = uniform_indices(heads, kept)
        assert chosen.tolist() == ([0] if kept == 1 else [0, 2])
        assert torch.equal(small[f"layers.{stage}.blocks.1.attn.relative_position_bias_table"], table[:, chosen])
        assert torch.equal(wide[f"layers.{stage}.blocks.1.attn.relative_position_bias_table"],
                           table.repeat(1, 2))


@pytest.mark.parametrize("given,expected", [
    (None, (2, 2, 6, 2)), (3, (2, 2, 3, 2)), (9, (2, 2, 9, 2)), ((1, 2, 3, 4), (1, 2, 3, 4)),
])
def test_depth_per_stage_rule(given, expected):
    """One number is the deepest stage's (the most blocks; the last of a tie), the others kept."""
    spec = ArchSpec.of_stages("swin", tuple(
        ArchSpec("swin", depth=d, width=w, heads=w // 32, head_dim=32, mlp_dim=4 * w)
        for d, w in zip((2, 2, 6, 2), (96, 192, 384, 768))), {})
    assert stage_depths(spec, given) == expected
    tie = spec.with_stages(tuple(s.with_sizes(depth=2) for s in spec.stages))
    assert stage_depths(tie, 5) == (2, 2, 2, 5)
    with pytest.raises(LgError, match="gives 2 stage depths, the swin has 4 stages"):
        stage_depths(spec, (1, 2))


def test_depth_flag_parsing():
    assert parse_depth("12") == 12 and parse_depth("2,2,6,2") == (2, 2, 6, 2) and parse_depth(" 1, 3") == (1, 3)
    for bad in ("", "2,,2", "two", "2.5", "0,2", "-1"):
        with pytest.raises(UsageError):
            parse_depth(bad)


def test_cli_inspect_shrink_grow(source, tmp_path, lg):
    model, path = source
    stages = len(model.layers)
    shown = lg("inspect", path)
    assert shown.code == 0, shown.stderr
    text = shown.stdout.decode()
    assert "depths" in text and "widths" in text
    assert (f"model = timm.create_model('swin_tiny_patch4_window7_224', pretrained=False, checkpoint_path={str(path)!r}, "
            f"embed_dim=16, depths=") in text
    listed = ",".join(["1"] * stages)
    small = tmp_path / "small.safetensors"
    shrunk = lg("shrink", path, "--depth", listed, "--width", "8", "-o", small)
    assert shrunk.code == 0, shrunk.stderr
    assert f"depths {','.join(str(len(s.blocks)) for s in model.layers)} -> {listed}" in shrunk.stderr
    report = json.loads(lg("inspect", small, "--json").stdout)
    assert [s["depth"] for s in report["stages"]] == [1] * stages
    assert [s["width"] for s in report["stages"]] == [8 * 2 ** i for i in range(stages)]
    big = tmp_path / "big.safetensors"
    grown = lg("grow", path, "--depth", "4", "--width", "32", "--method", "clone", "--insert", "top", "-o", big)
    assert grown.code == 0, grown.stderr
    depths = [len(s.blocks) for s in model.layers]
    deepest = max(range(stages), key=lambda i: (depths[i], i))
    depths[deepest] = 4
    built = printed_model(big)
    assert [len(s.blocks) for s in built.layers] == depths
    x = images(model)
    with torch.no_grad():
        torch.testing.assert_close(built(x), model(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("args,message", [
    (("shrink", "--depth", "1,1,1,1,1,1"), "stage depths, the swin has"),
    (("shrink", "--heads", "1"), "--heads does not apply to a swin"),
    # a shrink lists only the widths it reaches: none wider than the source's 16
    (("shrink", "--width", "12"), "width 12 is not a whole number of heads of dimension 8 (valid widths: 8, 16)"),
    (("grow", "--depth", "4", "--method", "tleg-fit"), "not defined on a swin"),
    (("shrink", "--depth", "x"), "--depth takes a whole number"),
])
def test_cli_refusals_are_one_line(source, tmp_path, lg, args, message):
    _, path = source
    out = tmp_path / "out.safetensors"
    result = lg(args[0], path, *args[1:], "-o", out)
    assert result.code != 0 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("direction", ["grow", "shrink"])
def test_a_mixed_change_is_refused_with_the_pipe_that_makes_it(source, tmp_path, direction, lg):
    """Neither command alone: the refusal gives the shrink piped into the grow
    with every stage's depth written out, and that pipe, run as printed,
    writes the model asked for (timm loads it strictly)."""
    import re

    from printed import run_printed

    _, path = source
    out = tmp_path / "out.safetensors"
    args = ["--depth", "3", "--width", "8"]  # the deepest stage deeper, every stage narrower
    refused = lg(direction, path, *args, "-o", out)
    assert refused.code != 0 and len(refused.stderr.strip().splitlines()) == 1
    pipe = re.search(r"pipe the two: (lg .*)$", refused.stderr.strip()).group(1)
    done = run_printed(pipe)  # as a shell reads it
    assert done.code == 0, (pipe, done.stderr)
    target = lgcli.sizing.target_spec(lgcli.load(path).spec, depth=3, width=8)
    written = lgcli.load(out).spec
    assert [(s.depth, s.width) for s in written.stages] == [(s.depth, s.width) for s in target.stages]
    assert torch.isfinite(printed_model(out)(images(printed_model(out)))).all()


def test_tleg_fit_refused_on_a_swin(source, tmp_path, lg):
    """The learngene kinds apply per stage (tests/test_swin_learngenes.py);
    tleg-fit's line over a stage of 2 blocks says nothing about a third."""
    _, path = source
    result = lg("grow", path, "--depth", "3", "--method", "tleg-fit", "-o", tmp_path / "t.safetensors")
    assert result.code != 0 and "not defined on a swin" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_plain_timm_file_without_metadata(tmp_path):
    """No lg metadata: heads and window from the position tables, the image
    size assumed (the last stage one window: patch 2 x window 4 x 2 = 16)
    and said so; the printed line loads it strictly."""
    model = make_swin(img_size=16)
    path = tmp_path / "plain.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    report = lgcli.inspect_checkpoint(path)
    assert report["img_size"] == 16 and report["img_size_assumed"] is True
    assert [s["heads"] for s in report["stages"]] == [2, 4] and report["window_size"] == 4
    x = images(model)
    with torch.no_grad():
        assert torch.equal(printed_model(path)(x), model(x))
    # What lg writes from it still says the image size was assumed, not known.
    out = tmp_path / "small.safetensors"
    resize_file(path, out, direction="shrink", depth=[2, 1], method="select")
    assert lgcli.inspect_checkpoint(out)["img_size_assumed"] is True


def test_recorded_config_that_disagrees_is_refused(tmp_path):
    model = make_swin()
    adapter = get_adapter("swin")
    config = adapter.config(adapter.to_stack(model.state_dict(), config={"img_size": 32})[0])
    with pytest.raises(LgError, match="says depths"):
        adapter.to_stack(model.state_dict(), config={**config, "depths": [2, 3]})
    with pytest.raises(LgError, match="windows"):
        adapter.to_stack(model.state_dict(), config={**config, "window_size": 7, "img_size": 64})


@pytest.fixture
def swin_hub_folder(tmp_path):
    from timm.models import save_for_hf

    model = make_swin()
    folder = tmp_path / "swin_hub"
    save_for_hf(model, str(folder), safe_serialization=True)  # timm's own writer
    return model, folder


def test_timm_hub_folder_inspected_from_its_config(swin_hub_folder, lg):
    _, folder = swin_hub_folder
    result = lg("inspect", folder, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["family"] == "swin" and report["img_size"] == 32 and not report.get("img_size_assumed")
    assert [(s["depth"], s["width"], s["heads"]) for s in report["stages"]] == [(2, 16, 2), (2, 32, 4)]
    assert report["load_call"] == f"timm.create_model('local-dir:{folder}', pretrained=True)"


@pytest.mark.parametrize("method,direction", SUPPORTED)
def test_timm_hub_folder_resized_as_one(swin_hub_folder, tmp_path, method, direction):
    """The output is a timm hub folder that `local-dir:` loads strictly; clone keeps the logits."""
    model, folder = swin_hub_folder
    out = tmp_path / "out"
    depth, width = ((1, 1), 8) if direction == "shrink" else ((3, 2), 32)
    resize_file(folder, out, direction=direction, method=method, depth=depth, width=width)
    config = json.loads((out / "config.json").read_text())
    assert config["model_args"]["depths"] == list(depth) and config["model_args"]["embed_dim"] == width
    assert config["num_features"] == 2 * width
    resized = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    x = images(model)
    with torch.no_grad():
        logits = resized(x)
        if method == "clone":
            resize_file(folder, tmp_path / "wide", direction="grow", method="clone", width=32)
            wide = timm.create_model(f"local-dir:{tmp_path / 'wide'}", pretrained=True).eval()
            torch.testing.assert_close(wide(x), model(x), atol=1e-5, rtol=0)
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()
