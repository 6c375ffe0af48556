"""Hugging Face text models in and out: every family and variant reads and
writes back exactly, loads strictly with from_pretrained and computes the
same; inspect reports the right sizes and load line; tokenizer files travel;
pipes keep provenance; the quirks of real uploads (unprefixed GPT-2, saved
buffers, bf16) read and write; sharded outputs load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import save_file

import lgcli
from lgcli.api import save
from lgcli.checkpoint import read_bytes
from lgcli.resize import resize_file

from text_models import (POSITIONS, VARIANTS, Sources, companion_files, load_strict, make_model, metadata,
                         outputs, save_folder, token_ids, weights)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """variant -> (source folder, the model it holds), each built once."""
    return Sources(tmp_path_factory)


def assert_same_tensors(written: dict[str, torch.Tensor], source: dict[str, torch.Tensor]) -> None:
    """Same names, dtypes, shapes and bytes."""
    assert sorted(written) == sorted(source)
    for key, tensor in source.items():
        got = written[key]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, key
        assert got.contiguous().view(torch.uint8).equal(tensor.contiguous().view(torch.uint8)), key


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_read_write_is_exact_and_loads_strictly(variant, built, tmp_path):
    src, model = built(variant)
    ids = token_ids()
    loaded = lgcli.load(src)
    out = tmp_path / "out"
    save(out, loaded.spec, loaded.stack, source=loaded)

    assert_same_tensors(weights(out), weights(src))
    # The config states the same model (lg writes it sorted; the content is the source's).
    assert json.loads((out / "config.json").read_text()) == json.loads((src / "config.json").read_text())
    # Tokenizer, generation and sentence-transformers files: copied unchanged
    # (the pooling width is the source's, so even it is unchanged here).
    for name, data in companion_files(variant, model.config.hidden_size).items():
        assert (out / name).read_bytes() == data, name
    if (src / "generation_config.json").exists():
        assert (out / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()
    expected_files = {p.relative_to(src) for p in src.rglob("*") if p.is_file()} | {Path("README.md")}  # the card
    assert {p.relative_to(out) for p in out.rglob("*") if p.is_file()} == expected_files

    reloaded = load_strict(out, variant)
    assert torch.equal(outputs(reloaded, ids), outputs(model, ids))
    if VARIANTS[variant].model_class == "BertModel":
        with torch.no_grad():
            assert torch.equal(reloaded(input_ids=ids).pooler_output, model(input_ids=ids).pooler_output)
    # lg's own model of the folder computes the same too.
    mine, _ = lgcli.load_model(out)
    assert torch.equal(outputs(mine.eval(), ids), outputs(model, ids))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inspect_reports_sizes_and_the_load_line(variant, built, lg):
    src, model = built(variant)
    config = model.config
    result = lg("inspect", src, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    mlp = getattr(config, "intermediate_size", None) or config.n_inner or 4 * config.hidden_size
    assert report["family"] == VARIANTS[variant].family
    assert (report["depth"], report["width"], report["heads"], report["kv_heads"], report["head_dim"],
            report["mlp_dim"]) == (config.num_hidden_layers, config.hidden_size, heads, kv_heads, head_dim, mlp)
    assert report["heads_assumed"] is False
    assert report["architecture"] == VARIANTS[variant].model_class
    assert report["vocab_size"] == config.vocab_size
    assert report["max_positions"] == config.max_position_embeddings  # RoPE's too: how far the model reads
    has_head = VARIANTS[variant].auto_class != "AutoModel"
    assert report["tied_embeddings"] == (config.tie_word_embeddings if has_head else None)
    state = model.state_dict()
    tied = set(model.all_tied_weights_keys or {})
    assert report["parameters"]["total"] == sum(v.numel() for k, v in state.items() if k not in tied)
    auto = VARIANTS[variant].auto_class
    assert report["load_call"] == f"transformers.{auto}.from_pretrained({str(src)!r})"

    table = lg("inspect", src)
    assert table.code == 0, table.stderr
    text = table.stdout.decode()
    assert f"  import transformers\n  model = transformers.{auto}.from_pretrained({str(src)!r})\n" in text
    # The printed line loads the folder.
    loaded = eval(report["load_call"], {"transformers": transformers})
    assert type(loaded).__name__ == VARIANTS[variant].model_class


def test_pipe_between_text_models_keeps_provenance(built, lg, tmp_path):
    src, model = built("llama-gqa")
    source_sha = lgcli.inspect_checkpoint(src)["sha256"]
    shrunk = lg("shrink", src, "--depth", "1", "-o", "-")
    assert shrunk.code == 0, shrunk.stderr
    assert read_bytes(shrunk.stdout).lg["config"]["num_hidden_layers"] == 1
    out = tmp_path / "out"
    grown = lg("grow", "-", "--width", "64", "--method", "clone", "-o", f"{out}/", stdin=shrunk.stdout)
    assert grown.code == 0, grown.stderr
    assert grown.stdout == b""

    report = json.loads(lg("inspect", out, "--json").stdout)
    assert (report["depth"], report["width"], report["heads"], report["kv_heads"]) == (1, 64, 8, 4)
    steps = report["provenance"]
    assert [s.get("method") for s in steps[:2]] == ["clone", "select"]
    assert steps[0]["options"]["direction"] == "grow" and steps[1]["options"]["direction"] == "shrink"
    assert steps[0]["source_sha256"] == lgcli.inspect_checkpoint(read_bytes(shrunk.stdout))["sha256"]
    assert steps[1]["file"] == "<stdin>"
    assert steps[1]["source_sha256"] == source_sha and steps[2]["file"] == src.name
    # The same chain is in the folder's safetensors metadata.
    meta = json.loads(metadata(out)["lg.source"])
    assert meta["method"] == "select" and meta["source_sha256"] == source_sha
    # The pipe carries the source's tokenizer and generation files in its
    # header (not in the provenance chain): the folder at its end holds them
    # byte for byte, and nothing the pipe's lg metadata did not have.
    carried = sorted(name for name in os.listdir(src) if name not in ("config.json", "model.safetensors"))
    assert carried and "tokenizer.json" in carried
    assert sorted(os.listdir(out)) == sorted(["config.json", "model.safetensors", "README.md", *carried])
    for name in carried:
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    assert "companion" not in json.dumps(report["provenance"])
    assert not any(key.startswith("companion") for key in metadata(out))
    grown_model = load_strict(out, "llama-gqa")
    assert grown_model.config.num_hidden_layers == 1 and grown_model.config.num_key_value_heads == 4


@pytest.mark.slow
def test_shell_pipe_between_text_models(built, tmp_path):
    """The same pipe as a user types it: two processes."""
    import subprocess
    import sys

    src, _ = built("gpt2-lm")
    out = tmp_path / "out"
    lg_ = f"{sys.executable} -m lgcli"
    command = (f"{lg_} shrink {src} --depth 1 -o - | "
               f"{lg_} grow - --width 64 --method clone -o {out}/")
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    steps = lgcli.inspect_checkpoint(out)["provenance"]
    assert [s.get("method") for s in steps[:2]] == ["clone", "select"]
    assert steps[1]["source_sha256"] == lgcli.inspect_checkpoint(src)["sha256"]
    load_strict(out, "gpt2-lm")


def test_sentence_transformers_pooling_width_follows(built, lg, tmp_path):
    src, _ = built("bert-sentence-transformers")
    out = tmp_path / "out"
    result = lg("grow", src, "--width", "64", "--method", "clone", "-o", out)
    assert result.code == 0, result.stderr
    pooling = (out / "1_Pooling/config.json").read_bytes()
    assert json.loads(pooling)["word_embedding_dimension"] == 64
    # Only the number changed: the rest of the file is the source's, byte for byte.
    before = (src / "1_Pooling/config.json").read_bytes()
    assert pooling == before.replace(b'"word_embedding_dimension": 32', b'"word_embedding_dimension": 64')
    for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                 "tokenizer.json", "vocab.txt"):
        assert (out / name).read_bytes() == (src / name).read_bytes()
    load_strict(out, "bert-sentence-transformers")


# ---------------------------------------------------------------- real uploads' quirks

def _roundtrip(src, variant, tmp_path, model, ids=None):
    ids = token_ids() if ids is None else ids
    loaded = lgcli.load(src)
    out = tmp_path / "out"
    save(out, loaded.spec, loaded.stack, source=loaded)
    reloaded = load_strict(out, variant)
    assert torch.equal(outputs(reloaded, ids), outputs(model, ids))
    return out


def _rewrite_weights(folder, change) -> None:
    path = folder / "model.safetensors"
    state = dict(weights(folder))
    state = change(state)
    os.unlink(path)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata={"format": "pt"})


def test_gpt2_without_prefix_and_with_mask_buffers(tmp_path):
    """As the original gpt2 upload is: no `transformer.` prefix, and the
    causal-mask buffers `h.N.attn.bias` / `h.N.attn.masked_bias` saved."""
    model = make_model("gpt2-lm")
    src = save_folder(model, tmp_path / "src", "gpt2-lm")
    positions = model.config.n_positions

    def old_style(state):
        state = {k.removeprefix("transformer."): v for k, v in state.items()}
        for i in range(model.config.n_layer):
            state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(positions, positions)).view(1, 1, positions, positions)
            state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        return state

    _rewrite_weights(src, old_style)
    assert "wte.weight" in weights(src) and "h.0.attn.masked_bias" in weights(src)
    out = _roundtrip(src, "gpt2-lm", tmp_path, model)
    written = weights(out)
    assert "transformer.wte.weight" in written          # written as save_pretrained writes it
    assert not any(k.endswith((".attn.bias", ".attn.masked_bias")) for k in written)
    # and it resizes
    resized = resize_file(src, tmp_path / "small", direction="shrink", depth=2, method="bot")
    assert resized["target"]["depth"] == 2
    load_strict(tmp_path / "small", "gpt2-lm")


def test_bert_with_position_ids_and_saved_decoder(tmp_path):
    model = make_model("bert-mlm")
    src = save_folder(model, tmp_path / "src", "bert-mlm")
    state = model.state_dict()

    def old_style(weights_):
        weights_["bert.embeddings.position_ids"] = torch.arange(model.config.max_position_embeddings)[None]
        weights_["cls.predictions.decoder.weight"] = state["cls.predictions.decoder.weight"].clone()
        weights_["cls.predictions.decoder.bias"] = state["cls.predictions.decoder.bias"].clone()
        return weights_

    _rewrite_weights(src, old_style)
    out = _roundtrip(src, "bert-mlm", tmp_path, model)
    assert not any("decoder" in k or "position_ids" in k for k in weights(out))


def test_llama_with_rotary_buffers(tmp_path):
    model = make_model("llama-gqa")
    src = save_folder(model, tmp_path / "src", "llama-gqa")
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))

    def old_style(state):
        for i in range(model.config.num_hidden_layers):
            state[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = inv_freq.clone()
        return state

    _rewrite_weights(src, old_style)
    out = _roundtrip(src, "llama-gqa", tmp_path, model)
    assert not any("rotary" in k for k in weights(out))


def test_tied_llama_that_saved_its_head_anyway(tmp_path):
    """Some tied checkpoints store lm_head.weight beside the embedding it
    equals (pickled ones always did): it is the same tensor, read past."""
    model = make_model("llama-tied")
    src = save_folder(model, tmp_path / "src", "llama-tied")

    def with_head(state):
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
        return state

    _rewrite_weights(src, with_head)
    out = _roundtrip(src, "llama-tied", tmp_path, model)
    assert "lm_head.weight" not in weights(out)


@pytest.mark.parametrize("variant", ["gpt2-lm", "llama-gqa", "bert-mlm"])
def test_bf16_stays_bf16(variant, tmp_path, lg):
    model = make_model(variant).to(torch.bfloat16)
    src = save_folder(model, tmp_path / "src", variant)
    assert {t.dtype for t in weights(src).values() if t.is_floating_point()} == {torch.bfloat16}

    loaded = lgcli.load(src)
    same = tmp_path / "same"
    save(same, loaded.spec, loaded.stack, source=loaded)
    assert_same_tensors(weights(same), weights(src))     # bf16 -> float32 -> bf16 is exact

    for command, args in (("shrink", ["--depth", "2", "--width", "16", "--method", "bot"]),
                          ("grow", ["--width", "64", "--method", "clone"])):
        out = tmp_path / command
        result = lg(command, src, *args, "-o", out)
        assert result.code == 0, result.stderr
        assert {t.dtype for t in weights(out).values() if t.is_floating_point()} == {torch.bfloat16}
        reloaded = load_strict(out, variant)
        assert reloaded.dtype == torch.bfloat16
        with torch.no_grad():
            assert torch.isfinite(outputs(reloaded, token_ids()).float()).all()


# ---------------------------------------------------------------- shards

@pytest.mark.parametrize("variant", ["gpt2-lm", "llama-gqa", "bert-mlm"])
def test_sharded_output_loads(variant, built, lg, tmp_path):
    src, model = built(variant)
    out = tmp_path / "out"
    result = lg("grow", src, "--width", "64", "--method", "clone", "--shard-size", "50KB", "-o", out)
    assert result.code == 0, result.stderr
    names = sorted(os.listdir(out))
    shards = [n for n in names if n.endswith(".safetensors")]
    assert len(shards) > 1 and "model.safetensors" not in names
    assert "model.safetensors.index.json" in names and "config.json" in names and "tokenizer.json" in names
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    for shard in shards:
        assert (out / shard).stat().st_size <= 50_000 + 8 + 16_000 or \
            len([k for k, v in index["weight_map"].items() if v == shard]) == 1
    reloaded = load_strict(out, variant)
    assert reloaded.config.hidden_size == 64
    # and lg reads its own sharded folder back
    again = lgcli.load(out)
    assert again.spec.width == 64


def test_sharded_source_reads(built, tmp_path):
    model = make_model("llama-gqa")
    src = save_folder(model, tmp_path / "src", "llama-gqa", max_shard_size="20KB")
    assert (src / "model.safetensors.index.json").exists()
    out = _roundtrip(src, "llama-gqa", tmp_path, model)
    assert_same_tensors(weights(out), weights(src))


def test_tied_config_with_a_different_saved_head_is_untied(tmp_path):
    """transformers ties a saved head to the embedding only when they are
    equal; one that differs stays a head of its own (from_pretrained unties
    it). lg reads the model from_pretrained builds, and says so in config.json."""
    model = make_model("llama-tied")
    src = save_folder(model, tmp_path / "src", "llama-tied")
    head = torch.randn(model.config.vocab_size, model.config.hidden_size) * 0.1

    def with_head(state):
        state["lm_head.weight"] = head
        return state

    _rewrite_weights(src, with_head)
    reference = transformers.AutoModelForCausalLM.from_pretrained(src).eval()
    assert not torch.equal(reference.lm_head.weight, reference.model.embed_tokens.weight)
    ids = token_ids()
    out = _roundtrip(src, "llama-tied", tmp_path, reference, ids)
    assert torch.equal(weights(out)["lm_head.weight"], head)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False


@pytest.mark.parametrize("variant", ["llama-gqa", "mistral", "gpt2-lm"])
def test_config_without_tie_field_takes_the_class_default(variant, tmp_path):
    """A config.json that leaves tie_word_embeddings out means the config
    class's default (False for Llama and Qwen2, True for GPT-2), as
    from_pretrained reads it: clone must then keep the logits."""
    model = make_model(variant)
    src = save_folder(model, tmp_path / "src", variant)
    config = json.loads((src / "config.json").read_text())
    del config["tie_word_embeddings"]
    (src / "config.json").write_text(json.dumps(config))
    reference = getattr(transformers, VARIANTS[variant].auto_class).from_pretrained(src).eval()
    ids = token_ids()
    expected = outputs(reference, ids)
    resize_file(src, tmp_path / "wide", direction="grow", width=64, method="clone")
    got = outputs(load_strict(tmp_path / "wide", variant), ids)
    assert float((got - expected).norm() / expected.norm()) <= 1e-4


def test_untied_bert_mlm_keeps_its_decoder(tmp_path):
    """BertForMaskedLM with tie_word_embeddings false has a decoder (weight
    and bias) of its own: it is read and written, not read past."""
    model = make_model("bert-mlm", tie_word_embeddings=False)
    assert not torch.equal(model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight)
    src = save_folder(model, tmp_path / "src", "bert-mlm")
    assert "cls.predictions.decoder.weight" in weights(src)
    out = _roundtrip(src, "bert-mlm", tmp_path, model)
    assert_same_tensors(weights(out), weights(src))
    resize_file(src, tmp_path / "small", direction="shrink", width=16, depth=2, method="bot")
    assert load_strict(tmp_path / "small", "bert-mlm").cls.predictions.decoder.weight.shape == (96, 16)


def test_tied_model_whose_config_lost_the_tie_is_refused(tmp_path, lg):
    """A tied Qwen2 (no lm_head saved) whose config.json leaves
    tie_word_embeddings out: Qwen2Config reads that as untied, and
    from_pretrained would make up a random head. Refused, in one line."""
    model = make_model("qwen2")
    src = save_folder(model, tmp_path / "src", "qwen2")
    config = json.loads((src / "config.json").read_text())
    del config["tie_word_embeddings"]
    (src / "config.json").write_text(json.dumps(config))
    result = lg("inspect", src)
    assert result.code != 0 and result.stderr.count("\n") == 1
    assert "leaves tie_word_embeddings out, which Qwen2Config reads as untied, but the weights have no " \
           "lm_head.weight" in result.stderr


@pytest.mark.parametrize("variant", ["gpt2-lm", "bert-mlm", "llama-tied"])
def test_pickled_folder_reads(variant, tmp_path):
    """Older uploads hold pytorch_model.bin, a pickled state dict in which a
    tied head is saved beside the embedding it shares memory with."""
    model = make_model(variant)
    src = save_folder(model, tmp_path / "src", variant)
    os.unlink(src / "model.safetensors")
    torch.save(model.state_dict(), src / "pytorch_model.bin")
    out = _roundtrip(src, variant, tmp_path, model)
    tied = set(model.all_tied_weights_keys)
    assert tied and not tied & set(weights(out))
    assert_same_tensors(weights(out), {k: v for k, v in model.state_dict().items() if k not in tied})


@pytest.mark.parametrize("variant", ["gpt2-lm", "llama-gqa", "bert-model"])
def test_single_file_from_a_pipe_loads_with_lg(variant, built, lg, tmp_path):
    """`-o -` writes one safetensors file recording config.json as lg.config:
    lg builds the same model from it as from_pretrained from the folder."""
    src, model = built(variant)
    piped = lg("shrink", src, "--depth", "2", "--method", "bot", "-o", "-")
    assert piped.code == 0, piped.stderr
    single = tmp_path / "small.safetensors"
    single.write_bytes(piped.stdout)
    folder = tmp_path / "small"
    assert lg("shrink", src, "--depth", "2", "--method", "bot", "-o", folder).code == 0

    report = json.loads(lg("inspect", single, "--json").stdout)
    assert report["load_call"] == f"lgcli.load_model({str(single)!r})[0]"
    assert report["config"] == json.loads((folder / "config.json").read_text())
    mine = eval(report["load_call"], {"lgcli": lgcli}).eval()
    ids = token_ids()
    assert torch.equal(outputs(mine, ids), outputs(load_strict(folder, variant), ids))
    # and it is a source like any other: into a folder that from_pretrained loads
    out = tmp_path / "grown"
    assert lg("grow", single, "--width", "64", "--method", "clone", "-o", out).code == 0
    assert load_strict(out, variant).config.hidden_size == 64


@pytest.mark.parametrize("variant", ["gpt2-lm", "llama-gqa", "llama-tied", "bert-mlm"])
def test_bare_weights_file_reads_with_its_sizes(variant, built, tmp_path, lg):
    """model.safetensors without its config.json: the sizes the weights show
    (vocabulary, positions, tied or not), the config class's defaults for the
    rest, and heads from --source-heads (else assumed, as for a ViT)."""
    src, model = built(variant)
    bare = src / "model.safetensors"
    report = json.loads(lg("inspect", bare, "--json").stdout)
    assert report["vocab_size"] == model.config.vocab_size and report["heads_assumed"] is True
    assert report["config"]["tie_word_embeddings"] == model.config.tie_word_embeddings
    # A position table's rows (GPT-2, BERT), else what the config class says (RoPE: Llama's default), as the
    # config lg writes for it records and as lg's window check reads it.
    assert report["max_positions"] == (POSITIONS if variant in ("gpt2-lm", "bert-mlm") else
                                       transformers.LlamaConfig().max_position_embeddings)
    assert report["max_positions"] == report["config"][
        "n_positions" if variant == "gpt2-lm" else "max_position_embeddings"]

    heads = model.config.num_attention_heads
    loaded = lgcli.load(bare, heads=heads)
    assert (loaded.spec.heads, loaded.spec.key_value_heads) == (heads, getattr(model.config, "num_key_value_heads",
                                                                              heads))
    out = tmp_path / "out"
    save(out, loaded.spec, loaded.stack, source=loaded)
    reloaded = load_strict(out, variant)
    ids = token_ids()
    assert torch.equal(outputs(reloaded, ids), outputs(model, ids))


# The canonical view (SPEC.md "Text families"): role -> the module weight it
# is, in PyTorch's (out, in) layout, for layer i of each family's model.
def _gpt2_roles(model, i):
    block = (model.transformer if hasattr(model, "transformer") else model).h[i]
    q, k, v = block.attn.c_attn.weight.T.chunk(3)
    return {"q": q, "k": k, "v": v, "o": block.attn.c_proj.weight.T, "fc1": block.mlp.c_fc.weight.T,
            "fc2": block.mlp.c_proj.weight.T, "q_bias": block.attn.c_attn.bias.chunk(3)[0],
            "norm1_weight": block.ln_1.weight, "norm2_bias": block.ln_2.bias}


def _llama_roles(model, i):
    layer = (model.model if hasattr(model, "model") else model).layers[i]
    a, m = layer.self_attn, layer.mlp
    roles = {"q": a.q_proj.weight, "k": a.k_proj.weight, "v": a.v_proj.weight, "o": a.o_proj.weight,
             "gate": m.gate_proj.weight, "fc1": m.up_proj.weight, "fc2": m.down_proj.weight,
             "norm1_weight": layer.input_layernorm.weight, "norm2_weight": layer.post_attention_layernorm.weight}
    if a.k_proj.bias is not None:
        roles["k_bias"] = a.k_proj.bias
    if m.down_proj.bias is not None:
        roles["fc2_bias"] = m.down_proj.bias
    return roles


def _bert_roles(model, i):
    layer = (model.bert if hasattr(model, "bert") else model).encoder.layer[i]
    s = layer.attention.self
    return {"q": s.query.weight, "k": s.key.weight, "v": s.value.weight, "o": layer.attention.output.dense.weight,
            "fc1": layer.intermediate.dense.weight, "fc2": layer.output.dense.weight, "v_bias": s.value.bias,
            "norm1_weight": layer.attention.output.LayerNorm.weight, "norm2_weight": layer.output.LayerNorm.weight}


ROLES_OF = {"gpt2": _gpt2_roles, "llama": _llama_roles, "bert": _bert_roles}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_canonical_view_is_the_pytorch_layout(variant, built):
    """Roles are the model's own matrices, (out, in), split from fused
    tensors: a layout mistake a round trip cannot see (a square Conv1D read
    untransposed comes back the same) shows here."""
    src, model = built(variant)
    loaded = lgcli.load(src)
    for role, expected in ROLES_OF[VARIANTS[variant].family](model, 1).items():
        assert torch.equal(loaded.stack.layers[role].data[1], expected.detach()), role
    embedding = model.get_input_embeddings().weight.detach()
    assert torch.equal(loaded.stack.globals["token_embed"].data, embedding)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and not model.config.tie_word_embeddings:
        assert torch.equal(loaded.stack.globals["lm_head"].data, head.weight.detach())
    elif head is not None:
        assert "lm_head" not in loaded.stack.globals and loaded.spec.tied_head_input
