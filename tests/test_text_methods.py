"""Every resize method on every text family, through the CLI: the folder
written loads strictly with from_pretrained, at the sizes asked, and
computes finite outputs; clone keeps the logits of GPT-2 and Llama."""

from __future__ import annotations

import json

import pytest
import torch

from lgcli.methods import METHODS

from text_models import Sources, load_strict, outputs, relative_error, token_ids

# One source per family, with room to shrink and grow by ratios that are not
# powers of two: 4 layers, width 64 (head dim 8 for GPT-2 and Llama, 16 for BERT).
FAMILIES = {
    "gpt2": ("gpt2-lm", dict(n_layer=4, n_embd=64, n_head=8)),
    "llama-gqa": ("llama-gqa", dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=8,
                                    num_key_value_heads=4, intermediate_size=96)),
    "bert": ("bert-mlm", dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                              intermediate_size=128)),
}
HEAD_DIM = {"gpt2": 8, "llama-gqa": 8, "bert": 16}
CHANGES = {
    "shrink": {"depth": dict(depth=3), "width": dict(width=48), "both": dict(depth=3, width=48)},
    "grow": {"depth": dict(depth=6), "width": dict(width=96), "both": dict(depth=6, width=96)},
}
# clone grows BERT's width (post-norm) by whole multiples only: one set of sizes for every family.
CLONE_CHANGES = {"depth": dict(depth=6), "width": dict(width=128), "both": dict(depth=6, width=128)}


# The methods that change depth only (tests/test_llm_growth.py tests their
# refusals) at a depth each reaches: stack grows by whole copies of 4 layers.
DEPTH_ONLY_CHANGES = {"stack": dict(depth=8)}


def cases():
    for method, m in METHODS.items():
        for direction in m.directions:
            changes = CLONE_CHANGES if method == "clone" else CHANGES[direction]
            for what, sizes in changes.items():
                if (method == "tleg-fit" or m.depth_only) and what != "depth":
                    continue  # depth only: its refusal of a width is tested below
                sizes = DEPTH_ONLY_CHANGES.get(method, sizes)
                for family in FAMILIES:
                    if method == "identity-insert" and family == "bert":
                        continue  # post-norm: refused (tests/test_llm_growth.py)
                    yield pytest.param(method, direction, family, sizes, id=f"{method}-{direction}-{what}-{family}")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    built = Sources(tmp_path_factory)
    return lambda family: built(FAMILIES[family][0], **FAMILIES[family][1])


def config_sizes(config) -> dict[str, int]:
    heads = config.num_attention_heads
    return {"depth": config.num_hidden_layers, "width": config.hidden_size, "heads": heads,
            "kv_heads": getattr(config, "num_key_value_heads", None) or heads,
            "mlp": getattr(config, "intermediate_size", None) or config.n_inner or 4 * config.hidden_size}


@pytest.mark.parametrize("method, direction, family, sizes", list(cases()))
def test_method_writes_a_folder_that_loads(method, direction, family, sizes, sources, lg, tmp_path):
    src, model = sources(family)
    variant = FAMILIES[family][0]
    out = tmp_path / "out"
    args = [f"--{k}={v}" for k, v in sizes.items()]
    if METHODS[method].calibrated:  # the data-aware methods measure the source on text of its tokenizer
        text = tmp_path / "calibrate.txt"
        text.write_text(" ".join(f"w{3 + (7 * i) % 90}" for i in range(3000)))
        args += ["--calibrate", str(text), "--calibrate-samples", "4", "--calibrate-seq-len", "16"]
    result = lg(direction, src, "--method", method, *args, "--json", "-o", out)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["method"] == method

    reloaded = load_strict(out, variant)
    before = config_sizes(model.config)
    after = config_sizes(reloaded.config)
    depth = sizes.get("depth", before["depth"])
    width = sizes.get("width", before["width"])
    heads = width // HEAD_DIM[family]              # the head dim is kept
    group = before["heads"] // before["kv_heads"]  # and so is the GQA group
    assert after == {"depth": depth, "width": width, "heads": heads, "kv_heads": heads // group,
                     "mlp": before["mlp"] * width // before["width"]}
    assert report["target"]["depth"] == depth and report["target"]["width"] == width
    assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    logits = outputs(reloaded, token_ids())
    assert logits.shape[-1] == model.config.vocab_size
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tleg_fit_refuses_a_width_in_one_line(family, sources, lg, tmp_path):
    src, _ = sources(family)
    result = lg("grow", src, "--method", "tleg-fit", "--width", "128", "-o", tmp_path / "out")
    assert result.code != 0 and result.stderr.startswith("lg: error: tleg-fit changes depth only")
    assert result.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- clone keeps the function

CLONE_VARIANTS = ["gpt2-lm", "llama-mha", "llama-gqa", "llama-tied", "qwen2", "mistral", "llama-biases",
                  "llama-head-dim"]
CLONE_GROWTH = {"width-x2": ["--width", "64"], "depth+2": ["--depth", "5"],
                "both": ["--width", "64", "--depth", "5"], "width-x3-top": ["--width", "96", "--depth", "4",
                                                                            "--insert", "top"]}


@pytest.fixture(scope="module")
def small_sources(tmp_path_factory):
    return Sources(tmp_path_factory)


def clone_cases():
    for variant in CLONE_VARIANTS:
        for growth in sorted(CLONE_GROWTH):
            yield pytest.param(variant, growth, id=f"{variant}-{growth}")


@pytest.mark.parametrize("variant, growth", list(clone_cases()))
def test_clone_keeps_the_logits(variant, growth, small_sources, lg, tmp_path):
    src, model = small_sources(variant)
    out = tmp_path / "out"
    result = lg("grow", src, "--method", "clone", *CLONE_GROWTH[growth], "-o", out)
    assert result.code == 0, result.stderr
    grown = load_strict(out, variant)
    assert grown.config.hidden_size in (32, 64, 96) and grown.config.num_hidden_layers in (3, 4, 5)
    ids = token_ids()
    assert relative_error(outputs(grown, ids), outputs(model, ids)) <= 1e-4


@pytest.mark.parametrize("tied", [True, False])
def test_clone_keeps_bert_width(tied, small_sources, lg, tmp_path):
    """Width by repetition keeps a post-norm model's function too (LayerNorm
    of a tiled vector is the tiled LayerNorm); a tied decoder reads the
    transform's norm, divided by the factor, an untied one is a linear map
    of its own."""
    src, model = small_sources("bert-mlm", tie_word_embeddings=tied)
    out = tmp_path / "out"
    assert lg("grow", src, "--method", "clone", "--width", "64", "-o", out).code == 0
    ids = token_ids()
    assert relative_error(outputs(load_strict(out, "bert-mlm"), ids), outputs(model, ids)) <= 1e-4


def test_depth_only_keeps_an_explicit_head_dim(small_sources, lg, tmp_path):
    src, _ = small_sources("llama-head-dim")
    result = lg("shrink", src, "--depth", "2", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert load_strict(tmp_path / "out", "llama-head-dim").config.head_dim == 16


@pytest.mark.parametrize("width, heads, kv_heads", [(64, 8, 4), (16, 2, 1)])
def test_a_head_dim_apart_from_the_width_is_kept(width, heads, kv_heads, small_sources, lg, tmp_path):
    """4 heads of 16 over width 32 (attention twice the width): a width change
    keeps the head dim and the heads' ratio to the width, as the MLP's."""
    src, _ = small_sources("llama-head-dim")
    direction = "grow" if width > 32 else "shrink"
    result = lg(direction, src, "--width", width, "--method", "bot", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    config = load_strict(tmp_path / "out", "llama-head-dim").config
    assert (config.head_dim, config.num_attention_heads, config.num_key_value_heads) == (16, heads, kv_heads)


@pytest.mark.parametrize("variant", ["qwen2", "mistral", "llama-model", "gpt2-model", "bert-sentence-transformers"])
@pytest.mark.parametrize("direction, depth", [("shrink", 2), ("grow", 5)])
def test_other_layouts_change_depth(variant, direction, depth, small_sources, lg, tmp_path):
    """The default methods (select; clone, else auto-lg) on the other layouts: Qwen2's
    and Mistral's per-layer attention kinds follow the depth."""
    src, _ = small_sources(variant)
    result = lg(direction, src, "--depth", depth, "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    model = load_strict(tmp_path / "out", variant)
    assert model.config.num_hidden_layers == depth
    types = getattr(model.config, "layer_types", None)
    assert types is None or len(types) == depth
    assert torch.isfinite(outputs(model, token_ids())).all()


def test_clone_on_top_keeps_qwen2_sliding_layers(lg, tmp_path):
    from text_models import make_model, save_folder

    model = make_model("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=2)
    assert model.config.layer_types == ["full_attention", "full_attention", "sliding_attention"]
    src = save_folder(model, tmp_path / "src", "qwen2")
    out = tmp_path / "out"
    assert lg("grow", src, "--method", "clone", "--depth", "5", "--insert", "top", "-o", out).code == 0
    ids = torch.cat([token_ids()] * 2, dim=1)  # longer than the window
    assert relative_error(outputs(load_strict(out, "qwen2"), ids), outputs(model, ids)) <= 1e-4


def test_clone_interleaved_keeps_qwen2_sliding_layers(lg, tmp_path):
    """Interleaved, each copied layer lands at its relative position: exact."""
    from text_models import make_model, save_folder

    model = make_model("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=2)
    src = save_folder(model, tmp_path / "src", "qwen2")
    out = tmp_path / "out"
    assert lg("grow", src, "--method", "clone", "--depth", "6", "--width", "64", "-o", out).code == 0
    grown = load_strict(out, "qwen2")
    assert grown.config.layer_types[4] == "sliding_attention"
    ids = torch.cat([token_ids()] * 2, dim=1)
    assert relative_error(outputs(grown, ids), outputs(model, ids)) <= 1e-4
