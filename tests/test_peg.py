"""PEG: mixture weights, every learngene head and FFN checked entry by entry
against the ancestry's, descendants that load strictly at depths and head
counts above and below the learngene's, and φ training that lowers the loss
with the learngene frozen."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
from lgcli.learngenes.peg import KIND as PEG
from lgcli.learngenes.peg import MIXTURES, depth_interpolation, fresh_phi, mixture_weights, phi_weights
from lgcli.resize import target_spec

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
    for a in range(3):
        for h in range(2):
            rows = slice(h * d, (h + 1) * d)
            for role in ("q", "k", "v", "q_bias"):
                expected = sum(heads[a, h, i] * layers[role].data[a][i * d:(i + 1) * d].float() for i in range(4))
                assert torch.allclose(g.tensors[f"msa.{role}"][a][rows], expected, atol=1e-6), (role, a, h)
            # The output projection's columns follow the heads.
            expected = sum(heads[a, h, i] * layers["o"].data[a][:, i * d:(i + 1) * d].float() for i in range(4))
            assert torch.allclose(g.tensors["msa.o"][a][:, rows], expected, atol=1e-6)
        assert torch.equal(g.tensors["msa.norm1_weight"][a], layers["norm1_weight"].data[a].float())
    for l in range(2):
        for role in ("fc1", "fc1_bias", "fc2", "fc2_bias"):
            expected = sum(ffn[l, k] * layers[role].data[k].float() for k in range(3))
            assert torch.allclose(g.tensors[f"ffn.{role}"][l], expected, atol=1e-6), (role, l)
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
    """φ's locality prior: at the learngene's own count each target part weighs
    its own part most (a neighbour about e^-2 as much); depths are linear
    interpolation between the two nearest learngene layers."""
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


def test_training_phi_lowers_the_loss_and_keeps_the_learngene(gene):
    from lgcli.data import load_data
    from lgcli.train import evaluate_accuracy

    g = lgcli.load_learngene(gene)
    before = {k: v.clone() for k, v in g.tensors.items()}
    target = target_spec(g.spec, depth=3, width=32, heads=4)
    options = {"data": "fashion-mnist-mini", "steps": 60, "lr": 5e-2, "batch_size": 32, "subset": "512",
               "teacher": None, "alpha": 0.5, "tau": 1.0, "device": "cpu"}
    model = PEG.prepare(g, target, seed=0)
    frozen = {k: v.clone() for k, v in model.named_buffers()}
    seen = load_data(subset=512, seed=0).train  # the images φ trains on, scored as a fixed set
    loss_before = evaluate_accuracy(model.eval(), seen)["loss"]
    report = PEG.train_phi(model.train(), g, target, options, seed=0)
    loss_after = evaluate_accuracy(model.eval(), seen)["loss"]
    assert report["fitted"] and loss_after < loss_before - 0.01, (loss_before, loss_after)
    assert all(torch.equal(frozen[k], v) for k, v in model.named_buffers())   # the learngene stays frozen
    assert all(torch.equal(before[k], g.tensors[k]) for k in before)
    assert {name for name, _ in model.named_parameters()} == {f"learngene.phi:{n}:{p}" for n in ("msa", "ffn")
                                                            for p in ("w1", "b1", "w2", "b2")}
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
