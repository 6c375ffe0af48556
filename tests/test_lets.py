"""LeTs (learnable transformations of a compact learngene; SPEC.md "LeTs",
lgcli/learngenes/lets.py): the expansion checked entry by entry on a
hand-made case, descendants that load strictly in timm and transformers and
run, the same bytes for the same seed, the refusal of an untrained size and
the --method way to it, and a few condensing steps."""

from __future__ import annotations

import json

import pytest
import timm
import torch

import lgcli
from lgcli.learngenes.lets import KIND as LETS
from lgcli.learngenes.lets import initial_depth_map
from lgcli.stack import ArchSpec

from conftest import sample_input
from printed import run_printed

TEACHER = dict(depth=4, embed_dim=64, num_heads=4, patch_size=7, img_size=28, in_chans=1, num_classes=10)
FAST = ["--batch-size", "16", "--subset", "64", "--test-subset", "32"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **TEACHER).eval()
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model, path)
    return path


@pytest.fixture(scope="module")
def gene(teacher, tmp_path_factory):
    """A LeTs learngene of 2 layers at width 32, trained at widths 32, 64 and depths 2-5 (3 steps)."""
    from conftest import run_lg_inproc

    path = tmp_path_factory.mktemp("gene") / "lets.lg.safetensors"
    result = run_lg_inproc("condense", str(teacher), "--method", "lets", "--widths", "32,64", "--depths", "2-5",
                           "--gene-depth", "2", "--data", "fashion-mnist-mini", *FAST, "--steps", "3",
                           "-o", str(path), "--json")
    assert result.code == 0, result.stderr
    return path


# ---------------------------------------------------------------- the formula by hand

def _hand_made(gene_depth: int = 2):
    """A learngene of width 2 (2 heads of dim 1, MLP 4) for a ViT of width 4
    (4 heads, MLP 8): every tensor a distinct ramp, every map hand-set."""
    spec = ArchSpec(family="vit", depth=3, width=4, heads=4, head_dim=1, mlp_dim=8)
    g = torch.Generator().manual_seed(7)

    def ramp(*shape):
        return torch.randn(shape, generator=g)

    tensors = {}
    for k in range(gene_depth):
        tensors.update({f"G{k}.q": ramp(2, 2), f"G{k}.k": ramp(2, 2), f"G{k}.v": ramp(2, 2), f"G{k}.o": ramp(2, 2),
                        f"G{k}.fc1": ramp(4, 2), f"G{k}.fc2": ramp(2, 4), f"G{k}.fc2_bias": ramp(2),
                        f"G{k}.fc1_bias": ramp(4), f"G{k}.norm1_weight": ramp(2),
                        f"width{k}.attn": ramp(2, 2), f"width{k}.kv": ramp(2, 2), f"width{k}.mlp": ramp(4, 4)})
    tensors["width.embed"] = ramp(2, 2)
    for depth in (2, 3):
        for role in ("q", "k", "v", "o", "fc1", "fc2", "fc2_bias", "fc1_bias", "norm1_weight"):
            tensors[f"depth{depth}.{role}"] = ramp(depth, gene_depth)
    tensors["global.pos_embed"] = ramp(1, 5, 2)
    tensors["global.head_weight"] = ramp(3, 2)
    return spec, tensors


def _lift(map_rows: torch.Tensor, held: int, asked: int):
    """P = [I; F[:asked - held]] as a list of rows, entry by entry."""
    return [[1.0 if r == i else 0.0 for i in range(held)] if r < held else
            [float(map_rows[r - held, i]) for i in range(held)] for r in range(asked)]


def test_the_expansion_formula_entry_by_entry():
    spec, tensors = _hand_made()
    for width in (4, 3):  # the auxiliary width, and a narrower one (the first rows of every map)
        target = spec.with_sizes(width=width, heads=width, mlp_dim=2 * width)
        built = LETS.build(tensors, target)
        embed = _lift(tensors["width.embed"], 2, width)
        for role, out_map, in_map in (("q", "attn", "embed"), ("k", "kv", "embed"), ("o", "embed", "attn"),
                                      ("fc1", "mlp", "embed"), ("fc2", "embed", "mlp")):
            data = built.layers[role].data
            sizes = {"embed": width, "attn": width, "kv": width, "mlp": 2 * width}
            held = {"embed": 2, "attn": 2, "kv": 2, "mlp": 4}
            assert data.shape == (3, sizes[out_map], sizes[in_map])
            for layer in range(3):
                for r in range(sizes[out_map]):
                    for c in range(sizes[in_map]):
                        expected = 0.0
                        for k in range(2):
                            lifts = {"embed": embed, **{axis: _lift(tensors[f"width{k}.{axis}"], held[axis],
                                                                    sizes[axis]) for axis in ("attn", "kv", "mlp")}}
                            pout, pin, w = lifts[out_map], lifts[in_map], tensors[f"G{k}.{role}"]
                            # layer l = sum_k M[l, k] (P_out G_k P_in^T)[r, c]
                            expected += float(tensors[f"depth3.{role}"][layer, k]) * sum(
                                pout[r][i] * float(w[i, j]) * pin[c][j]
                                for i in range(held[out_map]) for j in range(held[in_map]))
                        assert abs(float(data[layer, r, c]) - expected) < 1e-5, (width, role, layer, r, c)
            for layer in range(3):  # a bias on the MLP axis, and a gain on the embed axis
                mlp = [_lift(tensors[f"width{k}.mlp"], 4, 2 * width) for k in range(2)]
                for r in range(2 * width):
                    expected = sum(float(tensors["depth3.fc1_bias"][layer, k]) *
                                   sum(mlp[k][r][i] * float(tensors[f"G{k}.fc1_bias"][i]) for i in range(4))
                                   for k in range(2))
                    assert abs(float(built.layers["fc1_bias"].data[layer, r]) - expected) < 1e-5
                for r in range(width):
                    expected = sum(float(tensors["depth3.norm1_weight"][layer, k]) *
                                   sum(embed[r][i] * float(tensors[f"G{k}.norm1_weight"][i]) for i in range(2))
                                   for k in range(2))
                    assert abs(float(built.layers["norm1_weight"].data[layer, r]) - expected) < 1e-5
        # Globals: the embedding map on their embed axis alone.
        head = built.globals["head_weight"].data
        for r in range(3):
            for c in range(width):
                expected = sum(float(tensors["global.head_weight"][r, j]) * embed[c][j] for j in range(2))
                assert abs(float(head[r, c]) - expected) < 1e-5
        pos = built.globals["pos_embed"].data
        assert pos.shape == (1, 5, width)
        assert torch.equal(pos[..., :2], tensors["global.pos_embed"])  # the learngene's own channels come first


def test_a_narrower_descendant_is_the_nested_slice_of_a_wider_one():
    spec, tensors = _hand_made()
    wide = LETS.build(tensors, spec.with_sizes(depth=2))
    narrow = LETS.build(tensors, spec.with_sizes(depth=2, width=3, heads=3, mlp_dim=6))
    assert torch.allclose(narrow.layers["fc2"].data, wide.layers["fc2"].data[:, :3, :6], atol=1e-6)
    assert torch.allclose(narrow.layers["q"].data, wide.layers["q"].data[:, :3, :3], atol=1e-6)


def test_the_depth_maps_start_one_hot_at_the_sws_layer_with_noise_and_sum_to_one():
    maps = initial_depth_map(5, 2, torch.Generator().manual_seed(0))
    assert torch.allclose(maps.sum(-1), torch.ones(5))
    # The SWS rule puts layers 0, 1 | 2 (b(1) = floor(5/2 + 1/2) = 3: 0, 1, 2) ... in learngene layers 0 and 1.
    assert maps.argmax(-1).tolist() == [0, 0, 0, 1, 1]
    assert (maps.max(-1).values > 0.95).all() and (maps.min(-1).values >= 0).all()


# ---------------------------------------------------------------- condense, grow, inspect

def test_condensing_writes_a_learngene_that_inspect_describes(gene, lg):
    learngene = lgcli.load_learngene(gene)
    assert learngene.sizes["gene_depth"] == 2 and learngene.sizes["gene_width"] == 32
    assert learngene.sizes["widths"] == [32, 64] and learngene.sizes["depths"] == [2, 3, 4, 5]
    assert learngene.tensors["G1.fc1"].shape == (128, 32)  # the compact learngene: MLP ratio 4 at width 32
    assert learngene.tensors["width.embed"].shape == (32, 32) and learngene.tensors["width0.mlp"].shape == (128, 128)
    assert learngene.tensors["depth5.q"].shape == (5, 2)
    report = json.loads(lg("inspect", str(gene), "--json").stdout)
    assert report["trained_at"] == {"widths": [32, 64], "depths": "2-5"}
    assert report["depths"] == [2, 3, 4, 5]


def test_a_few_steps_lower_the_loss_and_the_same_seed_gives_the_same_bytes(teacher, tmp_path, lg):
    runs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.lg.safetensors"
        result = lg("condense", str(teacher), "--method", "lets", "--init", "random", "--depths", "4",
                    "--lr", "3e-3", "--data", "fashion-mnist-mini", *FAST, "--steps", "5", "-o", str(out), "--json")
        assert result.code == 0, result.stderr
        runs.append((out.read_bytes(), json.loads(result.stdout)))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1]["loss_last"] < runs[0][1]["loss_first"]


def test_descendants_load_strictly_in_timm_and_run(gene, tmp_path, lg):
    learngene = lgcli.load_learngene(gene)
    for depth, width in ((2, 32), (5, 64), (3, 64)):
        out = tmp_path / f"d{depth}w{width}.safetensors"
        grown = lg("grow", str(gene), "--depth", str(depth), "--width", str(width), "-o", str(out), "--json")
        assert grown.code == 0, grown.stderr
        report = lgcli.inspect_checkpoint(out)
        model = eval(report["load_call"].replace("'" + str(out) + "'", repr(str(out))), {"timm": timm})
        assert len(model.blocks) == depth and model.embed_dim == width
        assert torch.isfinite(model(sample_input(model))).all()
        # What was written is the learned maps' output (LETS.build of the file's tensors).
        built = LETS.build(learngene.tensors, lgcli.load(out).spec)
        assert torch.equal(lgcli.load(out).stack.materialized().layers["fc1"].data, built.layers["fc1"].data)


def test_an_untrained_size_is_refused_in_one_line_and_reached_with_method(gene, tmp_path, lg):
    out = tmp_path / "no.safetensors"
    for args in (("--depth", "8"), ("--depth", "3", "--width", "48")):
        refused = lg("grow", str(gene), *args, "-o", str(out))
        assert refused.code != 0 and "\n" not in refused.stderr.strip() and "Traceback" not in refused.stderr
        assert "trained at widths 32 (2 heads, MLP 128), 64 (4 heads, MLP 256) and depths 2-5" in refused.stderr
        assert not out.exists()
    deep = tmp_path / "deep.safetensors"
    result = lg("grow", str(gene), "--depth", "8", "--width", "48", "--method", "bot", "-o", str(deep))
    assert result.code == 0, result.stderr
    assert "depth 5, then grow to depth 8, width 48 by bot" in result.stderr  # from depth 5, width 32
    spec = lgcli.load(deep).spec
    assert (spec.depth, spec.width) == (8, 48)
    same = lg("grow", str(gene), "--depth", "4", "--width", "64", "--method", "bot", "-o", str(out))
    assert same.code != 0 and "--method does not apply" in same.stderr


def test_a_model_of_stages_is_refused_in_one_line(tmp_path, lg):
    model = timm.create_model("swin_tiny_patch4_window7_224", embed_dim=16, depths=(1, 1), num_heads=(1, 2),
                              img_size=28, patch_size=2, window_size=7, in_chans=1, num_classes=10)
    src = tmp_path / "swin.safetensors"
    lgcli.save_model(model, src)
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", str(src), "--method", "lets", "--data", "fashion-mnist-mini", *FAST, "--steps", "1",
                "-o", str(out))
    assert result.code != 0 and "model of stages" in result.stderr and "\n" not in result.stderr.strip()
    assert not out.exists()


# ---------------------------------------------------------------- transformers

@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2-lm", "bert-mlm"])
def test_a_lets_learngene_of_a_text_model_grows_into_folders_transformers_loads(variant, tmp_path, lg):
    from text_models import load_strict, make_model, outputs, save_folder, token_ids

    folder = save_folder(make_model(variant), tmp_path / "src", variant)
    if variant.startswith("bert"):  # a masked LM is scored with its tokenizer's mask token (a word of its vocabulary)
        (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": "w4"}))
    gene = tmp_path / "lets.lg.safetensors"
    result = lg("condense", str(folder), "--method", "lets", "--depths", "2-4", "--widths", "16,32", "--data",
                "kjv-mini", "--steps", "2", "--batch-size", "4", "--seq-len", "12", "-o", str(gene))
    assert result.code == 0, result.stderr
    for depth, width in ((4, 32), (2, 16)):
        out = tmp_path / f"grown{depth}x{width}"
        grown = lg("grow", str(gene), "--depth", str(depth), "--width", str(width), "-o", str(out))
        assert grown.code == 0, grown.stderr
        model = load_strict(out, variant)
        assert model.config.num_hidden_layers == depth and model.config.hidden_size == width
        assert torch.isfinite(outputs(model, token_ids())).all()


def test_a_lets_learngene_of_a_hugging_face_vit_grows_into_a_folder_transformers_loads(tmp_path, lg):
    import transformers

    from hf_image_models import load_strict as load_hf, non_trivial

    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    image_size=16, patch_size=4, num_labels=10, num_channels=1)
    torch.manual_seed(0)
    teacher = tmp_path / "teacher"
    non_trivial(transformers.ViTForImageClassification(config)).save_pretrained(teacher)
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5],
                                   image_std=[0.5]).save_pretrained(teacher)
    gene = tmp_path / "lets.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "lets", "--depths", "1-3", "--data", "fashion-mnist-mini",
                *FAST, "--steps", "2", "-o", str(gene))
    assert result.code == 0, result.stderr
    out = tmp_path / "grown"
    assert lg("grow", str(gene), "--depth", "3", "-o", str(out)).code == 0, "grow"
    model = load_hf(out, "ViTForImageClassification")
    assert model.config.num_hidden_layers == 3 and model.config.hidden_size == 32
    with torch.no_grad():
        assert torch.isfinite(model(pixel_values=torch.randn(2, 1, 16, 16)).logits).all()


def test_fitted_width_maps_recover_channels_that_are_combinations_of_the_kept_ones():
    from lgcli.learngenes.lets import fitted_width_maps
    from lgcli.stack import Named

    g = torch.Generator().manual_seed(3)
    kept = torch.randn(3, 40, generator=g)
    truth = torch.randn(2, 3, generator=g)  # channels 3 and 4 are truth @ channels 0..2
    fc1 = Named(torch.cat([kept, truth @ kept]).reshape(5, 8, 5), ("mlp", "embed", "-"))
    fitted = fitted_width_maps({"width0.mlp": (2, 3)}, {0: [fc1]}, [])
    assert torch.allclose(fitted["width0.mlp"], truth, atol=1e-2)  # up to the small ridge


def test_fitted_width_maps_without_the_teacher_are_refused_in_one_line(teacher, tmp_path, lg):
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "lets", "--init", "random", "--width-maps", "fit",
                "--data", "fashion-mnist-mini", *FAST, "--steps", "1", "-o", str(out))
    assert result.code != 0 and "--width-maps fit" in result.stderr and "\n" not in result.stderr.strip()
    assert not out.exists()


def test_the_grow_hint_names_the_depths_it_was_trained_at_and_runs_as_printed(gene, tmp_path, lg):
    """A LeTs learngene builds only the depths it was trained at, so the
    comment of the line `lg inspect` prints says those, not "any depth"."""
    hint = json.loads(lg("inspect", str(gene), "--json").stdout)["expand_call"]
    assert hint == f"lg grow {gene} --depth 4 --width 32 -o lets-depth4-width32.safetensors  # depths 2-5; " \
                   f"trained widths 32, 64"
    ran = run_printed(hint, tmp_path)
    assert ran.code == 0, ran.stderr
    spec = lgcli.load(tmp_path / "lets-depth4-width32.safetensors").spec
    assert (spec.depth, spec.width) == (4, 32)
