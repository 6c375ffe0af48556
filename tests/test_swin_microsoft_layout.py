"""The original Microsoft Swin layout (its repository's checkpoints: the
patch merging at the end of a stage, `layers.N.downsample` before stage
N + 1, the head `head.*`, the index buffers saved) is read through the
renaming timm's `checkpoint_filter_fn` does: to the same stages and weights
as timm's layout of the same model, with the same logits, and its load line
runs as printed."""

from __future__ import annotations

import re

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file

import lgcli
from lgcli.arch import detect_family, get_adapter
from lgcli.resize import resize_file

# Tiny Swins at the image size lg assumes of a file without metadata (the
# last stage one window: patch x window x 2^(stages - 1)).
TWO_STAGES = dict(embed_dim=16, depths=(2, 2), num_heads=(2, 4), img_size=16, patch_size=2, window_size=4,
                  num_classes=5)
FOUR_STAGES = dict(embed_dim=16, depths=(1, 1, 2, 1), num_heads=(2, 4, 8, 16), img_size=64, patch_size=2,
                   window_size=4, num_classes=3)


def make_swin(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **kwargs)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    return model.eval()


def microsoft(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights as Microsoft's repository saves them, rewritten by
    hand from timm's names: each merging moved to the end of the stage
    before, the head out of head.fc, and the position index buffers kept."""
    state = {}
    for key, tensor in model.state_dict().items():
        key = re.sub(r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m.group(1)) - 1}.downsample.", key)
        state[key.replace("head.fc.", "head.")] = tensor.contiguous()
    for name, buffer in model.named_buffers():
        if name.endswith("relative_position_index"):
            state[name] = buffer.contiguous()
    return state


def images(model: torch.nn.Module) -> torch.Tensor:
    return torch.randn(2, 3, *model.patch_embed.img_size, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module", params=["two-stages", "four-stages"])
def files(request, tmp_path_factory):
    model = make_swin(**(TWO_STAGES if request.param == "two-stages" else FOUR_STAGES))
    folder = tmp_path_factory.mktemp("microsoft")
    timm_file, microsoft_file = folder / "timm.safetensors", folder / "microsoft.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(timm_file))
    state = microsoft(model)
    assert "layers.0.downsample.reduction.weight" in state and "head.weight" in state
    save_file(state, str(microsoft_file))
    return model, timm_file, microsoft_file


def test_read_to_the_same_stages_and_weights_as_timm_layout(files):
    model, timm_file, microsoft_file = files
    state = load_file(str(microsoft_file))
    assert detect_family(state) == "swin"
    adapter = get_adapter("swin")
    spec, stack = adapter.to_stack(state)
    timm_spec, timm_stack = adapter.to_stack(load_file(str(timm_file)))
    assert spec.stages == timm_spec.stages
    for stage, timm_stage in zip(stack.stages, timm_stack.stages):
        assert set(stage.layers) == set(timm_stage.layers) and set(stage.globals) == set(timm_stage.globals)
        for role, named in [*stage.layers.items(), *stage.globals.items()]:
            expected = timm_stage.layers[role] if role in timm_stage.layers else timm_stage.globals[role]
            assert torch.equal(named.data, expected.data), role
    # Written back under timm's names, exactly timm's state dict.
    written = adapter.from_stack(spec, stack)
    assert sorted(written) == sorted(model.state_dict())
    assert all(torch.equal(written[k], v) for k, v in model.state_dict().items())


def test_the_same_logits_and_a_load_line_that_runs(files):
    model, _, microsoft_file = files
    x = images(model)
    loaded, _ = lgcli.load_model(microsoft_file)  # lazily read from the file
    report = lgcli.inspect_checkpoint(microsoft_file)
    scope: dict = {}
    exec(report["load_imports"] + "\nmodel = " + report["load_call"], scope)  # timm's own renaming, strictly
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), model(x))
        assert torch.equal(scope["model"].eval()(x), model(x))


def test_resized_as_timm_layout_is(files, tmp_path):
    model, timm_file, microsoft_file = files
    depths = tuple(1 for _ in model.layers)
    for name, source in (("timm", timm_file), ("microsoft", microsoft_file)):
        resize_file(source, tmp_path / f"{name}.safetensors", direction="shrink", method="select", depth=depths,
                    width=8)
    small = load_file(str(tmp_path / "timm.safetensors"))
    from_microsoft = load_file(str(tmp_path / "microsoft.safetensors"))
    assert sorted(small) == sorted(from_microsoft)
    assert all(torch.equal(small[k], from_microsoft[k]) for k in small)
