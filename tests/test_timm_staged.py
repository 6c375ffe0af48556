"""A timm family of stages is data (`lgcli.arch.timm_family.TimmFamily` and
`lgcli.arch.timm_staged.TimmStages`) read by one adapter
(`StagedTimmAdapter`): the timm Swin is such a declaration, and what the
adapter says of it follows from the declaration (tests/test_swin.py and
tests/test_swin_microsoft_layout.py hold the Swin's reading, writing and
resizing; tests/test_model_shapes.py its count against timm's)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import timm
import torch

import lgcli
from lgcli.arch import ADAPTERS, adapter_of_model
from lgcli.arch.swin import SWIN, SWIN_STAGES
from lgcli.arch.timm_staged import StagedTimmAdapter
from lgcli.errors import LgError

SWIN_ARGS = dict(embed_dim=16, depths=(2, 2), num_heads=(2, 4), img_size=32, patch_size=2, window_size=4,
                 num_classes=5)


def tiny_swin(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **{**SWIN_ARGS, **kwargs}).eval()


def test_the_swin_is_a_declaration_registered_on_the_staged_adapter():
    source = (Path(lgcli.__file__).parent / "arch" / "swin.py").read_text()
    assert [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)] == []
    adapter = ADAPTERS["swin"]
    assert type(adapter) is StagedTimmAdapter
    assert adapter.declaration is SWIN and adapter.stages is SWIN_STAGES
    assert list(ADAPTERS)[:3] == ["swin", "beit", "vit"]  # the registration order is kept


def test_the_stage_layouts_follow_the_declaration():
    """Stage i's blocks under ``layers.{i}.blocks``; the patch embedding on
    the first stage, the globals `TimmStages.last` names on the last, both
    on a single stage."""
    adapter = ADAPTERS["swin"]
    first, middle, last = (adapter.stage_layout(i, 3) for i in range(3))
    assert (first.layers, middle.layers, last.layers) == ("layers.0.blocks", "layers.1.blocks", "layers.2.blocks")
    assert set(first.base_globals) == set(SWIN.layout.base_globals) - SWIN_STAGES.last
    assert middle.base_globals == {} and set(last.base_globals) == SWIN_STAGES.last
    assert set(adapter.stage_layout(0, 1).base_globals) == set(SWIN.layout.base_globals)
    assert first.layer_keys == SWIN.layout.layer_keys and first.fused_keys == SWIN.layout.fused_keys


def test_another_family_name_is_another_family():
    """The same declaration under another name and model class: the adapter
    says what it is from the declaration alone."""
    renamed = StagedTimmAdapter(dataclasses.replace(SWIN, layout=dataclasses.replace(SWIN.layout, family="other"),
                                                    name="timm Other", model_class="timm.models.other.Other"),
                                SWIN_STAGES)
    model = tiny_swin()
    spec, _ = renamed.to_stack(model.state_dict())
    assert spec.family == "other" and [s.depth for s in spec.stages] == [2, 2]
    assert not renamed.owns_model(model) and ADAPTERS["swin"].owns_model(model)
    with pytest.raises(LgError, match=r"^not a timm Other checkpoint: expected patch_embed\.proj, "):
        renamed.to_stack({k: v for k, v in model.state_dict().items() if "mlp.fc1" not in k})


def test_a_live_swin_lg_would_misdescribe_is_refused(tmp_path):
    """A Swin pooled otherwise than timm's registered one: its tensors are
    the same, so the printed load line would build another model; refused,
    nothing written. A SwinTransformerV2 is no timm Swin lg reads."""
    out = tmp_path / "unpooled.safetensors"
    with pytest.raises(LgError, match="average-pooled"):
        lgcli.save_model(tiny_swin(global_pool=""), out)
    assert not out.exists()
    v2 = timm.create_model("swinv2_tiny_window8_256", pretrained=False, **{**SWIN_ARGS, "depths": (1, 1)})
    with pytest.raises(LgError, match="SwinTransformerV2 is not a model of a family lg knows"):
        adapter_of_model(v2)


def test_a_live_swin_is_described_by_what_it_was_built_with():
    model = tiny_swin(window_size=7, img_size=16)  # timm clamps the window to the 8 x 8 patches of stage 0
    config = ADAPTERS["swin"].spec_of_model(model)
    assert config == {"embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "window_size": 7, "img_size": 16}
    spec, _ = lgcli.spec_of_model(model)
    assert spec.extras["img_size"] == 16 and spec.extras["img_size_assumed"] is False


def test_a_swin_is_checked_against_its_counted_shapes_without_timm(tmp_path):
    """The written state is checked against the shapes the family counts
    (`model_shapes`, key for key timm's model's), so shrinking a Swin file
    never imports timm; a tensor of another shape is refused."""
    import subprocess
    import sys

    from safetensors.torch import save_file

    source = tmp_path / "swin.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_swin().state_dict().items()}, str(source))
    loaded = lgcli.load(str(source))
    adapter = ADAPTERS["swin"]
    with torch.device("meta"):
        built = adapter.create_model(loaded.spec)
    assert adapter.model_shapes(loaded.spec).state() == {k: tuple(v.shape) for k, v in built.state_dict().items()}
    wrong = dict(adapter.model_shapes(loaded.spec).state())
    wrong["head.fc.weight"] = (4, wrong["head.fc.weight"][1])
    with pytest.raises(LgError):
        adapter.check_loadable(loaded.spec, wrong)
    out = tmp_path / "small.safetensors"
    script = ("import sys, lgcli.cli\n"
              "try:\n    lgcli.cli.main(sys.argv[1:])\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
              "assert 'timm' not in sys.modules, 'a Swin shrink imported timm'\n")
    done = subprocess.run([sys.executable, "-c", script, "shrink", str(source), "--width", "8", "--method", "select",
                           "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    timm.create_model("swin_tiny_patch4_window7_224", **{**SWIN_ARGS, "embed_dim": 8, "num_heads": (1, 2)}).load_state_dict(
        __import__("safetensors.torch", fromlist=["load_file"]).load_file(str(out)), strict=True)
