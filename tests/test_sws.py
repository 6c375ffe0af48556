"""SWS (stage-wise weight sharing; SPEC.md "SWS", lgcli/learngenes/sws.py):
the stage rule and the expansion checked entry by entry on hand-made cases,
the warm start as a mean per stage, and descendants that load strictly in
timm and transformers and run."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
from lgcli.arch import get_adapter
from lgcli.learngenes.sws import KIND as SWS
from lgcli.learngenes.sws import proportional_stages, stage_bounds, stage_of_layers

from conftest import sample_input

TEACHER = dict(depth=4, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
FAST = ["--batch-size", "16", "--subset", "64", "--test-subset", "32", "--steps", "2"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **TEACHER).eval()
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model, path)
    return path


def test_the_stage_rule_by_hand():
    # The reference auxiliary model: 16 blocks in stages of 3, 3, 4, 3, 3.
    assert stage_bounds(16, 5) == [0, 3, 6, 10, 13, 16]
    # b(s) = floor(s L / N + 1/2): L = 12, N = 5 -> 0, 2 (2.9), 5 (5.3), 7 (7.7), 10 (10.1), 12.
    assert stage_of_layers(12, 5) == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4]
    assert stage_of_layers(5, 3) == [0, 0, 1, 2, 2]          # 0, 2 (2.17), 3 (3.83), 5
    assert stage_of_layers(4, 4) == [0, 1, 2, 3]             # one layer per stage at N = L
    # Shallower than the stages, layer i takes floor(i (N - 1)/(L' - 1) + 1/2): the first and the last
    # stage and evenly between. With N = 5: depth 2 takes 0 and 4 (the proportional bounds 0, 0, 1, 1, 2, 2
    # gave 1 and 3, neither end); depth 3: 0, 2 (2.0), 4; depth 4: 0, 1 (1.33), 3 (2.67), 4.
    assert stage_of_layers(2, 5) == [0, 4] and proportional_stages(2, 5) == [1, 3]
    assert stage_of_layers(3, 5) == [0, 2, 4] == proportional_stages(3, 5)
    assert stage_of_layers(4, 5) == [0, 1, 3, 4] == proportional_stages(4, 5)
    # N = 6: depth 3 takes 0, 3 (2.5 rounds up), 5 where the proportional rule took 0, 2, 4 (no last stage);
    # depth 5 takes 0, 1 (1.25), 3 (2.5), 4 (3.75), 5.
    assert stage_of_layers(3, 6) == [0, 3, 5] and proportional_stages(3, 6) == [0, 2, 4]
    assert stage_of_layers(5, 6) == [0, 1, 3, 4, 5]
    assert stage_of_layers(1, 5) == [2]                       # one layer: the middle stage, as before


def test_a_descendant_takes_each_layer_from_its_stage_entry_by_entry(teacher):
    spec = lgcli.load(teacher).spec
    template = get_adapter(spec.family).random_stack(spec, seed=0)
    # Hand-made stage tensors: stage s, role number r holds the constant 100 s + r (then a ramp,
    # so that a wrong slice shows too).
    tensors = {}
    roles = sorted(template.layers)
    for r, role in enumerate(roles):
        shape = template.layers[role].data.shape[1:]
        for s in range(3):
            tensors[f"S{s}.{role}"] = 100.0 * s + r + torch.arange(shape.numel(), dtype=torch.float32).reshape(
                shape) / 1000
    for role, named in template.globals.items():
        tensors[f"global.{role}"] = named.data.float()
    built = SWS.build(tensors, spec.with_sizes(depth=5))
    for r, role in enumerate(roles):
        data = built.layers[role].data
        assert data.shape[0] == 5
        for layer, stage in enumerate([0, 0, 1, 2, 2]):
            assert torch.equal(data[layer], tensors[f"S{stage}.{role}"]), (role, layer)
    # At width 16 (1 head of 16, MLP 64): the first 16 channels of every width axis.
    narrow = SWS.build(tensors, spec.with_sizes(depth=5, width=16, heads=1, mlp_dim=64))
    assert torch.equal(narrow.layers["fc1"].data[2], tensors["S1.fc1"][:64, :16])
    assert torch.equal(narrow.layers["o"].data[4], tensors["S2.o"][:16, :16])
    assert torch.equal(narrow.globals["pos_embed"].data, tensors["global.pos_embed"][..., :16])


def test_the_warm_start_is_the_mean_of_each_stages_layers(teacher):
    loaded = lgcli.load(teacher)
    stack = loaded.stack.materialized()
    tensors, frozen = SWS.initial(loaded.spec, stack, {"stages": 2}, torch.Generator().manual_seed(0),
                                  ancestry=stack)
    assert frozen == {}
    for role, named in stack.layers.items():  # 4 layers in 2 stages: layers 0, 1 and 2, 3
        assert torch.allclose(tensors[f"S0.{role}"], (named.data[0] + named.data[1]).float() / 2)
        assert torch.allclose(tensors[f"S1.{role}"], (named.data[2] + named.data[3]).float() / 2)
    for role, named in stack.globals.items():
        assert torch.equal(tensors[f"global.{role}"], named.data.float())


def test_the_starting_learngene_is_condensings_start_and_a_stage_per_layer_is_the_teacher(teacher):
    from lgcli.condense import starting_learngene, unstarted_learngene
    from lgcli.resize import expand

    loaded = lgcli.load(teacher)
    paired = starting_learngene(loaded, "sws", options={"stages": 2})
    stack = loaded.stack.materialized()
    for role, named in stack.layers.items():  # the warm start above, through the public function
        assert torch.allclose(paired.tensors[f"S1.{role}"], (named.data[2] + named.data[3]).float() / 2)
    unstarted = unstarted_learngene(loaded, "sws", options={"stages": 2})
    assert {n: t.shape for n, t in unstarted.tensors.items()} == {n: t.shape for n, t in paired.tensors.items()}
    assert unstarted.sizes == paired.sizes
    # A stage per layer: grown at the teacher's depth, the start is the teacher, logits and all.
    whole = starting_learngene(loaded, "sws", options={"stages": TEACHER["depth"]})
    spec, grown, _ = expand(whole, depth=TEACHER["depth"], seed=0, notify=lambda m: None)
    model = lgcli.load_model(teacher)[0].eval()
    x = sample_input(model)
    with torch.no_grad():
        assert torch.allclose(model(x), get_adapter(spec.family).load_model(spec, grown).eval()(x), atol=1e-5)


def test_sws_condenses_and_grows_into_strict_timm_models(teacher, tmp_path, lg):
    gene = tmp_path / "sws.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "sws", "--stages", "2", "--data", "fashion-mnist-mini",
                *FAST, "-o", str(gene), "--json")
    assert result.code == 0, result.stderr
    learngene = lgcli.load_learngene(gene)
    assert learngene.sizes["stages"] == 2 and learngene.sizes["stage_layers"] == [2, 2]
    assert sorted({name.split(".")[0] for name in learngene.tensors}) == ["S0", "S1", "global"]
    for depth in (3, 6):
        out = tmp_path / f"d{depth}.safetensors"
        grown = lg("grow", str(gene), "--depth", str(depth), "-o", str(out), "--json")
        assert grown.code == 0, grown.stderr
        assert json.loads(grown.stdout)["details"]["stage_of_layer"] == stage_of_layers(depth, 2)
        report = lgcli.inspect_checkpoint(out)
        model = eval(report["load_call"].replace("'" + str(out) + "'", repr(str(out))), {"timm": timm})
        assert len(model.blocks) == depth
        assert torch.isfinite(model(sample_input(model))).all()
        built = lgcli.load(out).stack.materialized()
        owner = stage_of_layers(depth, 2)
        for layer in range(depth):
            assert torch.equal(built.layers["fc1"].data[layer], learngene.tensors[f"S{owner[layer]}.fc1"])
    # Another width than the learngene's is refused in one line naming it, and reached with --method.
    refused = lg("grow", str(gene), "--depth", "3", "--width", "64", "-o", str(tmp_path / "no.safetensors"))
    assert refused.code != 0 and "trained at width 32 (2 heads, MLP 128)" in refused.stderr
    assert "\n" not in refused.stderr.strip()
    wide = tmp_path / "wide.safetensors"
    assert lg("grow", str(gene), "--depth", "3", "--width", "64", "--method", "bot", "-o", str(wide)).code == 0


def test_depths_train_only_the_stages_the_drawn_depths_use(teacher, tmp_path, lg):
    # 4 stages over the teacher's 4 layers, warm-started: stage s is the teacher's layer s. Trained at
    # depth 2 alone, the SWS rule uses the first and last stages, 0 and 3, so stages 1 and 2 get no
    # gradient and stay the teacher's layers exactly, while 0 and 3 move; at the auxiliary depth all move.
    assert stage_of_layers(2, 4) == [0, 3]
    teacher_layers = lgcli.load(teacher).stack.materialized().layers
    genes = {}
    for name, extra in (("drawn", ["--depths", "2"]), ("own", [])):
        genes[name] = tmp_path / f"{name}.lg.safetensors"
        result = lg("condense", str(teacher), "--method", "sws", "--stages", "4", "--init", "ancestry", *extra,
                    "--data", "fashion-mnist-mini", *FAST, "-o", str(genes[name]))
        assert result.code == 0, result.stderr
    drawn, own = (lgcli.load_learngene(genes[name]) for name in ("drawn", "own"))
    for stage in range(4):
        kept = torch.equal(drawn.tensors[f"S{stage}.fc1"], teacher_layers["fc1"].data[stage].float())
        assert kept == (stage in (1, 2)), stage
        assert not torch.equal(own.tensors[f"S{stage}.fc1"], teacher_layers["fc1"].data[stage].float()), stage
    assert drawn.sizes["trained_depths"] == [2, 2] and "trained_depths" not in own.sizes
    shown = json.loads(lg("inspect", str(genes["drawn"]), "--json").stdout)
    assert shown["trained_at"] == {"depths": "2"}


def test_a_bad_depth_range_is_refused_in_one_line(teacher, tmp_path, lg):
    out = tmp_path / "g.lg.safetensors"
    for text, said in (("5-2", "--depths 5-2: need 1 <= MIN <= MAX"), ("two", "--depths takes a range MIN-MAX")):
        result = lg("condense", str(teacher), "--method", "sws", "--depths", text, "--data", "fashion-mnist-mini",
                    *FAST, "-o", str(out))
        assert result.code != 0 and said in result.stderr and "\n" not in result.stderr.strip()
        assert not out.exists() and "Traceback" not in result.stderr


def test_the_default_stage_count():
    from lgcli.stack import ArchSpec

    for depth, stages in ((16, 5), (12, 5), (4, 4), (2, 2)):
        aux = ArchSpec(family="vit", depth=depth, width=32, heads=2, head_dim=16, mlp_dim=128)
        assert SWS.sizes(aux, {})["stages"] == stages
    assert SWS.sizes(ArchSpec(family="vit", depth=16, width=32, heads=2, head_dim=16, mlp_dim=128),
                     {})["stage_layers"] == [3, 3, 4, 3, 3]


def test_more_stages_than_layers_is_refused(teacher, tmp_path, lg):
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "sws", "--stages", "5", "--data", "fashion-mnist-mini",
                *FAST, "-o", str(out))
    assert result.code != 0 and "--stages 5 is more than the auxiliary depth 4" in result.stderr
    assert not out.exists() and "Traceback" not in result.stderr


def test_an_sws_learngene_of_llama_grows_into_a_folder_transformers_loads(tmp_path, lg):
    from text_models import load_strict, make_model, outputs, save_folder, token_ids

    folder = save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa")
    gene = tmp_path / "sws.lg.safetensors"
    result = lg("condense", str(folder), "--method", "sws", "--stages", "2", "--data", "kjv-mini", "--steps", "2",
                "--batch-size", "4", "--seq-len", "12", "-o", str(gene))
    assert result.code == 0, result.stderr
    out = tmp_path / "grown"
    assert lg("grow", str(gene), "--depth", "5", "-o", str(out)).code == 0
    model = load_strict(out, "llama-gqa")
    assert model.config.num_hidden_layers == 5
    assert torch.isfinite(outputs(model, token_ids())).all()
