"""The sandwich rule and per-width norms of width-trained learngenes
(lgcli/learngenes/widths.py): `lg condense --widths 32,64 --width-rule
sandwich` trains every width it names in one step, its loss and gradient
the sum over them (checked against each width's own pass); `--width-norms`
gives each narrower width its own norm gains and biases, which a descendant
at that width holds in place of the widest's slice (checked entry by
entry); strict loads in timm and transformers, the same bytes for the same
seed, and files written before either still expand."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import lgcli
from lgcli.learngenes import GeneratedModel
from lgcli.learngenes.tleg import KIND as TLEG
from lgcli.learngenes.widths import passes_per_step, summed_over_widths, widths_of_step
from lgcli.losses import distillation_loss
from lgcli.stack import ATTN, EMBED, HEADS, KV, MLP

from conftest import sample_input
from test_width_learngenes import _condense as condense_json
from text_models import Sources, load_strict, outputs, token_ids

# head dim 16: widths 32 (2 heads) and 64 (4 heads)
TEACHER = dict(depth=2, embed_dim=64, num_heads=4, patch_size=7, img_size=28, in_chans=1, num_classes=10)
FAST = ["--batch-size", "16", "--subset", "128", "--test-subset", "50"]
NARROW = {EMBED: 32, ATTN: 32, KV: 32, MLP: 128, HEADS: 2}  # width 32 of the width-64 teacher
NORM_ROLES = {"norm1_weight", "norm1_bias", "norm2_weight", "norm2_bias"}  # per layer, over the residual stream


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny timm ViT with random, non-trivial norms (gains away from 1), so
    a wrong norm changes what is built."""
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **TEACHER)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.2 * torch.randn_like(parameter))
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


# The same condense as the width tests' (its options and --json report).
_condense = condense_json


@pytest.fixture(scope="module")
def sandwich_gene(tmp_path_factory, teacher):
    out = tmp_path_factory.mktemp("gene") / "sandwich.lg.safetensors"
    report = _condense(teacher, out, "--widths", "32,64", "--width-rule", "sandwich", "--width-norms")
    return out, report


def _first(tensor: torch.Tensor, axes: tuple[str, ...], sizes: dict[str, int]) -> torch.Tensor:
    """The first sizes[axis] entries along every width axis, by explicit indices."""
    for dim, axis in enumerate(axes):
        if axis in sizes:
            tensor = tensor.index_select(dim, torch.arange(sizes[axis]))
    return tensor


def _strict_timm(path):
    report = lgcli.inspect_checkpoint(path)
    return eval(report["load_call"].replace("'" + str(path) + "'", repr(str(path))), {"timm": timm})


# ---------------------------------------------------------------- which widths a step trains

def test_each_rule_names_the_widths_of_a_step():
    draws = iter([1, 0, 0])
    assert widths_of_step((32, 48, 64), "sample", lambda n: next(draws)) == (48,)
    assert widths_of_step((32, 48, 64), "widest", lambda n: next(draws)) == (64, 32)
    # The sandwich: the widest, the narrowest, and one drawn from those between.
    assert widths_of_step((32, 48, 64), "sandwich", lambda n: next(draws)) == (64, 32, 48)
    assert widths_of_step((32, 64), "sandwich", lambda n: pytest.fail("nothing to draw")) == (64, 32)
    assert [passes_per_step((32, 64), rule) for rule in ("sample", "widest", "sandwich")] == [1, 2, 2]
    assert [passes_per_step((32, 48, 64), rule) for rule in ("sample", "widest", "sandwich")] == [1, 2, 3]


def test_a_sandwich_step_has_the_loss_and_gradient_of_the_sum_over_its_widths(teacher):
    """One step under --width-rule sandwich: the loss is the widest's plus the
    narrowest's, each at the depth drawn for it, and so is the gradient of
    every learngene tensor, computed here one width at a time."""
    loaded = lgcli.load(teacher)
    spec, stack = loaded.spec, loaded.stack.materialized()
    trainable, _ = TLEG.initial(spec, stack, {"widths": "32,64"}, torch.Generator().manual_seed(0), ancestry=stack)
    generator = torch.Generator().manual_seed(4)
    images = torch.randn(4, 1, 28, 28, generator=generator)
    labels = torch.randint(10, (4,), generator=generator)
    teacher_logits = torch.randn(4, 10, generator=generator)
    loss_fn = distillation_loss(0.5, 2.0)

    sandwich = GeneratedModel(spec, TLEG.build, trainable, depths=(2, 3), widths=(32, 64),
                              width_rule="sandwich").train()
    assert sandwich.passes_per_step == 2
    torch.manual_seed(11)
    logits = sandwich(images)
    assert logits.shape == (8, 10)  # the two widths' logits, widest first
    loss = summed_over_widths(loss_fn, 2)(logits, labels, teacher_logits)
    loss.backward()

    # By hand: the widest then the narrowest, each at the depth torch's RNG gives next.
    torch.manual_seed(11)
    depths = [(2, 3)[int(torch.randint(2, ()))] for _ in range(2)]
    total, grads = 0.0, {}
    for width, depth in zip((64, 32), depths):
        one = GeneratedModel(spec, TLEG.build, trainable, depths=(depth,), widths=(width,)).train()
        part = loss_fn(one(images), labels, teacher_logits)
        part.backward()
        total += part.item()
        for name, parameter in one.learngene.items():
            grads.setdefault(name, []).append(parameter.grad.clone())
    assert loss.item() == pytest.approx(total, rel=1e-6)
    for name, parameter in sandwich.learngene.items():
        assert torch.allclose(parameter.grad, grads[name][0] + grads[name][1], atol=1e-6), name
    # The narrow pass counts: the widest's gradient alone is not the step's.
    assert not torch.allclose(sandwich.learngene["A:fc1"].grad, grads["A:fc1"][0])


# ---------------------------------------------------------------- per-width norms

def test_a_descendant_with_its_own_norms_is_the_slice_plus_its_norms_by_hand(sandwich_gene, tmp_path, lg):
    path, report = sandwich_gene
    assert report["passes_per_step"] == 2
    learngene = lgcli.load_learngene(path)
    assert learngene.sizes["width_rule"] == "sandwich" and learngene.sizes["width_norms"] == [32]
    own = {name for name in learngene.tensors if name.startswith("width")}
    assert own == {f"width32.{ab}.{role}" for ab in "AB" for role in NORM_ROLES} | {
        "width32.global.norm_weight", "width32.global.norm_bias"}
    # Trained apart from the widest's: the narrow width's gains are no longer the slice of the widest's.
    assert not torch.allclose(learngene.tensors["width32.B.norm1_weight"], learngene.tensors["B.norm1_weight"][:32])

    out = tmp_path / "d32.safetensors"
    assert lg("grow", str(path), "--depth", "3", "--width", "32", "-o", str(out)).code == 0
    built = lgcli.load(out)
    for role, named in built.stack.layers.items():
        prefix = "width32." if role in NORM_ROLES else ""
        a, b = learngene.tensors[f"{prefix}A.{role}"], learngene.tensors[f"{prefix}B.{role}"]
        for layer in range(3):  # TLEG Eq. 1: B + ((l - 1) / L) A, l = layer + 1
            expected = _first(b, named.axes[1:], NARROW) + (layer / 3) * _first(a, named.axes[1:], NARROW)
            assert torch.allclose(named.data[layer], expected, atol=1e-6), (role, layer)
    for role, named in built.stack.globals.items():
        prefix = "width32." if role in ("norm_weight", "norm_bias") else ""
        assert torch.equal(named.data, _first(learngene.tensors[f"{prefix}global.{role}"], named.axes, NARROW)), role
    model = _strict_timm(out)
    assert model.embed_dim == 32 and torch.isfinite(model(sample_input(model))).all()

    # The widest keeps its own (the learngene's) norms.
    wide = tmp_path / "d64.safetensors"
    assert lg("grow", str(path), "--depth", "2", "--width", "64", "-o", str(wide)).code == 0
    assert torch.equal(lgcli.load(wide).stack.globals["norm_weight"].data, learngene.tensors["global.norm_weight"])
    inspected = json.loads(lg("inspect", str(path), "--json").stdout)
    assert inspected["trained_at"] == {"widths": [32, 64], "depths": "2-3", "width_rule": "sandwich",
                                       "width_norms": [32]}
    assert "widths per step: sandwich; own norms at 32" in inspected["becomes"]


def test_the_same_seed_writes_the_same_bytes(sandwich_gene, teacher, tmp_path):
    path, _ = sandwich_gene
    again = tmp_path / "again.lg.safetensors"
    _condense(teacher, again, "--widths", "32,64", "--width-rule", "sandwich", "--width-norms")
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(again.read_bytes()).digest()


def _rewritten(path, out, change_sizes, drop=lambda name: False):
    """The learngene at `path` with its recorded sizes changed and some tensors left out."""
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        tensors = {name: f.get_tensor(name) for name in f.keys() if not drop(name)}
    record = json.loads(metadata["lg.learngene"])
    change_sizes(record["sizes"])
    save_file(tensors, str(out), metadata={**metadata, "lg.learngene": json.dumps(record, sort_keys=True)})
    return out


def test_a_learngene_from_before_the_width_rule_still_expands(teacher, tmp_path, lg):
    """A file written before --width-rule and --width-norms: sizes without
    them, no per-width tensors. It loads, builds its widths as nested slices
    and says it drew one width a step."""
    gene = tmp_path / "sampled.lg.safetensors"
    _condense(teacher, gene, "--widths", "32,64")
    old = _rewritten(gene, tmp_path / "old.lg.safetensors", lambda sizes: sizes.pop("width_rule"))
    out = tmp_path / "d32.safetensors"
    assert lg("grow", str(old), "--depth", "2", "--width", "32", "-o", str(out)).code == 0
    learngene = lgcli.load_learngene(old)
    built = lgcli.load(out).stack
    assert torch.equal(built.globals["norm_weight"].data, learngene.tensors["global.norm_weight"][:32])
    assert _strict_timm(out).embed_dim == 32
    inspected = json.loads(lg("inspect", str(old), "--json").stdout)
    assert inspected["trained_at"]["width_rule"] == "sample" and inspected["trained_at"]["width_norms"] == []


def test_per_width_norms_the_record_does_not_name_are_refused(sandwich_gene, tmp_path, lg):
    path, _ = sandwich_gene
    bad = _rewritten(path, tmp_path / "bad.lg.safetensors", lambda sizes: sizes.pop("width_norms"))
    result = lg("grow", str(bad), "--depth", "2", "--width", "32", "-o", str(tmp_path / "no.safetensors"))
    assert result.code == 1 and "unexpected tensor" in result.stderr and "width32." in result.stderr
    lacking = _rewritten(path, tmp_path / "lacking.lg.safetensors", lambda sizes: None,
                         drop=lambda name: name == "width32.B.norm2_bias")
    result = lg("grow", str(lacking), "--depth", "2", "--width", "32", "-o", str(tmp_path / "no.safetensors"))
    assert result.code == 1 and "lacks tensor width32.B.norm2_bias" in result.stderr


@pytest.mark.parametrize("flags, message", [
    (["--width-rule", "sandwich"], "--width-rule sandwich chooses among the widths of --widths"),
    (["--width-norms"], "--width-norms keeps a norm per trained width"),
    (["--widths", "64", "--width-norms"], "--width-norms keeps a norm per trained width"),
    (["--widths", "32,64", "--width-rule", "both"], "--width-rule must be one of sample, widest, sandwich"),
])
def test_width_rule_and_norms_without_widths_are_refused(teacher, tmp_path, lg, flags, message):
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "1",
                *FAST, *flags, "-o", str(out))
    assert result.code == 2 and message in result.stderr and not out.exists(), result.stderr
    assert "Traceback" not in result.stderr and "\n" not in result.stderr.strip()


# ---------------------------------------------------------------- transformers

def test_a_language_model_learngene_with_sandwich_and_own_norms_loads_strictly(tmp_path_factory, tmp_path, lg):
    """GPT-2 (LayerNorm gains and biases): width 16 of a width-32 learngene
    condensed with the sandwich rule and per-width norms is a folder that
    from_pretrained loads with nothing missing, unexpected or mismatched,
    its final norm the width's own."""
    folder, _ = Sources(tmp_path_factory)("gpt2-lm", n_layer=2, n_embd=32, n_head=4)
    words = tmp_path / "words.txt"
    rng = random.Random(0)
    words.write_text("\n".join(" ".join(f"w{rng.randrange(5, 96)}" for _ in range(10)) for _ in range(300)) + "\n")
    gene = tmp_path / "gene.lg.safetensors"
    condensed = lg("condense", folder, "--method", "tleg", "--data", words, "--steps", "2", "--batch-size", "4",
                   "--seq-len", "12", "--test-subset", "4", "--depths", "2-3", "--widths", "16,32",
                   "--width-rule", "sandwich", "--width-norms", "-o", gene, "--json")
    assert condensed.code == 0, condensed.stderr
    assert json.loads(condensed.stdout)["passes_per_step"] == 2
    learngene = lgcli.load_learngene(gene)
    out = tmp_path / "grown"
    assert lg("grow", gene, "--depth", "3", "--width", "16", "-o", out).code == 0
    model = load_strict(out, "gpt2-lm")
    assert model.config.n_embd == 16 and torch.isfinite(outputs(model, token_ids())).all()
    built = lgcli.load(out).stack
    finals = [role for role in built.globals if f"width16.global.{role}" in learngene.tensors]
    assert finals and all(torch.equal(built.globals[role].data, learngene.tensors[f"width16.global.{role}"])
                          for role in finals)


@pytest.mark.parametrize("kind", ["wave", "sws"])
def test_wave_and_sws_take_the_sandwich_rule(kind, teacher, tmp_path, lg):
    """The rule lives in the model every kind trains through: WAVE and SWS
    train both widths a step too, and say so."""
    gene = tmp_path / f"{kind}.lg.safetensors"
    result = lg("condense", str(teacher), "--method", kind, "--data", "fashion-mnist-mini", "--steps", "2", *FAST,
                "--widths", "32,64", "--width-rule", "sandwich", "-o", str(gene), "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["passes_per_step"] == 2
    assert json.loads(lg("inspect", str(gene), "--json").stdout)["trained_at"]["width_rule"] == "sandwich"
    out = tmp_path / "d32.safetensors"
    assert lg("grow", str(gene), "--depth", "2", "--width", "32", "-o", str(out)).code == 0
    assert _strict_timm(out).embed_dim == 32
