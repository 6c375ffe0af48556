"""WAVE learngenes keep the auxiliary model's trained scalers: grown at the
auxiliary size the descendant is exactly the model condensing trained; at
another depth the scalers start resampled over depth (checked entry by entry
on a hand-made case); `--scalers eq-b1` and files written before they were
kept start from Eq. B.1, as the paper; a file with some scalers missing is
refused in one line."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import lgcli
import lgcli.resize
from lgcli.learngenes.wave import KIND as WAVE
from lgcli.learngenes.wave import linear_padding_scalers, resampled_scalers

from conftest import run_lg_inproc

TEACHER = dict(depth=3, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
FAST = ["--batch-size", "16", "--subset", "64", "--test-subset", "32", "--steps", "3"]


@pytest.fixture(scope="module")
def gene(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("wave")
    teacher = folder / "teacher.safetensors"
    lgcli.save_model(timm.create_model("vit_base_patch16_224", **TEACHER).eval(), teacher)
    out = folder / "wave.lg.safetensors"
    done = run_lg_inproc("condense", str(teacher), "--method", "wave", "--template-dim", "16", "--data",
                         "fashion-mnist-mini", *FAST, "-o", str(out))
    assert done.code == 0, done.stderr
    return out


def test_resampled_scalers_entry_by_entry():
    scalers = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)  # 4 layers, 2 templates, s = 3
    assert torch.equal(resampled_scalers(scalers, 4), scalers)
    # 7 layers: positions 0, 0.5, 1, ..., 3 of the trained 4 (first and last kept, midpoints between).
    seven = resampled_scalers(scalers, 7)
    for layer in range(7):
        low, high = layer // 2, min(layer // 2 + 1, 3)
        expected = scalers[low] if layer % 2 == 0 else (scalers[low] + scalers[high]) / 2
        assert torch.allclose(seven[layer], expected), layer
    # 3 layers: positions 0, 1.5, 3; 1 layer: the first.
    three = resampled_scalers(scalers, 3)
    assert torch.equal(three[0], scalers[0]) and torch.allclose(three[1], (scalers[1] + scalers[2]) / 2)
    assert torch.equal(three[2], scalers[3])
    assert torch.equal(resampled_scalers(scalers, 1), scalers[:1])
    # Eq. B.1's scalers (without noise) are linear in depth over l / L, whose resampling at
    # L' = 7 from L = 4 is the same line at the resampled positions: 1/4 + (3/4)(l' - 1)/6.
    line = linear_padding_scalers(4, 4, (2, 1), torch.Generator().manual_seed(0))
    noise = line - torch.round(line * 4) / 4  # the 1e-6 noise: Eq. B.1's values are quarters here
    resampled = resampled_scalers(line - noise, 7)
    for layer in range(7):
        assert torch.allclose(resampled[layer, 3, 1, 0], torch.tensor(0.25 + 0.75 * layer / 6)), layer


def test_the_learngene_keeps_the_auxiliary_models_scalers(gene, lg):
    learngene = lgcli.load_learngene(gene)
    templates = {n[2:] for n in learngene.tensors if n.startswith("T.")}
    assert templates and {n[2:] for n in learngene.tensors if n.startswith("S.")} == templates
    # qkv 96 x 32 from 16 x 16 templates: s = (6, 2); 24 templates; the auxiliary depth 3.
    assert tuple(learngene.tensors["S.qkv"].shape) == (3, 24, 6, 2)
    shown = json.loads(lg("inspect", str(gene), "--json").stdout)
    assert "the auxiliary model's scalers" in shown["holds"]


def test_grown_at_its_own_size_it_is_the_auxiliary_model(gene, tmp_path, lg):
    learngene = lgcli.load_learngene(gene)
    auxiliary = WAVE.build(learngene.tensors, learngene.spec)  # Eq. 4 with the trained scalers
    out = tmp_path / "own.safetensors"
    grown = lg("grow", str(gene), "--depth", "3", "-o", str(out), "--json")
    assert grown.code == 0, grown.stderr
    assert json.loads(grown.stdout)["details"]["scalers"] == "the auxiliary model's, as condensed"
    built = lgcli.load(out).stack.materialized()
    for role, named in auxiliary.layers.items():
        assert torch.equal(built.layers[role].data, named.data.float()), role
    report = lgcli.inspect_checkpoint(out)  # and it loads strictly in timm and runs
    model = eval(report["load_call"].replace("'" + str(out) + "'", repr(str(out))), {"timm": timm})
    assert torch.isfinite(model(torch.randn(2, 1, 28, 28))).all()


def test_another_depth_starts_from_the_resampled_scalers_or_eq_b1(gene, tmp_path, lg):
    learngene = lgcli.load_learngene(gene)
    kept = {n: t for n, t in learngene.tensors.items() if not n.startswith("S.")}
    resampled = {**kept, **{n: resampled_scalers(t, 5) for n, t in learngene.tensors.items() if n.startswith("S.")}}
    expected = WAVE.build(resampled, learngene.spec.with_sizes(depth=5))
    for scalers, said in (("auto", "the auxiliary model's, resampled from depth 3 to 5"),
                          ("eq-b1", "WAVE Eq. B.1 (linear padding)")):
        out = tmp_path / f"{scalers}.safetensors"
        grown = lg("grow", str(gene), "--depth", "5", "--scalers", scalers, "-o", str(out), "--json")
        assert grown.code == 0, grown.stderr
        assert json.loads(grown.stdout)["details"]["scalers"] == said
        same = torch.equal(lgcli.load(out).stack.materialized().layers["fc1"].data, expected.layers["fc1"].data)
        assert same == (scalers == "auto")


def test_a_file_without_scalers_grows_by_eq_b1_and_one_missing_is_refused(gene, tmp_path, lg):
    with safe_open(str(gene), "pt") as f:
        metadata, tensors = f.metadata(), {n: f.get_tensor(n) for n in f.keys()}
    older = tmp_path / "older.lg.safetensors"  # as lg wrote WAVE learngenes before it kept the scalers
    save_file({n: t for n, t in tensors.items() if not n.startswith("S.")}, str(older), metadata=metadata)
    grown = lg("grow", str(older), "--depth", "3", "-o", str(tmp_path / "older.safetensors"), "--json")
    assert grown.code == 0, grown.stderr
    assert json.loads(grown.stdout)["details"]["scalers"] == "WAVE Eq. B.1 (linear padding)"
    partial = tmp_path / "partial.lg.safetensors"
    save_file({n: t for n, t in tensors.items() if n != "S.fc1"}, str(partial), metadata=metadata)
    out = tmp_path / "no.safetensors"
    refused = lg("grow", str(partial), "--depth", "3", "-o", str(out))
    assert refused.code != 0 and "S.fc1" in refused.stderr and "\n" not in refused.stderr.strip()
    assert not out.exists() and "Traceback" not in refused.stderr


def test_depths_train_the_scalers_through_their_resampling(gene, tmp_path, lg):
    # Any depth builds Eq. 4 with the auxiliary model's scalers resampled to it ...
    learngene = lgcli.load_learngene(gene)
    resampled = {n: resampled_scalers(t, 5) if n.startswith("S.") else t for n, t in learngene.tensors.items()}
    five = learngene.spec.with_sizes(depth=5)
    assert torch.equal(WAVE.build(learngene.tensors, five).layers["fc1"].data, WAVE.build(resampled, five).layers["fc1"].data)
    # ... so condensing at a drawn depth trains them through it: at depth 2 of the 3-layer auxiliary model the
    # resampling reads layers 0 and 2 (positions 0 and 2), so layer 1's scalers keep their start exactly.
    teacher = gene.parent / "teacher.safetensors"
    loaded = lgcli.load(teacher)
    stack = loaded.stack.materialized()
    start, _ = WAVE.initial(loaded.spec, stack, {"template_dim": 16}, torch.Generator().manual_seed(0), ancestry=stack)
    out = tmp_path / "drawn.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "wave", "--template-dim", "16", "--depths", "2",
                "--data", "fashion-mnist-mini", *FAST, "-o", str(out))
    assert result.code == 0, result.stderr
    drawn = lgcli.load_learngene(out)
    for role in ("qkv", "fc1", "norm1_weight"):
        assert torch.equal(drawn.tensors[f"S.{role}"][1], start[f"S.{role}"][1]), role
        assert not torch.equal(drawn.tensors[f"S.{role}"][0], start[f"S.{role}"][0]), role
    assert drawn.sizes["trained_depths"] == [2, 2]
    assert json.loads(lg("inspect", str(out), "--json").stdout)["trained_at"] == {"depths": "2"}


@pytest.mark.parametrize("data, refusal", [
    ("no-such-folder", "lg: error: --data no-such-folder: no such file or folder, and not a built-in text"),
    ("kjv-mini", "lg: error: --data kjv-mini is a text; the wave learngene's descendant is an image classifier"),
])
def test_a_dry_run_refuses_the_fits_data_as_the_run_does(gene, tmp_path, lg, data, refusal):
    """A dry run reads no data, but a --data the run would refuse (nothing
    there, a text for an image classifier) is refused by the plan too."""
    for dry_run in (["--dry-run"], []):
        done = lg("grow", gene, "--depth", "4", "--data", data, "-o", tmp_path / "out.safetensors", *dry_run)
        assert done.code == 1 and done.stderr.strip().splitlines()[-1].startswith(
            refusal if dry_run or data == "kjv-mini" else "lg: error: --data no-such-folder: no such"), done.stderr
        assert not (tmp_path / "out.safetensors").exists()


def test_a_teacher_whose_heads_are_not_recorded_is_refused_with_the_way_to_record_them(gene, tmp_path, lg):
    """Its logits depend on its heads, which lg would assume: refused in one
    line naming the grow that records them, which then makes it a teacher."""
    from conftest import write_plain

    torch.manual_seed(1)
    plain = write_plain(timm.create_model("vit_base_patch16_224", **TEACHER).eval(), tmp_path / "plain.safetensors")
    out = tmp_path / "out.safetensors"
    fit = ["--depth", "4", "--data", "fashion-mnist-mini", "--batch-size", "16", "--subset", "64", "--steps", "2",
           "-o", out]
    refused = lg("grow", gene, *fit, "--teacher", plain)
    assert refused.code == 1 and refused.stderr.count("\n") == 1 and not out.exists(), refused.stderr
    assert refused.stderr.endswith(f"record them first, with the teacher's own heads as N: lg grow {plain} "
                                   f"--source-heads N --depth 3 --method clone -o TEACHER (its weights, heads "
                                   f"recorded), then give --teacher TEACHER\n")
    recorded = tmp_path / "teacher.safetensors"
    assert lg("grow", plain, "--source-heads", "2", "--depth", "3", "--method", "clone", "-o", recorded).code == 0
    done = lg("grow", gene, *fit, "--teacher", recorded)
    assert done.code == 0, done.stderr
