"""Adding a family is one declaration and its registration: a made-up
transformer, declared in a few lines here, is read into the canonical Stack
and written back bit for bit, and resized by a training-free method, by the
same reader and writer as every real family (`lgcli.arch.declared`)."""

from __future__ import annotations

import pytest
import torch

from lgcli.arch import ADAPTERS, detect_family, get_adapter, register, unregister
from lgcli.arch.declared import DeclaredAdapter, Layout, memory_reader
from lgcli.errors import LgError
from lgcli.methods import get_method, resolve_options
from lgcli.methods.common import MethodContext, uniform_indices
from lgcli.stack import EMBED, VOCAB

# A toy transformer's keys: fused q|k|v rows, its MLP's down projection
# stored (in, out) as GPT-2's Conv1D stores it, a token table and a final norm.
TOY = Layout(
    family="toy",
    layers="trunk",
    layer_keys={"pre.g": "norm1_weight", "mix.out.weight": "o", "post.g": "norm2_weight",
                "ff.up.weight": "fc1", "ff.up.bias": "fc1_bias", "ff.down.weight": "fc2"},
    fused_keys={"mix.qkv.weight": ("q", "k", "v")},
    transposed=frozenset({"ff.down.weight"}),
    base_globals={"tok.table": ("token_embed", (VOCAB, EMBED)), "final.g": ("norm_weight", (EMBED,))},
    size_fields={"heads": "n_heads"},
)


class ToyAdapter(DeclaredAdapter):
    layout = TOY


@pytest.fixture
def toy():
    register(ToyAdapter())
    yield get_adapter("toy")
    unregister("toy")


def toy_state(depth: int = 3, width: int = 32, mlp: int = 48, vocab: int = 20) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    state = {"tok.table": draw(vocab, width), "final.g": draw(width)}
    for i in range(depth):
        state |= {f"trunk.{i}.pre.g": draw(width), f"trunk.{i}.mix.qkv.weight": draw(3 * width, width),
                  f"trunk.{i}.mix.out.weight": draw(width, width), f"trunk.{i}.post.g": draw(width),
                  f"trunk.{i}.ff.up.weight": draw(mlp, width), f"trunk.{i}.ff.up.bias": draw(mlp),
                  f"trunk.{i}.ff.down.weight": draw(mlp, width)}
    return state


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32)  # float32: equal bits, not merely equal values (-0.0 vs 0.0)


def test_registration_is_undone(toy):
    assert ADAPTERS["toy"] is toy
    unregister("toy")
    assert "toy" not in ADAPTERS
    register(toy)  # for the fixture to undo
    with pytest.raises(ValueError, match="registered already"):
        register(ToyAdapter())


def test_the_declaration_says_where_each_role_is(toy):
    state = toy_state()
    assert detect_family(state) == "toy"
    spec, stack = toy.to_stack(state, config={"n_heads": 4})
    assert (spec.family, spec.depth, spec.width, spec.heads, spec.head_dim, spec.mlp_dim) == ("toy", 3, 32, 4, 8, 48)
    assert not spec.heads_assumed
    for i in range(3):
        qkv = state[f"trunk.{i}.mix.qkv.weight"]
        assert torch.equal(stack.layers["q"].data[i], qkv[:32])
        assert torch.equal(stack.layers["k"].data[i], qkv[32:64])
        assert torch.equal(stack.layers["v"].data[i], qkv[64:])
        assert torch.equal(stack.layers["fc2"].data[i], state[f"trunk.{i}.ff.down.weight"].T)  # (out, in)
    assert stack.layers["fc2"].axes == ("layer", "embed", "mlp")
    assert torch.equal(stack.globals["token_embed"].data, state["tok.table"])


@pytest.mark.parametrize("lazy", [False, True], ids=["in-memory", "lazy"])
def test_a_declared_family_round_trips_bit_for_bit(toy, lazy):
    state = toy_state()
    spec, stack = toy.to_stack(state, config={"n_heads": 4}, reader=memory_reader(state) if lazy else None)
    assert stack.lazy == lazy
    written = toy.from_stack(spec, stack)
    assert sorted(written) == sorted(state)
    for key, tensor in state.items():
        assert written[key].dtype == tensor.dtype and written[key].shape == tensor.shape, key
        assert torch.equal(bits(written[key]), bits(tensor)), key


def test_keys_the_declaration_lacks_are_refused(toy):
    state = toy_state()
    state["trunk.1.mix.gate.weight"] = torch.zeros(32, 32)
    with pytest.raises(LgError, match="not a toy checkpoint lg reads: unexpected keys trunk.1.mix.gate.weight"):
        toy.to_stack(state)


def test_select_resizes_a_declared_family(toy):
    state = toy_state(depth=3, width=32, mlp=48, vocab=20)
    spec, stack = toy.to_stack(state, config={"n_heads": 4})
    target = spec.with_sizes(depth=2, width=16, heads=2, head_dim=8, mlp_dim=24)
    select = get_method("select")
    result = select.run(stack, spec, target, resolve_options(select, {}), MethodContext(direction="shrink", seed=0))
    written = toy.from_stack(target, result.stack)
    expected = {"tok.table": (20, 16), "final.g": (16,)}
    for i in range(2):
        expected |= {f"trunk.{i}.pre.g": (16,), f"trunk.{i}.mix.qkv.weight": (48, 16),
                     f"trunk.{i}.mix.out.weight": (16, 16), f"trunk.{i}.post.g": (16,),
                     f"trunk.{i}.ff.up.weight": (24, 16), f"trunk.{i}.ff.up.bias": (24,),
                     f"trunk.{i}.ff.down.weight": (24, 16)}  # stored (in, out): (mlp, width)
    assert {key: tuple(tensor.shape) for key, tensor in written.items()} == expected
    embed = uniform_indices(32, 16)
    assert torch.equal(written["tok.table"], state["tok.table"][:, embed])  # the vocabulary is never resized
    for i in range(2):
        assert torch.equal(written[f"trunk.{i}.ff.down.weight"], result.stack.layers["fc2"].data[i].T)
