"""A timm model built from weights (`lgcli.loading.build_model`, what
lg eval, distill, condense and bench build) draws no random number for the
parameters the strict load replaces (`lgcli.arch.timm.no_parameter_init`),
and equals one randomly initialised and then loaded, tensor for tensor: its
parameters and every buffer, persistent or not, that timm computes (Swin's
relative position indices and attention masks, BEiT's position indices and
zero key bias). The buffers a model is built for alone (`model_buffers`,
for a learngene's generated model) are timm's too."""

from __future__ import annotations

import pytest
import timm
import torch
from torch.overrides import TorchFunctionMode

from lgcli.arch import get_adapter
from lgcli.arch.timm import no_parameter_init
from lgcli.loading import build_model, load
from lgcli.saving import save_model

from conftest import VIT_VARIANTS, make_vit

# Tiny models (timm name, arguments) of the timm families lg reads besides
# ViT: Swins of two stages and of four (the last smaller than the window:
# timm clamps it and does not shift), BEiTs with and without the query and
# value biases (the key's is a zero buffer), layer scale and a position table.
SWIN = dict(embed_dim=16, num_heads=(2, 4), img_size=32, patch_size=2, window_size=4, num_classes=5)
BEIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5)
OTHERS = {
    "swin two stages": ("swin_tiny_patch4_window7_224", dict(SWIN, depths=(2, 2))),
    "swin four stages": ("swin_tiny_patch4_window7_224", dict(SWIN, depths=(1, 1, 2, 1), num_heads=(2, 4, 8, 16))),
    "beit": ("beit_base_patch16_224", BEIT),
    "beit plain": ("beit_base_patch16_224", dict(BEIT, qkv_bias=False, init_values=None, use_abs_pos_emb=True)),
}
CASES = sorted([f"vit {variant}" for variant in VIT_VARIANTS] + list(OTHERS))


class RandomFills(TorchFunctionMode):
    """Records every in-place random fill of a tensor that is not on the
    meta device (what torch's and timm's initialisers draw with)."""

    FILLS = {"normal_", "uniform_", "bernoulli_", "exponential_", "random_", "cauchy_", "log_normal_", "geometric_"}

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.FILLS:
            # A tensor method's self; an nn.init function's `tensor` (torch passes it by name).
            filled = args[0] if args else kwargs.get("tensor")
            if isinstance(filled, torch.Tensor) and not filled.is_meta:
                self.seen.append(func.__name__)
        return func(*args, **kwargs)


def source(case: str) -> torch.nn.Module:
    """The case's tiny timm model, every parameter off its initial value."""
    if case.startswith("vit "):
        return make_vit(case.removeprefix("vit "))
    name, arguments = OTHERS[case]
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **arguments)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


def tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))


@pytest.fixture(scope="module", params=CASES)
def case(request, tmp_path_factory):
    """(the case's source model, what lg read of its safetensors file). The
    file records the model's arguments its tensors may not show (a Swin's
    image size), as a file lg writes does."""
    model = source(request.param)
    path = tmp_path_factory.mktemp("weights") / "model.safetensors"
    save_model(model, path)
    return model, load(path)


def test_built_from_weights_draws_nothing_and_equals_the_plain_build(case):
    model, loaded = case
    adapter = get_adapter(loaded.spec.family)
    with RandomFills() as plain_fills:  # the plain way: timm's random initialisation, then the strict load
        reference = adapter.create_model(loaded.spec)
        reference.load_state_dict(adapter.from_stack(loaded.spec, loaded.stack), strict=True)
    assert plain_fills.seen  # the recorder sees timm's initialisation
    with RandomFills() as fills:
        built = build_model(loaded.spec, loaded.stack)
    assert fills.seen == []
    assert torch._C._len_torch_function_stack() == 0  # nothing left skipping writes after the build
    assert type(built) is type(reference)
    expected, found = tensors(reference.float()), tensors(built)
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(found[name], tensor), name
        assert found[name].dtype == tensor.dtype and found[name].requires_grad == tensor.requires_grad, name
    # ... and the source's, of which the file holds every saved tensor.
    for name, tensor in tensors(model).items():
        assert torch.equal(found[name], tensor), name


def test_computed_buffers_are_timm_s_without_a_random_draw(case):
    """`model_buffers` (what a learngene's generated model runs with) builds
    a model for its unsaved buffers alone: they are those a plainly built
    model computes, and none of its parameters is filled."""
    model, loaded = case
    saved = set(model.state_dict())
    unsaved = {name: buffer for name, buffer in model.named_buffers() if name not in saved}
    with RandomFills() as fills:
        buffers = get_adapter(loaded.spec.family).model_buffers(loaded.spec)
    assert fills.seen == []
    assert buffers.keys() == unsaved.keys()
    for name, buffer in unsaved.items():
        assert torch.equal(buffers[name], buffer), name


def test_only_writes_to_parameters_are_skipped():
    """A buffer a module fills at random is filled still (the load does not
    replace it), and so is a parameter written through a view of it; a
    parameter's own initialisers are skipped. Shape changes are made."""

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("noise", torch.empty(4).normal_(), persistent=False)
            self.weight = torch.nn.Parameter(torch.zeros(3))
            torch.nn.init.uniform_(self.weight)
            self.bias = torch.nn.Parameter(torch.zeros(3))
            self.bias.data.fill_(2.0)
            self.scale = torch.nn.Parameter(torch.ones(3, 1))
            with torch.no_grad():
                self.scale.mul_(5.0).squeeze_(1)

    torch.manual_seed(0)
    plain = Module()
    torch.manual_seed(0)
    with RandomFills() as fills, no_parameter_init():
        built = Module()
    assert fills.seen == ["normal_"]
    assert torch.equal(built.noise, plain.noise)
    assert torch.equal(built.weight, torch.zeros(3)) and not torch.equal(plain.weight, torch.zeros(3))
    assert torch.equal(built.bias, plain.bias)
    assert built.scale.shape == (3,) and torch.equal(built.scale, torch.ones(3))
