"""Bad text-model input and requests: one line on stderr starting
`lg: error:`, a non-zero exit, no traceback, and nothing written (no
output, no temporary leftovers beside it)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from text_models import Sources, weights

# (source variant, how the source folder is spoiled, the command's extra
# arguments, a phrase the error must contain)


def edit_config(**changes):
    def spoil(folder):
        config = json.loads((folder / "config.json").read_text())
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        (folder / "config.json").write_text(json.dumps(config))
    return spoil


def write(name, data: bytes):
    def spoil(folder):
        (folder / name).write_bytes(data)
    return spoil


def remove(name):
    def spoil(folder):
        os.unlink(folder / name)
    return spoil


def shard_index(change):
    def spoil(folder):
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        change(index["weight_map"])
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return spoil


def first_shard(folder):
    return sorted(p for p in os.listdir(folder) if p.endswith(".safetensors"))[0]


def delete_first_shard(folder):
    os.unlink(folder / first_shard(folder))


def point_outside(weight_map):
    key = sorted(weight_map)[0]
    weight_map[key] = "../elsewhere/" + weight_map[key]


def drop_tensor(key):
    def spoil(folder):
        from safetensors.torch import save_file

        state = weights(folder)
        del state[key]
        os.unlink(folder / "model.safetensors")
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return spoil


def add_tensor(key):
    def spoil(folder):
        import torch
        from safetensors.torch import save_file

        state = weights(folder)
        state[key] = torch.zeros(3, 32)
        os.unlink(folder / "model.safetensors")
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return spoil


def truncate(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def link_tokenizer(folder):
    os.unlink(folder / "tokenizer.json")
    os.symlink("/etc/hostname", folder / "tokenizer.json")


BAD_SOURCES = {
    "hidden_size-lies": ("llama-gqa", edit_config(hidden_size=48), "config.json says width 48; the weights have 32"),
    "gpt2-n_embd-lies": ("gpt2-lm", edit_config(n_embd=64), "config.json says width 64; the weights have 32"),
    "num_hidden_layers-lies": ("llama-gqa", edit_config(num_hidden_layers=5), "layers 5; the weights have 3"),
    "bert-layers-lie": ("bert-mlm", edit_config(num_hidden_layers=2), "layers 2; the weights have 3"),
    "num_key_value_heads-lies": ("llama-gqa", edit_config(num_key_value_heads=4),
                                 "config.json says 4 key/value heads; the weights have 2"),
    "intermediate_size-lies": ("llama-gqa", edit_config(intermediate_size=64), "MLP size 64; the weights have 48"),
    "bert-intermediate-lies": ("bert-mlm", edit_config(intermediate_size=128), "MLP size 128; the weights have 64"),
    "vocab-mismatch": ("gpt2-lm", edit_config(vocab_size=200), "vocabulary 200; the weights have 96"),
    "heads-do-not-divide": ("gpt2-lm", edit_config(n_head=5),
                            "config.json says 5 heads, which do not divide the 32 query outputs"),
    "size-not-a-number": ("llama-gqa", edit_config(hidden_size="32"), "hidden_size must be a whole number"),
    "config-not-json": ("llama-gqa", write("config.json", b"{not json"), "config.json: not a model config"),
    "config-a-list": ("llama-gqa", write("config.json", b"[1, 2]"), "must be a JSON object"),
    "model_type-unknown": ("llama-gqa", edit_config(model_type="gemma"), "model_type gemma is not one lg reads"),
    "architecture-unknown": ("gpt2-lm", edit_config(architectures=["GPT2ForSequenceClassification"]),
                             "GPT2ForSequenceClassification"),
    "no-weights": ("bert-mlm", remove("model.safetensors"), "holds config.json but no weights"),
    "missing-shard": ("sharded", delete_first_shard, "does not exist"),
    "index-outside-folder": ("sharded", shard_index(point_outside), "lies outside the folder"),
    "layer-lacks-a-tensor": ("llama-gqa", drop_tensor("model.layers.1.self_attn.q_proj.weight"),
                             "layer 1 has different parameters from layer 0"),
    "unexpected-tensor": ("llama-gqa", add_tensor("score.weight"), "unexpected keys score.weight"),
    "truncated-weights": ("gpt2-lm", truncate, "model.safetensors: truncated"),
    "untied-without-head": ("llama-gqa", drop_tensor("lm_head.weight"),
                            "unties the word embeddings but the weights have no lm_head.weight"),
    "linked-tokenizer": ("gpt2-lm", link_tokenizer, "is not a regular file"),
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    built = Sources(tmp_path_factory)

    def get(variant):
        if variant == "sharded":
            from text_models import make_model, save_folder

            folder = tmp_path_factory.mktemp("sharded")
            save_folder(make_model("llama-gqa"), folder, "llama-gqa", max_shard_size="20KB")
            assert (folder / "model.safetensors.index.json").exists()
            return folder
        return built(variant)[0]

    return get


def assert_refused(result, phrase, parent, before=()):
    assert result.code != 0
    assert result.stdout == b""
    assert result.stderr.startswith("lg: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert phrase in result.stderr, result.stderr
    assert sorted(os.listdir(parent)) == sorted(before)  # nothing written, no temporary leftovers


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_is_refused_in_one_line(case, sources, lg, tmp_path):
    variant, spoil, phrase = BAD_SOURCES[case]
    src = tmp_path / "src"
    shutil.copytree(sources(variant), src, symlinks=True)
    spoil(src)
    parent = tmp_path / "work"
    parent.mkdir()
    assert_refused(lg("shrink", src, "--depth", "2", "-o", parent / "out"), phrase, parent)
    assert_refused(lg("inspect", src), phrase, parent)


BAD_REQUESTS = {
    "safetensors-name": ("gpt2-lm", ["shrink", "--depth", "2"], "out.safetensors",
                         "a Hugging Face model is written as a folder"),
    "kv-heads-do-not-divide": ("llama-gqa", ["shrink", "--depth", "2", "--kv-heads", "3"], "out",
                               "--kv-heads 3 does not divide the 4 heads"),
    "kv-heads-after-width": ("llama-gqa", ["grow", "--width", "48", "--kv-heads", "4"], "out",
                             "--kv-heads 4 does not divide the 6 heads"),
    "group-lost": ("llama-gqa", ["shrink", "--width", "8"], "out", "1 head does not form groups of 2"),
    "width-not-whole-heads": ("gpt2-lm", ["shrink", "--width", "30"], "out",
                              "width 30 is not a whole number of heads of dimension 8"),
    "bert-width-not-whole-heads": ("bert-mlm", ["grow", "--width", "40"], "out",
                                   "width 40 is not a whole number of heads of dimension 16"),
    "clone-not-a-multiple": ("bert-mlm", ["grow", "--width", "48", "--method", "clone"], "out",
                             "clone grows width by whole multiples on this model, whose blocks normalise "
                             "after the residual sum"),
    # 8 heads in groups of 4 (2 key/value heads): no group of the source's 2 lies inside one of them.
    "clone-kv-heads-changed": ("llama-gqa", ["grow", "--width", "64", "--kv-heads", "2", "--method", "clone"],
                               "out", "valid --kv-heads: 8, 4"),
    "grow-smaller": ("bert-mlm", ["grow", "--depth", "2"], "out", "grow cannot make the depth smaller"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_is_refused_in_one_line(case, sources, lg, tmp_path):
    variant, args, name, phrase = BAD_REQUESTS[case]
    command, *rest = args
    assert_refused(lg(command, sources(variant), *rest, "-o", tmp_path / name), phrase, tmp_path)


def test_existing_output_folder_needs_force(sources, lg, tmp_path):
    src = sources("gpt2-lm")
    out = tmp_path / "out"
    assert lg("shrink", src, "--depth", "3", "-o", out).code == 0  # a model folder lg wrote
    written = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert_refused(lg("shrink", src, "--depth", "2", "-o", out), "exists; pass --force", tmp_path, ["out"])
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == written
    # A folder that is not a model lg could have written is never replaced, even with --force:
    # one that holds no model, and one whose config.json is not a model's (issue 20).
    other = tmp_path / "notes"
    other.mkdir()
    (other / "a.txt").write_text("mine")
    assert_refused(lg("shrink", src, "--depth", "2", "-o", other, "--force"), "holds no model", tmp_path,
                   ["out", "notes"])
    app = tmp_path / "app"
    app.mkdir()
    (app / "config.json").write_text('{"keep": true}')
    assert_refused(lg("shrink", src, "--depth", "2", "-o", app, "--force"), "holds no model", tmp_path,
                   ["app", "out", "notes"])
    assert (other / "a.txt").read_text() == "mine" and (app / "config.json").read_text() == '{"keep": true}'
    # A model folder with a file lg does not write beside it is kept too.
    (out / "notes.txt").write_text("results")
    assert_refused(lg("shrink", src, "--depth", "2", "-o", out, "--force"), "holds notes.txt, which is not part of",
                   tmp_path, ["app", "out", "notes"])
    os.unlink(out / "notes.txt")
    # With --force a model folder is replaced, and nothing is left beside it.
    result = lg("shrink", src, "--depth", "2", "-o", out, "--force")
    assert result.code == 0, result.stderr
    assert json.loads((out / "config.json").read_text())["n_layer"] == 2
    assert sorted(os.listdir(tmp_path)) == ["app", "notes", "out"]


@pytest.mark.parametrize("inside", ["config.json", "tokenizer.json", "model.safetensors", "new.safetensors",
                                    "sub/out"])
def test_output_inside_the_input_folder_is_refused_even_with_force(sources, lg, tmp_path, inside):
    """`lg shrink m -o m/config.json --force` would replace the input's own
    file with an output folder (issue 20): refused, the input untouched."""
    src = tmp_path / "m"
    shutil.copytree(sources("gpt2-lm"), src)
    (src / "sub").mkdir()
    before = {name: (src / name).read_bytes() for name in os.listdir(src) if (src / name).is_file()}
    result = lg("shrink", src, "--depth", "2", "-o", src / inside, "--force")
    assert result.code != 0 and result.stderr.count("\n") == 1, result.stderr
    assert "is inside the input folder" in result.stderr, result.stderr
    assert {name: (src / name).read_bytes() for name in os.listdir(src) if (src / name).is_file()} == before
    assert sorted(os.listdir(src)) == sorted([*before, "sub"]) and os.listdir(src / "sub") == []


@pytest.mark.parametrize("held, said", [
    ("notes.txt", "a folder must hold a Hugging Face model (config.json and its weights)"),
    ("model.safetensors", "a model folder must hold config.json beside model.safetensors"),
])
def test_a_folder_that_is_no_model_is_said_before_an_output_inside_it(lg, tmp_path, held, said):
    """`lg shrink /tmp --depth 2 -o /tmp/x`: the input is no model lg reads,
    which is what the user hears first, not that the output lies inside it."""
    folder = tmp_path / "not a model"
    folder.mkdir()
    (folder / held).write_bytes(b"notes")
    result = lg("shrink", folder, "--depth", "2", "-o", folder / "x")
    assert result.code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert said in result.stderr and "inside the input folder" not in result.stderr, result.stderr
    assert sorted(os.listdir(folder)) == [held]


def test_output_inside_a_missing_folder(sources, lg, tmp_path):
    assert_refused(lg("shrink", sources("gpt2-lm"), "--depth", "2", "-o", tmp_path / "no" / "out"),
                   "does not exist", tmp_path)
