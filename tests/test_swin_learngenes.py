"""Learngenes of a Swin (issue 21, item 2): TLEG, WAVE and PEG stage by
stage (`lgcli.learngenes.stages`), as the PEG paper applies its mixtures to
Swin. Formulas checked entry by entry on a tiny Swin, descendants loaded
strictly by timm (and transformers) and run."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
import lgcli.sizing
from lgcli.learngenes import GeneratedModel, get_kind
from lgcli.learngenes.stages import StagedKind
from lgcli.options import resolve_options
from lgcli.sizing import spec_at_depth

from conftest import printed_model
from test_swin import make_swin

# A tiny Swin that takes the built-in Fashion-MNIST images (1 x 28 x 28, 10
# classes): two stages of head dim 8, windows of 7 (stage 1 is one window).
SWIN = dict(embed_dim=16, depths=(2, 2), num_heads=(2, 4), img_size=28, patch_size=2, window_size=7, in_chans=1,
            num_classes=10)
FAST = ["--data", "fashion-mnist-mini", "--batch-size", "16", "--subset", "64", "--test-subset", "32"]


def images(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 1, 28, 28, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def swin(tmp_path_factory):
    model = make_swin(**SWIN)  # every parameter random and non-trivial
    path = tmp_path_factory.mktemp("swin") / "swin.safetensors"
    lgcli.save_model(model, path)
    return model, path


@pytest.fixture(scope="module")
def tleg_gene(swin, tmp_path_factory):
    """A TLEG learngene condensed from the Swin through the CLI (from random
    weights, so its A and B are what training made, not the teacher's line)."""
    from conftest import run_lg_inproc

    out = tmp_path_factory.mktemp("tleg") / "swin.tleg.safetensors"
    result = run_lg_inproc("condense", swin[1], "--method", "tleg", "--init", "random", "--depths", "1-3",
                           "--steps", "3", *FAST, "-o", out, "--json")
    assert result.code == 0, result.stderr
    return out, json.loads(result.stdout)


@pytest.fixture(scope="module")
def peg_gene(swin, tmp_path_factory):
    from conftest import run_lg_inproc

    out = tmp_path_factory.mktemp("peg") / "swin.peg.safetensors"
    result = run_lg_inproc("condense", swin[1], "--method", "peg", "--seed", "3", "-o", out)
    assert result.code == 0, result.stderr
    return out


def test_tleg_warm_start_is_each_stages_line_and_keeps_the_logits(swin):
    """--init ancestry per stage: A and B are the least-squares line through
    the stage's blocks (TLEG Eq. 1 read backwards), which a stage of two
    blocks fits exactly, so the auxiliary model, run through the generated
    model (timm's forward with the stages' built weights), is the teacher."""
    model, path = swin
    loaded = lgcli.load(path)
    kind = get_kind("tleg", loaded.spec)
    assert isinstance(kind, StagedKind)
    options = resolve_options("tleg", kind.condense_options, {})
    stack = loaded.stack.materialized()
    trainable, frozen = kind.initial(loaded.spec, stack, options, torch.Generator().manual_seed(0), ancestry=stack)
    assert not frozen
    for index, stage in enumerate(stack.stages):
        q = stage.layers["q"].data.double()
        # x_l = (l - 1) / L for L = 2: x = 0, 1/2; the line through two points.
        slope, base = (q[1] - q[0]) / 0.5, q[0]
        assert torch.allclose(trainable[f"stage{index}.A.q"].double(), slope, atol=1e-5)
        assert torch.allclose(trainable[f"stage{index}.B.q"].double(), base, atol=1e-6)
        for role, named in stage.globals.items():
            assert torch.equal(trainable[f"stage{index}.global.{role}"], named.data.float())
    generated = GeneratedModel(loaded.spec, kind.build, trainable, frozen).eval()
    with torch.no_grad():
        assert torch.allclose(generated(images()), model(images()), atol=1e-4)


def test_a_drawn_depth_is_the_deepest_stages():
    four = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, embed_dim=16, depths=(1, 1, 2, 1),
                             num_heads=(2, 4, 8, 16), img_size=32, patch_size=2, window_size=4, num_classes=3)
    from lgcli.arch import get_adapter

    spec, _ = get_adapter("swin").to_stack(four.state_dict(), config={"img_size": 32})
    assert [s.depth for s in spec_at_depth(spec, 4).stages] == [1, 1, 4, 1]
    kind = get_kind("tleg", spec)
    # The default range is 2 to twice the deepest stage's depth (2), not the model's 5 blocks.
    assert kind.training_depths(spec, resolve_options("tleg", kind.condense_options, {})) == (2, 3, 4)


def test_tleg_condensed_and_grown_per_stage(tleg_gene, tmp_path, lg):
    """Each stage's descendant blocks are B_s + ((l - 1) / L_s) A_s, entry by
    entry; the output loads strictly by the printed timm line and runs."""
    path, report = tleg_gene
    assert report["options"]["depths"] == "1-3" and report["auxiliary"]["stages"][1]["depth"] == 2
    out = tmp_path / "grown.safetensors"
    result = lg("grow", path, "--depth", "1,3", "-o", out)
    assert result.code == 0, result.stderr
    gene = lgcli.load_learngene(path)
    grown = lgcli.load(out)
    assert [s.depth for s in grown.spec.stages] == [1, 3]
    for index, depth in enumerate((1, 3)):
        a, b = gene.tensors[f"stage{index}.A.fc1"], gene.tensors[f"stage{index}.B.fc1"]
        built = grown.stack.stages[index].layers["fc1"].data
        for layer in range(depth):
            expected = b + (layer / depth) * a
            assert torch.allclose(built[layer].float(), expected, atol=1e-6), (index, layer)
        for role in gene.tensors:
            if role.startswith(f"stage{index}.global."):
                name = role.split(".", 2)[2]
                assert torch.equal(grown.stack.stages[index].globals[name].data.float(), gene.tensors[role])
    model = printed_model(out)
    assert model.layers[1].blocks.__len__() == 3 and torch.isfinite(model(images())).all()


def test_peg_samples_each_stage_by_hand(swin, peg_gene):
    """Stage s, ancestry layer a: learngene head h = sum_i p[a, h, i] head i
    of q (rows) and o (columns), and of the relative position table (one
    column per head, mixed with its head's weights); FFN l = sum_k p[l, k] FFN k."""
    model, _ = swin
    gene = lgcli.load_learngene(peg_gene)
    assert [s["learngene_heads"] for s in gene.sizes["stages"]] == [1, 2]
    d = 8
    for index, stage in enumerate(model.layers):
        heads_a = stage.blocks[0].attn.num_heads
        mix = gene.tensors[f"stage{index}.mix.heads"]
        assert mix.shape == (2, heads_a // 2, heads_a)
        for a, block in enumerate(stage.blocks):
            q = block.attn.qkv.weight.detach()[: heads_a * d]
            table = block.attn.relative_position_bias_table.detach()
            o = block.attn.proj.weight.detach()
            for h in range(heads_a // 2):
                want_q = sum(mix[a, h, i] * q[i * d:(i + 1) * d] for i in range(heads_a))
                got_q = gene.tensors[f"stage{index}.msa.q"][a][h * d:(h + 1) * d]
                assert torch.allclose(got_q, want_q, atol=1e-6)
                want_table = sum(mix[a, h, i] * table[:, i] for i in range(heads_a))
                assert torch.allclose(gene.tensors[f"stage{index}.msa.rel_pos_bias"][a][:, h], want_table, atol=1e-6)
                want_o = sum(mix[a, h, i] * o[:, i * d:(i + 1) * d] for i in range(heads_a))
                assert torch.allclose(gene.tensors[f"stage{index}.msa.o"][a][:, h * d:(h + 1) * d], want_o, atol=1e-6)
        ffn = gene.tensors[f"stage{index}.mix.ffn"]
        want_fc1 = sum(ffn[0, k] * stage.blocks[k].mlp.fc1.weight.detach() for k in range(2))
        assert torch.allclose(gene.tensors[f"stage{index}.ffn.fc1"][0], want_fc1, atol=1e-6)


@pytest.mark.parametrize("size", [["--depth", "3"], ["--depth", "1,3", "--width", "24"], ["--width", "8"]])
def test_peg_descendants_load_strictly_in_timm(peg_gene, tmp_path, lg, size):
    out = tmp_path / "grown.safetensors"
    result = lg("grow", peg_gene, *size, "-o", out)
    assert result.code == 0, result.stderr
    model = printed_model(out)
    width = int(size[size.index("--width") + 1]) if "--width" in size else 16
    assert model.embed_dim == width and [b.attn.num_heads for b in (s.blocks[0] for s in model.layers)] == \
        [width // 8, 2 * width // 8]
    assert torch.isfinite(model(images())).all()


def test_peg_phi_fitted_on_a_swin_leaves_the_learngene_unchanged(peg_gene, tmp_path, lg):
    """φ is fitted through the whole Swin's forward pass, every stage's part
    at once; the learngene file is untouched and the descendant differs
    from the unfitted one."""
    before = peg_gene.read_bytes()
    fitted, unfitted = tmp_path / "fitted.safetensors", tmp_path / "unfitted.safetensors"
    result = lg("grow", peg_gene, "--depth", "3", "--steps", "4", *FAST[:2], "--subset", "64", "-o", fitted, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    assert details["fitted"] is True and len(details["stages"]) == 2
    assert lg("grow", peg_gene, "--depth", "3", "-o", unfitted).code == 0
    assert peg_gene.read_bytes() == before
    a, b = lgcli.load(fitted).stack.stages[1], lgcli.load(unfitted).stack.stages[1]
    assert not torch.equal(a.layers["q"].data, b.layers["q"].data)
    assert torch.isfinite(printed_model(fitted)(images())).all()


def test_hf_swin_folder_gives_a_peg_learngene_transformers_loads(tmp_path, lg):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.SwinConfig(embed_dim=16, depths=[2, 2], num_heads=[2, 4], image_size=28, patch_size=2,
                                     window_size=7, num_labels=10, num_channels=1)
    folder = tmp_path / "hf-swin"
    transformers.SwinForImageClassification(config).save_pretrained(folder)
    gene, out = tmp_path / "peg.safetensors", tmp_path / "grown"
    assert lg("condense", folder, "--method", "peg", "-o", gene).code == 0
    result = lg("grow", gene, "--depth", "3", "--width", "24", "-o", out)
    assert result.code == 0, result.stderr
    model, info = transformers.SwinForImageClassification.from_pretrained(out, output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"])
    assert model.config.embed_dim == 24 and list(model.config.depths) == [2, 3]
    with torch.no_grad():
        assert model(pixel_values=images()).logits.shape == (2, 10)


def test_tleg_width_change_refused_with_a_pipe_that_runs(tleg_gene, tmp_path, lg):
    path, _ = tleg_gene
    result = lg("grow", path, "--depth", "3", "--width", "24", "-o", tmp_path / "x.safetensors")
    assert result.code == 1 and len(result.stderr.strip().splitlines()) == 1
    # The pipe names this learngene and this output (issue 32: hints run as printed).
    assert f"lg grow {path} --depth 2,3 -o - | lg grow - --width 24 -o {tmp_path / 'x.safetensors'}" in result.stderr
    first = lg("grow", path, "--depth", "2,3", "-o", "-")
    assert first.code == 0, first.stderr
    out = tmp_path / "wide.safetensors"
    assert lg("grow", "-", "--width", "24", "-o", out, stdin=first.stdout).code == 0
    assert printed_model(out).embed_dim == 24


def test_wave_warm_start_per_stage_keeps_the_logits(swin):
    """WAVE's least-squares templates under Eq. B.1 (templates as wide as the
    stage: one at 1, one at l / L per block, TLEG's line, appendix Prop. 1)
    rebuild a stage of two blocks exactly, the position tables included (their
    window axis spanned whole by the templates): the auxiliary model is the
    teacher up to Eq. B.1's noise (1e-6)."""
    model, path = swin
    loaded = lgcli.load(path)
    kind = get_kind("wave", loaded.spec)
    stack = loaded.stack.materialized()
    options = resolve_options("wave", kind.condense_options, {})
    trainable, frozen = kind.initial(loaded.spec, stack, options, torch.Generator().manual_seed(0), ancestry=stack)
    assert trainable["stage1.T.rel_pos_bias"].shape[1:] == stack.stages[1].layers["rel_pos_bias"].data.shape[1:]
    generated = GeneratedModel(loaded.spec, kind.build, trainable, frozen).eval()
    with torch.no_grad():
        assert torch.allclose(generated(images()), model(images()), atol=1e-3)


@pytest.fixture(scope="module")
def wave_gene(swin, tmp_path_factory):
    from conftest import run_lg_inproc

    out = tmp_path_factory.mktemp("wave") / "swin.wave.safetensors"
    result = run_lg_inproc("condense", swin[1], "--method", "wave", "--template-dim", "8", "--steps", "3", *FAST,
                           "-o", out)
    assert result.code == 0, result.stderr
    return out


def test_wave_grows_each_stage_by_eq_4(wave_gene):
    """At twice the width, each stage's weights are Eq. 4's sum of templates
    (x) scalers, the position table's heads tiled with the rest; the patch
    merging's input (the previous stage's width) is widened as the globals'
    `embed` axis is (interleave, a linear input divided by its copies)."""
    from lgcli.learngenes.wave import kronecker_sum
    from lgcli.learngenes.widen import widen_index

    gene = lgcli.load_learngene(wave_gene)
    target = lgcli.sizing.target_spec(gene.spec, depth=[1, 3], width=32)
    kind = get_kind("wave", gene.spec)
    options = resolve_options("wave", kind.expand_options, {})
    model = kind.prepare(gene, target, options, seed=0)
    built = model.materialise()
    tensors = model.tensors()
    for index in range(2):
        table = kronecker_sum(tensors[f"stage{index}.T.rel_pos_bias"], tensors[f"stage{index}.S.rel_pos_bias"])
        assert torch.equal(built.stages[index].layers["rel_pos_bias"].data, table)
        assert table.shape[1:] == (169, target.stages[index].heads)  # (2 x 7 - 1)^2 positions
    merge = gene.tensors["stage1.global.merge_weight"]  # (64 embed, 4 neighbours, 32 from stage 0)
    embed, inputs = widen_index(32, 64, "interleave"), widen_index(16, 32, "interleave")
    expected = merge[embed][:, :, inputs] / 2
    assert torch.equal(built.stages[1].globals["merge_weight"].data, expected)


def test_wave_descendants_load_strictly_in_timm(wave_gene, tmp_path, lg):
    for size in (["--depth", "3"], ["--depth", "1,3", "--width", "24"]):
        out = tmp_path / "grown.safetensors"
        result = lg("grow", wave_gene, *size, "-o", out, "--force")
        assert result.code == 0, result.stderr
        assert torch.isfinite(printed_model(out)(images())).all()
    fitted = tmp_path / "fitted.safetensors"
    result = lg("grow", wave_gene, "--depth", "3", "--steps", "3", "--data", "fashion-mnist-mini", "--subset", "64",
                "-o", fitted, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["details"]["fitted"] is True
    assert torch.isfinite(printed_model(fitted)(images())).all()


def test_a_method_given_to_a_swin_wave_learngene_is_hinted_with_its_depths_per_stage(wave_gene, tmp_path, lg):
    """`--method` on a WAVE learngene of stages is refused with commands
    that name each stage's depth (2,2) and, run as printed, write the size."""
    from printed import run_printed

    out = tmp_path / "hinted.safetensors"
    result = lg("grow", wave_gene, "--width", "8", "--method", "select", "-o", out)
    line = result.stderr.strip()
    assert result.code == 2 and not out.exists() and "--method does not apply" in line
    command = line[line.index(": lg grow ") + 2:]
    assert f"lg grow {wave_gene} --depth 2,2 -o - | lg shrink - --method select --depth 2,2 --width 8" in command
    done = run_printed(command)  # as a shell reads it
    assert done.code == 0, (command, done.stderr)
    stages = lgcli.inspect_checkpoint(out)["stages"]
    assert [(stage["depth"], stage["width"]) for stage in stages] == [(2, 8), (2, 16)]


def test_inspect_a_swin_learngene(tleg_gene, lg):
    path, _ = tleg_gene
    report = json.loads(lg("inspect", path, "--json").stdout)
    assert [s["width"] for s in report["stages"]] == [16, 32] and report["family"] == "swin"
    params = report["parameters"]
    assert params["globals"] > 0 and params["learngene"] + params["globals"] == params["total"]
    text = lg("inspect", path).stdout.decode()
    assert "depths 2,2, widths 16,32, heads 2,4" in text


def test_peg_scored_at_its_own_shape_on_a_swin(swin, tmp_path, lg):
    """With --data, a PEG learngene of a Swin is scored as a Swin of its own
    shape, stage by stage: each stage its sampled FFNs deep and its sampled
    heads wide (at the stage's head dim)."""
    result = lg("condense", swin[1], "--method", "peg", "--data", "fashion-mnist-mini", "--test-subset", "32",
                "-o", tmp_path / "peg.safetensors", "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    shape = [(s["depth"], s["width"], s["heads"]) for s in report["auxiliary"]["stages"]]
    assert shape == [(1, 8, 1), (1, 16, 2)]  # half of (2, 2) blocks and (2, 4) heads of dim 8
    assert 0 <= report["accuracy"]["top1"] <= 100 and report["test_images"] == 32


@pytest.mark.parametrize("method", ["wave", "sws"])
def test_drawn_depths_condense_a_swin_per_stage(swin, method, tmp_path, lg):
    # --depths draws the deepest stage's depth (the others keep theirs); each stage records its sizes.
    extra = ["--template-dim", "8"] if method == "wave" else []
    gene = tmp_path / f"{method}.lg.safetensors"
    result = lg("condense", str(swin[1]), "--method", method, *extra, "--depths", "1-3", "--steps", "2", *FAST,
                "-o", str(gene))
    assert result.code == 0, result.stderr
    out = tmp_path / "d3.safetensors"
    grown = lg("grow", str(gene), "--depth", "3", "-o", str(out), "--json")
    assert grown.code == 0, grown.stderr
    stages = json.loads(grown.stdout)["details"]["stages"]
    if method == "wave":
        assert [s["scalers"] for s in stages] == ["the auxiliary model's, as condensed",
                                                  "the auxiliary model's, resampled from depth 2 to 3"]
    else:
        assert [s["depth"] for s in stages] == [2, 3]
    model = printed_model(out)
    assert sum(len(layer.blocks) for layer in model.layers) == 5 and torch.isfinite(model(images())).all()
