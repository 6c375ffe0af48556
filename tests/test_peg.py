"""PEG: mixture weights, every learngene head and FFN checked entry by entry
against the ancestry's, descendants that load strictly at depths and head
counts above and below the learngene's, the unfitted descendant equal to the
sampled mixture, a fitted descendant equal to φ's formula entry by entry, and
φ training that lowers the loss with the learngene frozen."""

from __future__ import annotations

import pytest
import timm
import torch

import lgcli
from lgcli.fitting import fit_on_data
from lgcli.learngenes.peg import KIND as PEG
from lgcli.learngenes.base import Learngene
from lgcli.learngenes.peg import (MIXTURES, depth_interpolation, fresh_phi, mix_heads, mixture_weights, phi_weights,
                                  weighted_sum, width_map)
from lgcli.sizing import target_spec
from lgcli.stack import LAYER_ROLE_AXES, Named, Stack

from conftest import make_vit, sample_input

# Ancestry: 3 layers, 4 heads of 8 (width 32), MLP 128, 10 classes, 28 px grayscale.
ANCESTRY = dict(depth=3, embed_dim=32, num_heads=4, patch_size=7, img_size=28, in_chans=1, num_classes=10)


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    """A tiny ViT trained a few steps, so that its heads and FFNs carry something."""
    from lgcli.data import load_data
    from lgcli.train import TrainConfig, train

    model = make_vit(**ANCESTRY)
    train(model, load_data(subset=512, test_subset=100).train,
          TrainConfig(steps=40, batch_size=32, lr=2e-3, progress=False))
    model.eval()
    path = tmp_path_factory.mktemp("peg") / "ancestry.safetensors"
    lgcli.save_model(model, path)
    return path


@pytest.fixture(scope="module")
def gene(ancestry, tmp_path_factory):
    from conftest import run_lg_inproc

    out = tmp_path_factory.mktemp("gene") / "peg.lg.safetensors"
    result = run_lg_inproc("condense", ancestry, "--method", "peg", "--learngene-heads", "2",
                           "--learngene-layers", "2", "--seed", "5", "-o", out)
    assert result.code == 0, result.stderr
    assert "sampled" in result.stderr and "no training" in result.stderr
    return out


@pytest.mark.parametrize("kind", MIXTURES)
def test_mixture_weights_are_non_negative_rows_summing_to_one(kind):
    weights = mixture_weights(5, 7, kind, torch.Generator().manual_seed(0))
    assert weights.shape == (5, 7) and (weights >= 0).all()
    assert torch.allclose(weights.sum(dim=1), torch.ones(5), atol=1e-6)
    again = mixture_weights(5, 7, kind, torch.Generator().manual_seed(0))
    other = mixture_weights(5, 7, kind, torch.Generator().manual_seed(1))
    assert torch.equal(weights, again) and not torch.equal(weights, other)
    if kind == "gaussian":  # |z| / sum |z| of the seeded standard normal draw
        z = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64).abs()
        assert torch.allclose(weights, (z / z.sum(1, keepdim=True)).float())


def test_learngene_heads_and_ffns_are_the_stated_mixtures_entry_by_entry(ancestry, gene):
    source = lgcli.load(ancestry)
    g = lgcli.load_learngene(gene)
    heads, ffn = g.tensors["mix.heads"], g.tensors["mix.ffn"]  # (L_a, H_b, H_a), (L_b, L_a)
    assert heads.shape == (3, 2, 4) and ffn.shape == (2, 3)
    d = 8
    layers = source.stack.layers
    # Exactly equal: lg adds the terms in this order, one multiply and one add each (peg.weighted_sum).
    for a in range(3):
        for h in range(2):
            rows = slice(h * d, (h + 1) * d)
            for role in ("q", "k", "v", "q_bias"):
                expected = sum(heads[a, h, i] * layers[role].data[a][i * d:(i + 1) * d].float() for i in range(4))
                assert torch.equal(g.tensors[f"msa.{role}"][a][rows], expected), (role, a, h)
            # The output projection's columns follow the heads.
            expected = sum(heads[a, h, i] * layers["o"].data[a][:, i * d:(i + 1) * d].float() for i in range(4))
            assert torch.equal(g.tensors["msa.o"][a][:, rows], expected)
        assert torch.equal(g.tensors["msa.norm1_weight"][a], layers["norm1_weight"].data[a].float())
    for l in range(2):
        for role in ("fc1", "fc1_bias", "fc2", "fc2_bias"):
            expected = sum(ffn[l, k] * layers[role].data[k].float() for k in range(3))
            assert torch.equal(g.tensors[f"ffn.{role}"][l], expected), (role, l)
    assert torch.equal(g.tensors["global.pos_embed"], source.stack.globals["pos_embed"].data.float())
    info = lgcli.inspect_checkpoint(gene)
    assert info["learngene"] == "peg" and info["sizes"]["learngene_heads"] == 2


@pytest.mark.parametrize("sizes", [["--depth", "1", "--heads", "1"], ["--depth", "5", "--heads", "6"],
                                   ["--depth", "3", "--heads", "2"], ["--depth", "2", "--heads", "3",
                                                                      "--mlp-dim", "50"]])
def test_descendants_load_strictly_above_and_below(gene, tmp_path, lg, sizes):
    out = tmp_path / "d.safetensors"
    result = lg("grow", gene, *sizes, "-o", out)
    assert result.code == 0, result.stderr
    assert "fresh seeded draw" in result.stderr
    report = lgcli.inspect_checkpoint(out)
    model = eval(report["load_call"], {"timm": timm}).eval()
    heads = int(sizes[3])
    assert len(model.blocks) == int(sizes[1]) and model.blocks[0].attn.num_heads == heads
    assert model.embed_dim == heads * 8
    with torch.no_grad():
        logits = model(sample_input(model))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()


def test_a_fresh_phi_prefers_the_part_at_the_same_position_and_depth_interpolates():
    """φ₀'s locality prior (the sampled mixture): at the learngene's own count
    each target part weighs its own part most (a neighbour about e^-2 as
    much); depths are linear interpolation between the two nearest learngene
    layers."""
    phi = {**fresh_phi("msa", 4, torch.Generator().manual_seed(0)),
           **fresh_phi("ffn", 3, torch.Generator().manual_seed(0))}
    for name, parts in (("msa", 4), ("ffn", 3)):
        weights = phi_weights(phi, name, parts, parts)
        assert torch.allclose(weights.sum(1), torch.ones(parts)) and (weights >= 0).all()
        assert (weights.argmax(1) == torch.arange(parts)).all()
    eye = torch.eye(3)
    assert torch.equal(depth_interpolation(3, 3, eye), eye)
    assert torch.allclose(depth_interpolation(3, 5, eye)[1], torch.tensor([0.5, 0.5, 0.0]))
    assert torch.allclose(depth_interpolation(3, 1, eye), torch.tensor([[1.0, 0.0, 0.0]]))


def sampled_descendant(g: Learngene, depth: int, heads: int, seed: int) -> dict[str, torch.Tensor]:
    """The sampled (training-free) mixture, computed here in the order lg
    computed it before φ learned: φ₀'s seeded draw of head and FFN weights,
    depth interpolation of the MSA layers, the heads mixed, then the
    learngene's width taken to the target's."""
    generator = torch.Generator().manual_seed(seed)
    heads_b, layers_b = g.sizes["learngene_heads"], g.sizes["learngene_layers"]
    draw = {**fresh_phi("msa", heads_b, generator), **fresh_phi("ffn", layers_b, generator)}
    head_weights = phi_weights(draw, "msa", heads_b, heads)
    ffn_weights = phi_weights(draw, "ffn", layers_b, depth)
    depth_weights = depth_interpolation(g.spec.depth, depth, ffn_weights)
    d = g.spec.head_dim
    out = {}
    for name, data in g.tensors.items():
        part, _, role = name.partition(".")
        if part == "msa":
            layers = weighted_sum(depth_weights, data.float())
            if role in ("q", "k", "v", "q_bias", "k_bias", "v_bias", "o"):
                axis = 1 if role == "o" else 0
                layers = torch.stack([mix_heads(layer, head_weights, d, axis) for layer in layers])
            out[role] = layers
        elif part == "ffn":
            out[role] = weighted_sum(ffn_weights, data.float())
    stack = Stack(layers={role: Named(t, LAYER_ROLE_AXES[role]) for role, t in out.items()}, globals={})
    built = g.spec.with_sizes(depth=depth)
    target = target_spec(built, heads=heads, width=heads * d)
    return {role: named.data for role, named in width_map(stack, built, target).layers.items()}


def test_without_data_the_descendant_is_the_sampled_mixture_bit_for_bit(gene, tmp_path, lg):
    """φ's learned part starts at zero: `lg grow` without --data, and φ before
    any fitting, give exactly the mixture lg sampled before φ could learn
    (tests/test_resize_golden.py pins the same outputs' bytes)."""
    g = lgcli.load_learngene(gene)
    expected = sampled_descendant(g, depth=4, heads=3, seed=2)
    out = tmp_path / "d.safetensors"
    assert lg("grow", gene, "--depth", "4", "--heads", "3", "--seed", "2", "-o", out).code == 0
    written = lgcli.load(out).stack.materialized().layers
    prepared = PEG.prepare(g, target_spec(g.spec, depth=4, width=24, heads=3), seed=2).materialise().layers
    assert set(expected) == set(prepared) and {"q", "o", "fc1", "norm2_weight"} <= set(expected)
    for role, tensor in expected.items():
        assert torch.equal(prepared[role].data, tensor), role
        assert torch.equal(written[role].data.float(), tensor), role
    other = PEG.prepare(g, target_spec(g.spec, depth=4, width=24, heads=3), seed=3).materialise().layers
    assert not torch.equal(other["q"].data, expected["q"])  # the seed draws φ₀
    # A Δ alone (the network's output still zero) is a correction to build.
    moved = PEG.prepare(g, target_spec(g.spec, depth=4, width=24, heads=3), seed=2)
    with torch.no_grad():
        moved.learngene["phi:ffn:fc1:delta"][1, 0, 3] = 0.5
    fc1 = moved.materialise().layers["fc1"].data
    assert not torch.equal(fc1[1], expected["fc1"][1]) and torch.equal(fc1[0], expected["fc1"][0])


@pytest.fixture(scope="module")
def tiny_gene():
    """A hand-sized learngene: 2 ancestry layers of 2 heads of 2 (width 4,
    MLP 8), condensed to 2 mixed heads per layer and 2 FFNs."""
    model = make_vit(depth=2, embed_dim=4, num_heads=2, mlp_ratio=2.0, patch_size=7, img_size=14, in_chans=1,
                     num_classes=3)
    spec, stack = lgcli.spec_of_model(model)
    tensors, sizes = PEG.sample(spec, stack, {"learngene_heads": 2, "learngene_layers": 2},
                                torch.Generator().manual_seed(0))
    return Learngene(kind="peg", spec=spec, tensors=tensors, sizes=sizes)


def test_a_fitted_descendant_is_phis_formula_entry_by_entry(tiny_gene):
    """With φ's learned part set to arbitrary values (as a fit leaves it), every
    entry of the descendant is, computed here by hand,

        Y_t[c, e] = S_t[c, e] + Σ_p Δ[t, p, c] X_p[c, e] + s Σ_k W2[t, k] relu(Σ_p W1[k, p] X_p[c, e] / s + b1[k])

    over the learngene parts X_p (heads of every layer, FFNs, or layers of
    the inherited vectors), with S the sampled mixture and s the role's RMS."""
    g = tiny_gene
    target = target_spec(g.spec, depth=3, width=4, heads=2)  # 3 layers of 2 heads of d = 2
    model = PEG.prepare(g, target, seed=0)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    built = model.materialise().layers
    phi = model.tensors()
    heads_mix, ffn_mix = phi["phi.msa.mixture"].tolist(), phi["phi.ffn.mixture"].tolist()  # (2, 2), (3, 2)
    depth_mix = [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]  # layer j at relative depth j/2 of the 2 learngene layers
    d, learngene_layers, learngene_heads = 2, 2, 2
    assert torch.allclose(depth_interpolation(2, 3, phi["phi.msa.mixture"]), torch.tensor(depth_mix))

    def correction(name: str, parts: list[float], t: int, c: int, s: float) -> float:
        delta, w1 = phi[f"phi.{name}.delta"].tolist(), phi[f"phi.{name}.w1"].tolist()
        b1, w2 = phi[f"phi.{name}.b1"].tolist(), phi[f"phi.{name}.w2"].tolist()
        value = sum(delta[t][p][c] * x for p, x in enumerate(parts))
        for k in range(len(b1)):
            value += s * w2[t][k] * max(0.0, sum(w1[k][p] * x / s for p, x in enumerate(parts)) + b1[k])
        return value

    def rms(tensor: torch.Tensor) -> float:
        return tensor.double().pow(2).mean().sqrt().item()

    def head_entry(tensor: torch.Tensor, role: str, layer: int, head: int, c: int, e: int) -> float:
        """Channel c (and input e) of head `head` in layer `layer`: q's rows, o's columns."""
        if role == "o":
            return tensor[layer][e, head * d + c].item()
        if tensor.dim() == 2:  # a bias
            return tensor[layer][head * d + c].item()
        return tensor[layer][head * d + c, e].item()

    checked = 0
    for role in ("q", "v_bias", "o"):  # head rows, a head bias, head columns
        data = g.tensors[f"msa.{role}"]  # (2 layers, 2 heads x d, ...)
        s = rms(data)
        for j in range(3):
            for h in range(2):
                for c in range(d):
                    for e in range(4 if role != "v_bias" else 1):
                        parts = [head_entry(data, role, a, i, c, e)  # part p = layer x heads + head
                                 for a in range(learngene_layers) for i in range(learngene_heads)]
                        sampled = sum(depth_mix[j][a] * heads_mix[h][i] * parts[a * learngene_heads + i]
                                      for a in range(learngene_layers) for i in range(learngene_heads))
                        expected = sampled + correction(f"msa.{role}", parts, j * 2 + h, c, s)
                        found = head_entry(built[role].data, role, j, h, c, e)
                        assert found == pytest.approx(expected, rel=1e-5, abs=1e-5), (role, j, h, c, e)
                        checked += 1
    for role, kind in (("fc1", "ffn"), ("fc2_bias", "ffn"), ("norm1_weight", "msa")):
        data = g.tensors[f"{kind}.{role}"]  # (2 FFNs or 2 layers, C, ...)
        mix = ffn_mix if kind == "ffn" else depth_mix
        s = rms(data)
        for j in range(3):
            for c in range(data.shape[1]):
                for e in range(data.shape[2] if data.dim() == 3 else 1):
                    parts = [(data[p][c, e] if data.dim() == 3 else data[p][c]).item() for p in range(2)]
                    expected = sum(mix[j][p] * parts[p] for p in range(2)) + correction(f"{kind}.{role}", parts,
                                                                                          j, c, s)
                    found = built[role].data[j][c, e] if data.dim() == 3 else built[role].data[j][c]
                    assert found.item() == pytest.approx(expected, rel=1e-5, abs=1e-5), (role, j, c, e)
                    checked += 1
    assert checked == 3 * 2 * 2 * (4 + 1 + 4) + 3 * (8 * 4 + 4 + 4)


def test_fitting_lowers_the_loss_on_a_fixed_batch_and_keeps_the_learngene(gene):
    import torch.nn.functional as F

    from lgcli.data import load_data

    g = lgcli.load_learngene(gene)
    before = {k: v.clone() for k, v in g.tensors.items()}
    target = target_spec(g.spec, depth=3, width=32, heads=4)
    options = {"data": "fashion-mnist-mini", "steps": 60, "lr": 3e-2, "batch_size": 32, "subset": "512",
               "teacher": None, "alpha": 0.5, "tau": 1.0, "device": "cpu"}
    model = PEG.prepare(g, target, seed=0)
    frozen = {k: v.clone() for k, v in model.named_buffers()}
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    images, labels = load_data(subset=512, seed=0).train.batch(range(64), 28, 1)  # one fixed batch

    def fixed_batch_loss() -> float:
        with torch.no_grad():
            return F.cross_entropy(model.eval()(images), labels).item()

    loss_before = fixed_batch_loss()
    report = fit_on_data(model.train(), g, options, 0, "the map φ")
    loss_after = fixed_batch_loss()
    # Measured: 2.15 -> 1.87. φ before it learned (a position network over
    # softmax weights) moved it by 0.04 at most, at any rate from 1e-2 to 5e-2.
    assert report["fitted"] and loss_after < loss_before - 0.15, (loss_before, loss_after)
    assert report["loss_last"] < report["loss_first"]
    # The learngene, and φ₀'s sampled mixture, stay bit-identical; φ's learned part moved.
    assert set(frozen) >= {"phi:msa:mixture", "phi:ffn:mixture", "msa:q", "ffn:fc1", "global:head_weight"}
    assert all(torch.equal(frozen[k], v) for k, v in model.named_buffers())
    assert all(torch.equal(before[k], g.tensors[k]) for k in before)
    names = {name for name, _ in model.named_parameters()}
    roles = [name for name in g.tensors if name.startswith(("msa.", "ffn."))]
    assert names == {f"learngene.phi:{name.replace('.', ':')}:{p}" for name in roles
                     for p in ("delta", "w1", "b1", "w2")}
    moved = {name for name, value in model.named_parameters() if not torch.equal(value, start[name])}
    assert any(name.endswith(":delta") for name in moved) and any(name.endswith(":w2") for name in moved)
    model.materialise().check(target)


def test_same_grow_writes_identical_bytes_and_bad_requests_are_refused(gene, ancestry, tmp_path, lg):
    outs = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.safetensors"
        assert lg("grow", gene, "--depth", "4", "--heads", "3", "--seed", "2", "-o", out).code == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    bad = lg("grow", gene, "--depth", "2", "--width", "30", "-o", tmp_path / "x.safetensors")
    assert bad.code == 1 and "head" in bad.stderr and len(bad.stderr.splitlines()) == 1
    too_many = lg("condense", ancestry, "--method", "peg", "--learngene-heads", "9", "-o", tmp_path / "y.lg")
    assert too_many.code == 1 and "at most 4 heads" in too_many.stderr
    assert not (tmp_path / "x.safetensors").exists() and not (tmp_path / "y.lg").exists()


def test_training_flags_are_refused_not_ignored(ancestry, tmp_path, lg):
    """PEG is sampled: the flags of a training run would be ignored in
    silence, so a user could believe it trained or checkpointed."""
    out = tmp_path / "p.lg.safetensors"
    result = lg("condense", ancestry, "--method", "peg", "--batch-size", "3", "--lr", "5", "--checkpoint-every", "3",
                "-o", out)
    assert result.code == 2 and result.stderr.strip() == (
        "lg: error: a peg learngene is sampled from the teacher, not trained: --batch-size, --lr, "
        "--checkpoint-every do not apply")
    assert not out.exists() and not (tmp_path / "p.lg.safetensors.train.pt").exists()
    steps = lg("condense", ancestry, "--method", "peg", "--steps", "2", "-o", out, "--dry-run")
    assert steps.code == 2 and steps.stderr.strip().endswith("--steps does not apply")
