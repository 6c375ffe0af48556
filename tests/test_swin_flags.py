"""A Swin (a model of stages, timm's or transformers') is sized by --depth
and --width alone: every size flag that does not apply to it is a usage
mistake (exit 2) whose one line names the flags that do, the dry run too.
And a timm Swin file that does not record its image size is read at the
size its stages' windows show: a low-resolution Swin, whose later windows
timm clamps to their grids, is read, loads strictly by its printed line with
the same logits, and resizes."""

from __future__ import annotations

import json

import pytest
import timm
import torch
import transformers
from safetensors.torch import save_file

import lgcli
from conftest import printed_model
from test_hf_swin import TINY
from test_swin import make_swin

STAGES_ONLY = "(a model of stages): each stage's heads follow its width at its head dim, and its MLP keeps its " \
              "ratio; give --depth and --width"


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A timm Swin file and a transformers Swin folder, each of two stages."""
    root = tmp_path_factory.mktemp("swins")
    timm_file = root / "swin.safetensors"
    lgcli.save_model(make_swin(), timm_file)
    torch.manual_seed(0)
    folder = root / "hf_swin"
    transformers.SwinForImageClassification(transformers.SwinConfig(**TINY)).save_pretrained(folder)
    return {"swin": timm_file, "hf-swin": folder}


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("family", ["swin", "hf-swin"])
@pytest.mark.parametrize("command", ["shrink", "grow"])
@pytest.mark.parametrize("flag", ["--heads", "--kv-heads", "--mlp-dim"])
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_size_flag_a_swin_does_not_take_is_a_usage_mistake_naming_depth_and_width(
        sources, tmp_path, lg, family, command, flag, dry_run):
    out = tmp_path / ("out.safetensors" if family == "swin" else "out")
    value = "1" if command == "shrink" else "64"
    result = lg(command, sources[family], flag, value, *(["--dry-run"] if dry_run else []), "-o", out)
    line = one_line(result)
    assert result.code == 2 and line.endswith(f"{flag} does not apply to a {family} {STAGES_ONLY}"), line
    assert "give --heads" not in line and not out.exists()


@pytest.mark.parametrize("family", ["swin", "hf-swin"])
def test_the_flags_the_refusal_names_resize_the_swin(sources, tmp_path, lg, family):
    out = tmp_path / ("out.safetensors" if family == "swin" else "out")
    done = lg("shrink", sources[family], "--depth", "1", "--width", "8", "-o", out)
    assert done.code == 0, done.stderr
    assert [(s.depth, s.width) for s in lgcli.load(out).spec.stages] == [(2, 8), (1, 16)]


def test_a_swin_learngene_refuses_heads_as_a_usage_mistake(sources, tmp_path, lg):
    gene = tmp_path / "peg.lg.safetensors"
    assert lg("condense", sources["swin"], "--method", "peg", "-o", gene).code == 0
    for flag in ("--heads", "--kv-heads"):
        result = lg("grow", gene, "--depth", "3", flag, "2", "-o", tmp_path / "des.safetensors")
        assert result.code == 2 and one_line(result).endswith(f"{flag} does not apply to a swin {STAGES_ONLY}")


@pytest.mark.parametrize("family", ["swin", "hf-swin"])
@pytest.mark.parametrize("flag,message", [
    ("--source-heads", "a Swin's heads are read from its relative position tables: a flag giving them "
                       "(--source-heads, --heads) does not apply"),
    # Was ignored without a word: a Swin has no key/value heads apart from its heads.
    ("--source-kv-heads", "a Swin has no grouped-query attention: --source-kv-heads does not apply"),
])
def test_the_source_heads_of_a_swin_are_refused(sources, tmp_path, lg, family, flag, message):
    out = tmp_path / ("out.safetensors" if family == "swin" else "out")
    result = lg("shrink", sources[family], flag, "2", "--depth", "1", "-o", out)
    assert result.code != 0 and one_line(result).endswith(message) and not out.exists()


def test_the_source_heads_of_a_swin_are_a_usage_mistake(sources, tmp_path, lg):
    result = lg("shrink", sources["swin"], "--source-kv-heads", "2", "--depth", "1", "-o", tmp_path / "o.safetensors")
    assert result.code == 2


# ---- the image size of a timm Swin file that does not record it ----

# Four stages of patch 4 and window 7, as swin_tiny at a quarter of its resolution.
LOW = dict(embed_dim=16, depths=(2, 2, 2, 2), num_heads=(2, 4, 8, 16), patch_size=4, window_size=7, num_classes=3)


def plain(model: torch.nn.Module, path, masks: bool = False):
    """The state dict as timm saves it (no lg metadata); `masks`: with the
    shifted blocks' attention masks, as older timm and Microsoft's files carry."""
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if masks:
        state.update({f"layers.{i}.blocks.{j}.attn_mask": block.attn_mask.contiguous()
                      for i, stage in enumerate(model.layers) for j, block in enumerate(stage.blocks)
                      if block.attn_mask is not None})
    save_file(state, str(path))
    return path


def windows(model: torch.nn.Module) -> list[int]:
    return [stage.blocks[0].window_size[0] for stage in model.layers]


def pixels(size: int) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("args,masks,found,assumed", [
    (dict(LOW, img_size=64), False, 64, True),   # windows 7, 7, 4, 2: grids 13 to 16 give them; the largest
    (dict(LOW, img_size=24), False, 24, False),  # windows 6, 3, 2, 1: a grid of 6 alone (window 7 clamped to 6)
    # Two stages of windows 7 at 112 px: the masks bound the grid to 22 to 28 (without them: 56 px, a guess).
    (dict(LOW, img_size=112, depths=(2, 2), num_heads=(2, 4)), True, 112, True),
], ids=["clamped", "settled", "masked"])
def test_a_swin_is_read_at_the_image_size_its_windows_show(tmp_path, args, masks, found, assumed):
    img_size = args["img_size"]
    model = make_swin(**args)
    path = plain(model, tmp_path / "plain.safetensors", masks)
    report = lgcli.inspect_checkpoint(path)
    assert report["img_size"] == found and bool(report.get("img_size_assumed")) is assumed
    loaded = printed_model(path)  # timm's strict checkpoint_path load, as printed
    assert windows(loaded) == windows(model)
    with torch.no_grad():
        assert torch.equal(loaded(pixels(img_size)), model(pixels(img_size)))


def test_grids_the_windows_do_not_tell_apart_take_the_largest_and_say_it_is_assumed(tmp_path, lg):
    """At 56 px (a grid of 14) the tensors are those of 52 to 64 px: lg
    assumes 64 and says so, and the printed line builds a model of the same
    windows that loads the file strictly."""
    model = make_swin(**{**LOW, "img_size": 56})
    path = plain(model, tmp_path / "s56.safetensors")
    result = lg("inspect", path, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["img_size"], report["img_size_assumed"], report["window_size"]) == (64, True, 7)
    assert windows(printed_model(path)) == windows(model) == [7, 7, 4, 2]


def test_a_low_resolution_swin_resizes_and_its_outputs_load_as_printed(tmp_path, lg):
    model = make_swin(**{**LOW, "img_size": 64})
    path = plain(model, tmp_path / "s64.safetensors")
    small = tmp_path / "small.safetensors"
    done = lg("shrink", path, "--depth", "1", "--width", "8", "-o", small)
    assert done.code == 0, done.stderr
    shrunk = printed_model(small)
    assert windows(shrunk) == [7, 7, 4, 2] and shrunk(pixels(64)).shape == (2, 3)
    assert lgcli.inspect_checkpoint(small)["img_size_assumed"] is True  # still a guess, recorded as one
    wide = tmp_path / "wide.safetensors"
    assert lg("grow", path, "--width", "32", "--method", "clone", "-o", wide).code == 0
    with torch.no_grad():
        torch.testing.assert_close(printed_model(wide)(pixels(64)), model(pixels(64)), atol=1e-5, rtol=0)


def test_windows_no_image_size_gives_are_refused_in_one_line(tmp_path, lg):
    model = make_swin(**{**LOW, "img_size": 64})
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    for j in range(2):  # the last stage's window 3 where its grid is at most 2
        state[f"layers.3.blocks.{j}.attn.relative_position_bias_table"] = torch.zeros(25, 16)
    path = tmp_path / "bad.safetensors"
    save_file(state, str(path))
    result = lg("inspect", path)
    assert result.code == 1
    assert one_line(result).endswith("no img_size gives the position tables' windows [7, 7, 4, 3] at window_size 7")


def test_a_timm_swin_of_an_image_size_not_a_multiple_of_its_patch(tmp_path):
    """timm's patch grid is image // patch (26 px: 6 patches, not 7): a
    model lg saves records its size, and the windows lg expects of it are
    timm's (6, 3, 2, 1)."""
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **{**LOW, "img_size": 26}).eval()
    path = tmp_path / "s26.safetensors"
    lgcli.save_model(model, path)
    report = lgcli.inspect_checkpoint(path)
    assert report["img_size"] == 26 and not report.get("img_size_assumed")
    with torch.no_grad():
        assert torch.equal(printed_model(path)(pixels(26)), model(pixels(26)))
