"""Hugging Face families are instances, not subclasses (issue 29): each
family is its declaration (`hf_layout.HfLayout`) given to one of three
adapter classes, each with a job of its own (text, images, images in
stages); what a declaration cannot say is a short list of plain-function
hooks, documented in one place; the adapter protocol lists what code outside
`lgcli/arch/` calls and nothing else. A family lg does not ship (OPT,
tests/hf_opt_family.py) is one 40-line file, and is read, written bit for
bit, resized and loaded strictly by transformers."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
import transformers

from lgcli.arch import ADAPTERS, register, unregister
from lgcli.arch.base import FamilyAdapter
from lgcli.arch.hf import HfAdapter
from lgcli.arch.hf_image import HfImageAdapter
from lgcli.arch.hf_layout import HfLayout
from lgcli.arch.hf_swin import HfSwinAdapter
from lgcli.arch.staged import StagedAdapter
from lgcli.methods import get_method, resolve_options
from lgcli.methods.common import MethodContext

ROOT = Path(__file__).resolve().parents[1]
ARCH = ROOT / "lgcli" / "arch"
HF_FAMILIES = {"gpt2", "llama", "bert", "hf-vit", "hf-deit", "hf-dinov2", "hf-dinov2-registers", "hf-clip", "hf-swin"}
# The modules of the HF families that are a declaration and an instance (hf_swin adds its stage reader).
DECLARATION_MODULES = ("gpt2", "llama", "bert", "hf_vit", "hf_dinov2", "hf_clip")
# `HfAdapter`'s own members: 55 when families subclassed it and overrode its private hooks.
MAX_HF_ADAPTER_MEMBERS = 50


def classes_under(base: type) -> set[type]:
    """`base` and every class of lgcli deriving from it."""
    found, todo = {base}, [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("lgcli.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_hf_families_are_instances_of_three_classes_each_with_its_job():
    """HfAdapter reads text families, HfImageAdapter image families,
    HfSwinAdapter the one image family of stages; no family is a subclass."""
    assert classes_under(HfAdapter) == {HfAdapter, HfImageAdapter, HfSwinAdapter}
    hf = {family: type(adapter) for family, adapter in ADAPTERS.items() if isinstance(adapter, HfAdapter)}
    assert set(hf) == HF_FAMILIES
    assert {family for family, cls in hf.items() if cls is HfSwinAdapter} == {"hf-swin"}
    assert {hf[family] for family in ("gpt2", "llama", "bert")} == {HfAdapter}


def test_the_hf_swin_composes_its_stage_reader():
    """Not a class of both lines (`StagedAdapter` and the image adapter): its stages are a member's."""
    assert not any(issubclass(cls, StagedAdapter) for cls in classes_under(HfAdapter))
    adapter = ADAPTERS["hf-swin"]
    assert isinstance(adapter.stages, StagedAdapter) and adapter.stages.adapter is adapter


@pytest.mark.parametrize("module", DECLARATION_MODULES)
def test_an_hf_family_module_defines_no_class(module):
    tree = ast.parse((ARCH / f"{module}.py").read_text())
    assert [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)] == []


def hooks() -> list[str]:
    """The declaration's function fields, in order."""
    return [f.name for f in dataclasses.fields(HfLayout) if str(f.type).startswith("Callable")]


def documented(text: str) -> list[str]:
    """The hooks a text lists, as bullets ``- `name(...)```."""
    return re.findall(r"^\s*- `(\w+)\(", text, re.MULTILINE)


def test_the_hooks_are_the_declarations_function_fields_documented_in_one_place():
    names = hooks()
    assert 0 < len(names) <= 8
    assert documented(HfLayout.__doc__) == names
    page = (ROOT / "docs" / "checkpoints.md").read_text()
    section = re.split(r"\n#{1,3} ", page.split("### Declaring a Hugging Face family", 1)[1], maxsplit=1)[0]
    assert documented(section) == names
    # Each is given by some family: none is kept for nobody.
    given = {name for adapter in ADAPTERS.values() if isinstance(adapter, HfAdapter)
             for name in names if getattr(adapter.layout, name) is not None}
    assert given == set(names)
    assert documented("x\n    - `one(a) -> b`: y\n- `two()`\n  not - `three(`") == ["one", "two"]


def test_the_hf_adapter_has_fewer_members():
    members = [name for name in vars(HfAdapter) if not (name.startswith("__") and name.endswith("__"))]
    assert len(members) <= MAX_HF_ADAPTER_MEMBERS, members


def protocol_members() -> set[str]:
    return {name for name in vars(FamilyAdapter) if not name.startswith("_")} | set(FamilyAdapter.__annotations__)


def sources_outside_arch() -> dict[str, str]:
    package = ROOT / "lgcli"
    return {str(path.relative_to(package)): path.read_text() for path in sorted(package.rglob("*.py"))
            if "arch" not in path.relative_to(package).parts}


# A member asked of an adapter: `adapter.x`, `get_adapter(...).x`, `adapter_of_model(...).x`.
ASKED = re.compile(r"(?:\b\w*adapter|get_adapter\((?:[^()]|\([^()]*\))*\)|adapter_of_model\([^()]*\))\.(\w+)")
ASKED_BY_NAME = re.compile(r"getattr\(\s*(?:\w*adapter\w*|get_adapter\([^()]*\))\s*,\s*[\"'](\w+)")


def test_the_protocol_lists_what_code_outside_arch_calls_and_nothing_else():
    members = protocol_members()
    outside = "\n".join(sources_outside_arch().values())
    registry = (ARCH / "__init__.py").read_text()
    # Every member is called outside arch (or by the registry, which asks every family).
    assert sorted(name for name in members if not re.search(rf"\.{name}\b", outside + registry)) == []
    # What is asked of an adapter outside arch is a member, and none is found by name.
    asked = {match.group(1) for match in ASKED.finditer(outside)}
    assert asked and sorted(asked - members) == []
    assert sorted({match.group(1) for match in ASKED_BY_NAME.finditer(outside)}) == []
    assert {"written_companions", "stated_preprocessing", "stage_layer_modules", "reset_head", "task"} <= members
    # The patterns find what they look for.
    sample = 'get_adapter(spec.family).task(spec); adapter_of_model(m).reset_head(m, 3); getattr(adapter, "x", 0)'
    assert {m.group(1) for m in ASKED.finditer(sample)} == {"task", "reset_head"}
    assert [m.group(1) for m in ASKED_BY_NAME.finditer(sample)] == ["x"]


def test_a_family_that_states_nothing_answers_the_defaults():
    """`written_companions`, `stated_preprocessing`, `stage_layer_modules`
    and `bot_wavelets` are asked of every family directly (no `getattr`):
    a family that leaves them out answers what leaving them out means."""
    from lgcli.arch.declared import DeclaredAdapter, Layout
    from lgcli.methods.wavelets import resolve_wavelet
    from lgcli.stack import ArchSpec

    bare = DeclaredAdapter()
    bare.layout = Layout(family="bare", layers="blocks", layer_keys={"q.weight": "q"}, base_globals={})
    spec = ArchSpec("bare", 1, 8, 1, 8, 16)
    assert bare.written_companions(spec) == {}
    assert bare.stated_preprocessing(spec, {}, (3, 32, 32)) is None
    assert bare.stage_layer_modules(spec, torch.nn.Identity()) == []
    register(bare)
    try:
        assert resolve_wavelet("auto", family="bare", direction="grow") == "haar"
        assert resolve_wavelet("auto", family="gpt2", direction="shrink") == "coif3"  # GPT-2's declaration
        assert resolve_wavelet("auto", family="bert", direction="grow") == "bior6.8"
    finally:
        unregister("bare")


# ---------------------------------------------------------------- a new family: OPT, in one file
OPT_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64, vocab_size=50,
                  max_position_embeddings=16, word_embed_proj_dim=32)


@pytest.fixture
def opt():
    from hf_opt_family import OPT_ADAPTER

    register(OPT_ADAPTER)
    yield OPT_ADAPTER
    unregister("opt")


def opt_model() -> transformers.OPTForCausalLM:
    torch.manual_seed(0)
    config = transformers.OPTConfig(**OPT_CONFIG, architectures=["OPTForCausalLM"])
    return transformers.OPTForCausalLM(config).eval()


def test_the_new_family_is_one_file_of_at_most_40_lines():
    assert len((ROOT / "tests" / "hf_opt_family.py").read_text().splitlines()) <= 40


def test_the_new_family_round_trips_bit_for_bit(opt):
    model = opt_model()
    saved = opt.saved_state(model)
    spec, stack = opt.to_stack(saved, config=model.config.to_dict())
    assert (spec.depth, spec.width, spec.heads, spec.mlp_dim) == (2, 32, 2, 64)
    assert spec.tied_head_input == ("norm_weight", "norm_bias")  # the LM head is the token embedding
    written = opt.from_stack(spec, stack)
    assert sorted(written) == sorted(set(saved) - {"lm_head.weight"})  # save_pretrained leaves the tied copy out
    for key, tensor in written.items():
        assert torch.equal(tensor.view(torch.int32), saved[key].view(torch.int32)), key


@pytest.mark.parametrize("method, direction, sizes", [
    ("select", "shrink", dict(depth=1, width=16, heads=1, head_dim=16, mlp_dim=32)),
    ("bot", "shrink", dict(depth=1, width=16, heads=1, head_dim=16, mlp_dim=32)),
    ("clone", "grow", dict(width=64, heads=4, head_dim=16, mlp_dim=128)),
])
def test_the_new_family_resizes_and_loads_strictly(opt, method, direction, sizes, tmp_path):
    from lgcli.saving import save

    model = opt_model()
    spec, stack = opt.to_stack(opt.saved_state(model), config=model.config.to_dict())
    target = spec.with_sizes(**sizes)
    chosen = get_method(method)
    result = chosen.run(stack, spec, target, resolve_options(chosen, {}), MethodContext(direction=direction, seed=0))
    save(tmp_path / "out", target, result.stack, method=method)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["hidden_size"] == config["word_embed_proj_dim"] == target.width  # the hook's field
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    ids = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = loaded.eval()(ids).logits
        assert logits.shape == (2, 10, 50) and torch.isfinite(logits).all()
        if method == "clone":  # function-preserving: the source's logits
            torch.testing.assert_close(logits, model(ids).logits, atol=1e-5, rtol=1e-5)
