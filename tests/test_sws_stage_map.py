"""SWS's stage map from data (`lg condense --method sws --stage-map
angular|block-influence`; lgcli/learngenes/sws.py): the map of every depth
checked entry by entry on hand-made statistics, the descendant built from
it, and, on a teacher whose last blocks are exact identities, a learngene
whose shallow descendants are the teacher without them, logits and all."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
from lgcli.calibration import Calibration
from lgcli.learngenes.sws import KIND as SWS
from lgcli.learngenes.sws import stage_maps, stage_of_layers
from lgcli.stack import ArchSpec

from conftest import make_vit, sample_input
from test_data_aware import VIT_OUTPUTS, text_file, zero_block_outputs
from text_models import load_strict, make_model, outputs, save_folder, token_ids

IMAGES = "fashion-mnist-mini"
# One step at a rate that moves no float32 weight: the learngene is its start, the warm start from the teacher.
STILL = ["--steps", "1", "--lr", "1e-30", "--batch-size", "8", "--subset", "32", "--test-subset", "16"]


def statistics(influence: list[float], distances: dict[int, list[float]]) -> Calibration:
    """A Calibration of a 4-block model whose block influence and angular
    distances d(l, n) are the given numbers (cosine[l, l+1] = 1 - BI_l, angle[l, l+n] = d(l, n))."""
    cosine, angle = torch.eye(5), torch.zeros(5, 5)
    for layer, value in enumerate(influence):
        cosine[layer, layer + 1] = 1 - value
    for n, values in distances.items():
        for layer, value in enumerate(values):
            angle[layer, layer + n] = value
    return Calibration(data="hand-made", samples=8, seed=0, positions=64, cosine=cosine, angle=angle,
                       mlp=torch.ones(4, 8), heads=torch.ones(4, 2), embed=torch.ones(4))


AUX = ArchSpec(family="vit", depth=4, width=32, heads=2, head_dim=16, mlp_dim=128)
HAND = statistics([0.5, 0.0, 0.3, 0.2], {1: [0.4, 0.1, 0.3, 0.2], 2: [0.5, 0.3, 0.2], 3: [0.6, 0.4]})


@pytest.mark.parametrize("method, stages, expected", [
    # Block influence keeps the D blocks of largest BI, in order: D=3 -> 0, 2, 3; D=2 -> 0, 2; D=1 -> 0.
    ("block-influence", 4, {"1": [0], "2": [0, 2], "3": [0, 2, 3], "4": [0, 1, 2, 3]}),
    # Two stages own layers 0, 1 and 2, 3: the kept layers' stages.
    ("block-influence", 2, {"1": [0], "2": [0, 1], "3": [0, 1, 1], "4": [0, 0, 1, 1]}),
    # Angular drops n = 4 - D contiguous blocks from argmin_l d(l, n): n=1 -> block 1; n=2 -> 2, 3; n=3 -> 1-3.
    ("angular", 4, {"1": [0], "2": [0, 1], "3": [0, 2, 3], "4": [0, 1, 2, 3]}),
    ("angular", 2, {"1": [0], "2": [0, 0], "3": [0, 1, 1], "4": [0, 0, 1, 1]}),
])
def test_the_stage_map_of_every_depth_by_hand(method, stages, expected):
    measured = SWS.measured_sizes(AUX, AUX, {"stages": stages, "stage_map": method}, HAND)
    assert measured["stage_map"]["depths"] == expected
    assert measured["stage_map"]["method"] == method
    assert measured["stage_map"]["calibration"] == {"data": "hand-made", "samples": 8, "seed": 0, "positions": 64}
    assert stage_maps({"stages": stages, **measured}) == {int(d): owner for d, owner in expected.items()}


def test_a_mapped_depth_takes_its_map_and_any_other_the_rule(identity_tail):
    spec = lgcli.load(identity_tail[1]).spec
    template = lgcli.load(identity_tail[1]).stack.materialized()
    tensors = {f"S{s}.{role}": torch.full(named.data.shape[1:], float(s))
               for role, named in template.layers.items() for s in range(4)}
    tensors.update({f"global.{role}": named.data.float() for role, named in template.globals.items()})
    build = SWS.builder({"stages": 4, "stage_map": {"method": "angular", "depths": {"3": [0, 2, 3]}}})
    assert build(tensors, spec.with_sizes(depth=3)).layers["fc1"].data[:, 0, 0].tolist() == [0, 2, 3]
    assert stage_of_layers(2, 4) == [0, 3]  # depth 2 has no map: the rule
    assert build(tensors, spec.with_sizes(depth=2)).layers["fc1"].data[:, 0, 0].tolist() == [0, 3]
    assert SWS.builder({"stages": 4}) == SWS.build  # no map: the rule's own build


@pytest.mark.parametrize("bad", [
    {"depths": {"2": [0]}},           # depth 2 must map 2 layers
    {"depths": {"2": [0, 4]}},        # stage 4 of 4 does not exist
    {"depths": {"x": [0]}},
    {"depths": {"\u00b2": [0, 1]}},  # a digit int() does not read
    {"depths": [[0]]},
    "angular",
])
def test_a_malformed_stage_map_is_refused(bad):
    with pytest.raises(lgcli.errors.LgError, match="stage map is malformed"):
        stage_maps({"stages": 4, "stage_map": bad})


@pytest.fixture(scope="module")
def identity_tail(tmp_path_factory):
    """A 4-block ViT whose blocks 2 and 3 are exact identities: the SWS rule
    at depth 2 takes stages 0 and 3, the data the teacher's blocks 0 and 1."""
    model = make_vit(depth=4, img_size=28, in_chans=1, num_classes=10).eval()
    for block in (2, 3):
        zero_block_outputs(model, f"blocks.{block}.", VIT_OUTPUTS)
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model, path)
    return model, path


@pytest.mark.parametrize("method", ["block-influence", "angular"])
def test_shallow_descendants_are_the_teacher_without_its_identity_blocks(identity_tail, tmp_path, lg, method):
    model, teacher = identity_tail
    gene = tmp_path / "sws.lg.safetensors"
    result = lg("condense", teacher, "--method", "sws", "--stages", "4", "--stage-map", method, "--depths", "2-4",
                "--data", IMAGES, *STILL, "-o", gene)
    assert result.code == 0, result.stderr
    assert f"stage map by {method} on 64 examples of {IMAGES}" in result.stderr
    learngene = lgcli.load_learngene(gene)
    assert learngene.sizes["stage_map"]["depths"]["2"] == [0, 1]
    assert stage_of_layers(2, 4) == [0, 3]  # what the rule would have taken
    out = tmp_path / "d2.safetensors"
    grown = lg("grow", gene, "--depth", "2", "-o", out, "--json")
    assert grown.code == 0, grown.stderr
    details = json.loads(grown.stdout)["details"]
    assert details["stage_of_layer"] == [0, 1] and method in details["rule"]
    report = lgcli.inspect_checkpoint(out)
    small = eval(report["load_call"].replace("'" + str(out) + "'", repr(str(out))), {"timm": timm}).eval()
    x = sample_input(model)
    with torch.no_grad():  # blocks 2 and 3 added nothing: the same logits
        torch.testing.assert_close(small(x), model(x), atol=1e-5, rtol=1e-5)
    shown = json.loads(lg("inspect", gene, "--json").stdout)
    said = f"depths 1-4 by the stage map condensing measured ({method} on {IMAGES}), the others by the SWS rule"
    assert shown["depths"] == said and shown["becomes"].endswith(said)  # the table's "becomes" row
    # The same data and seed give the same bytes.
    again = tmp_path / "again.lg.safetensors"
    assert lg("condense", teacher, "--method", "sws", "--stages", "4", "--stage-map", method, "--depths", "2-4",
              "--data", IMAGES, *STILL, "-o", again).code == 0
    assert again.read_bytes() == gene.read_bytes()


def test_a_stage_map_needs_a_start_from_the_teacher(identity_tail, tmp_path, lg):
    _, teacher = identity_tail
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", teacher, "--method", "sws", "--stage-map", "angular", "--init", "random",
                "--data", IMAGES, *STILL, "-o", out)
    stderr = result.stderr
    assert result.code != 0 and "--stage-map angular maps descendants onto the teacher's layers" in stderr
    assert "\n" not in stderr.strip() and "Traceback" not in stderr and not out.exists()


def test_a_file_with_a_malformed_stage_map_is_refused_on_reading(identity_tail, tmp_path, lg):
    from lgcli.learngene_files import save_learngene

    _, teacher = identity_tail
    gene = tmp_path / "sws.lg.safetensors"
    assert lg("condense", teacher, "--method", "sws", "--stages", "4", "--stage-map", "angular", "--data", IMAGES,
              *STILL, "-o", gene).code == 0
    learngene = lgcli.load_learngene(gene)
    learngene.sizes["stage_map"]["depths"]["2"] = [0, 9]
    bad = tmp_path / "bad.lg.safetensors"
    save_learngene(bad, learngene)
    result = lg("grow", bad, "--depth", "2", "-o", tmp_path / "out.safetensors")
    stderr = result.stderr
    assert result.code != 0 and "stage map is malformed" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out.safetensors").exists()


def test_a_llama_learngene_with_a_stage_map_grows_a_folder_transformers_loads(tmp_path, lg):
    folder = save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa")
    text = text_file(tmp_path / "train.txt")
    gene = tmp_path / "sws.lg.safetensors"
    result = lg("condense", folder, "--method", "sws", "--stage-map", "angular", "--data", text, "--steps", "2",
                "--batch-size", "4", "--seq-len", "12", "-o", gene)
    assert result.code == 0, result.stderr
    learngene = lgcli.load_learngene(gene)
    depth = learngene.spec.depth
    assert sorted(map(int, learngene.sizes["stage_map"]["depths"])) == list(range(1, depth + 1))
    out = tmp_path / "grown"
    assert lg("grow", gene, "--depth", str(depth - 1), "-o", out).code == 0
    model = load_strict(out, "llama-gqa")
    assert model.config.num_hidden_layers == depth - 1
    assert torch.isfinite(outputs(model, token_ids())).all()


def test_a_stage_map_beside_widths_is_measured_on_the_same_examples(identity_tail, tmp_path, lg):
    # The channels are put in order of importance and the map is chosen on the same examples; the
    # permutation keeps every block's function, so the map is the one measured without --widths.
    _, teacher = identity_tail
    gene = tmp_path / "sws.lg.safetensors"
    result = lg("condense", teacher, "--method", "sws", "--stages", "4", "--stage-map", "block-influence",
                "--widths", "32,64", "--data", IMAGES, *STILL, "-o", gene)
    assert result.code == 0, result.stderr
    learngene = lgcli.load_learngene(gene)
    assert learngene.sizes["widths"] == [32, 64] and learngene.sizes["stage_map"]["depths"]["2"] == [0, 1]
    assert learngene.condensed["importance_order"] == learngene.sizes["stage_map"]["calibration"]


def test_a_swin_is_refused_a_stage_map_in_one_line(tmp_path, lg):
    from test_swin import make_swin
    from test_swin_learngenes import SWIN

    swin = tmp_path / "swin.safetensors"
    lgcli.save_model(make_swin(**SWIN), swin)
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", swin, "--method", "sws", "--stage-map", "angular", "--data", IMAGES, *STILL, "-o", out)
    assert result.code != 0 and "--stage-map angular is for a model of one stack of blocks" in result.stderr
    assert "\n" not in result.stderr.strip() and "Traceback" not in result.stderr and not out.exists()


def test_a_dry_run_makes_no_calibration_pass(identity_tail, tmp_path, lg):
    _, teacher = identity_tail
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", teacher, "--method", "sws", "--stage-map", "angular", "--data", IMAGES, *STILL,
                "--dry-run", "-o", out, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["dry_run"] is True
    assert "stage map" not in result.stderr and not out.exists()
