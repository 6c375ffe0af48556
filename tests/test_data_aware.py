"""The data-aware resize methods (SPEC.md "Data-aware resizing"): block
influence, angular distance and activation importance, on tiny models whose
answer is known by construction, and the calibration pass they read."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from conftest import make_vit, sample_input, write_plain
from text_models import load_strict, make_model, save_folder, weights

IMAGES = "fashion-mnist-mini"


def text_file(path: Path, words: int = 6000, seed: int = 0) -> Path:
    """Calibration text for the tiny text models' word-level tokenizer (w1..w95)."""
    rng = random.Random(seed)
    path.write_text(" ".join(f"w{rng.randrange(3, 96)}" for _ in range(words)) + "\n")
    return path


def zero_block_outputs(model: torch.nn.Module, prefix: str, suffixes: tuple[str, ...]) -> None:
    """Make a pre-norm block an exact identity: its attention and MLP output
    projections (weights and biases) zero, so it adds nothing to the residual."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith(prefix) and any(name.endswith(s) for s in suffixes):
                param.zero_()


def recorded(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    return json.loads(meta["lg.provenance"])[0]["options"] if "lg.provenance" in meta else \
        json.loads(meta["lg.options"])


VIT_OUTPUTS = ("attn.proj.weight", "attn.proj.bias", "mlp.fc2.weight", "mlp.fc2.bias")


@pytest.fixture
def identity_vit(tmp_path):
    """A 4-block ViT whose blocks 1 and 2 are exact identities."""
    model = make_vit(depth=4)
    for block in (1, 2):
        zero_block_outputs(model, f"blocks.{block}.", VIT_OUTPUTS)
    return model, write_plain(model, tmp_path / "vit.safetensors")


def test_block_influence_drops_the_block_made_an_identity(tmp_path, lg, identity_vit):
    model, source = identity_vit
    out = tmp_path / "bi.safetensors"
    result = lg("shrink", source, "--depth", "2", "--method", "block-influence", "--calibrate", IMAGES,
                "--calibrate-samples", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    influence = report["details"]["block_influence"]
    assert influence[1] == pytest.approx(0, abs=1e-6) and influence[2] == pytest.approx(0, abs=1e-6)
    assert min(influence[0], influence[3]) > 1e-3
    assert report["details"]["dropped_layers"] == [1, 2]
    # The kept blocks are the source's blocks 0 and 3, exactly, and the file says so.
    written, source_weights = load_file(str(out)), model.state_dict()
    for target_block, source_block in ((0, 0), (1, 3)):
        for suffix in ("attn.qkv.weight", "mlp.fc1.weight", "norm2.bias"):
            assert torch.equal(written[f"blocks.{target_block}.{suffix}"], source_weights[f"blocks.{source_block}.{suffix}"])
    chosen = recorded(out)["chosen"]
    assert chosen == {"kept_layers": [0, 3], "dropped_layers": [1, 2]}
    # lg inspect says what was chosen, and from a source lg did not write.
    shown = lg("inspect", out).stdout.decode()
    assert "layers [0, 3] (every index: lg inspect --json)" in shown and "vit.safetensors: not made by lg" in shown
    # Dropping identity blocks keeps the function: the same logits.
    small = timm.create_model("vit_base_patch16_224", depth=2, embed_dim=64, num_heads=2, patch_size=8, img_size=32,
                              num_classes=5)
    small.load_state_dict(written, strict=True)
    x = sample_input(model)
    with torch.no_grad():
        torch.testing.assert_close(small.eval()(x), model(x), atol=1e-5, rtol=1e-5)


def test_angular_distance_drops_the_contiguous_identity_blocks(tmp_path, lg, identity_vit):
    _, source = identity_vit
    out = tmp_path / "ang.safetensors"
    result = lg("shrink", source, "--depth", "2", "--method", "angular", "--calibrate", IMAGES,
                "--calibrate-samples", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    # d(l, 2) for l = 0, 1, 2: blocks 1-2 map their input to itself (distance 0).
    assert details["angular_distance"][1] == pytest.approx(0, abs=1e-3)
    assert details["dropped_layers"] == [1, 2] and details["kept_layers"] == [0, 3]


def test_calibration_statistics_match_the_models_own_hidden_states(tmp_path):
    """cosine[i, j] is the mean over positions of cos(h_i, h_j), with h_l the
    hidden state entering block l, as transformers' output_hidden_states gives it."""
    from lgcli.api import load
    from lgcli.arch import get_adapter
    from lgcli.calibration import calibrate, calibration_examples

    folder = save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa")
    loaded = load(folder)
    model = get_adapter(loaded.spec.family).load_model(loaded.spec, loaded.stack).float().eval()
    examples, name = calibration_examples(model, loaded.spec, str(text_file(tmp_path / "c.txt")), samples=6,
                                          seed=0, seq_len=16, companions=loaded.checkpoint.companions,
                                          where=str(folder))
    statistics = calibrate(model, loaded.spec, examples, name=name, seed=0)
    inputs, _ = examples.batch(range(len(examples)))
    with torch.no_grad():
        hidden = model(input_ids=inputs, output_hidden_states=True).hidden_states  # embeddings, then each block
    depth = loaded.spec.depth
    for i in range(depth):  # hidden_states[depth] is after the final norm: not a block boundary
        for j in range(depth):
            expected = torch.nn.functional.cosine_similarity(hidden[i], hidden[j], dim=-1).double().mean()
            assert statistics.cosine[i, j] == pytest.approx(float(expected), abs=1e-5)
    assert statistics.positions == 6 * 16 and statistics.mlp.shape == (depth, 48)
    assert statistics.heads.shape == (depth, 4)


def test_activation_drops_a_neuron_that_never_activates(tmp_path, lg):
    model = make_model("llama-mha")
    dead = {0: 5, 1: 17, 2: 40}  # per block: a gate row of zeros gives silu(0) * up = 0 on every token
    with torch.no_grad():
        for block, neuron in dead.items():
            model.model.layers[block].mlp.gate_proj.weight[neuron] = 0
    source = save_folder(model, tmp_path / "llama", "llama-mha")
    out = tmp_path / "small"
    result = lg("shrink", source, "--mlp-dim", "47", "--method", "activation", "--calibrate",
                text_file(tmp_path / "c.txt"), "--calibrate-samples", "8", "--calibrate-seq-len", "16", "-o", out,
                "--json")
    assert result.code == 0, result.stderr
    kept = json.loads(result.stdout)["details"]["kept_mlp"]
    for block, neuron in dead.items():
        assert kept[block] == [f for f in range(48) if f != neuron]
    # The file records the windows it was measured on: 8 of 16 tokens.
    calibration = recorded(out / "model.safetensors")["calibration"]
    assert (calibration["samples"], calibration["seq_len"], calibration["positions"]) == (8, 16, 8 * 16)
    written, original = weights(out), model.state_dict()
    for block, neuron in dead.items():
        rows = [f for f in range(48) if f != neuron]
        for name, dim in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
            key = f"model.layers.{block}.mlp.{name}.weight"
            assert torch.equal(written[key], original[key].index_select(dim, torch.tensor(rows)))
    load_strict(out, "llama-mha")


def test_activation_keeps_grouped_query_groups_whole(tmp_path, lg):
    """4 query heads over 2 key/value heads: with key/value head 0's values zero
    in block 0, its group's heads output nothing there, and shrinking to 2
    heads over 1 keeps group 1 (heads 2, 3) in block 0."""
    model = make_model("llama-gqa")
    head_dim = 8
    with torch.no_grad():
        model.model.layers[0].self_attn.v_proj.weight[:head_dim] = 0
    source = save_folder(model, tmp_path / "llama", "llama-gqa")
    out = tmp_path / "small"
    result = lg("shrink", source, "--width", "16", "--method", "activation", "--calibrate",
                text_file(tmp_path / "c.txt"), "--calibrate-samples", "8", "--calibrate-seq-len", "16", "-o", out,
                "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    assert details["kept_heads"][0] == [2, 3] and details["kept_kv_heads"][0] == [1]
    assert all(len(heads) == 2 and heads[0] // 2 == heads[1] // 2 for heads in details["kept_heads"])
    written, original = weights(out), model.state_dict()
    embed = torch.tensor(details["kept_embed"])
    q = original["model.layers.0.self_attn.q_proj.weight"][2 * head_dim:4 * head_dim].index_select(1, embed)
    k = original["model.layers.0.self_attn.k_proj.weight"][head_dim:2 * head_dim].index_select(1, embed)
    assert torch.equal(written["model.layers.0.self_attn.q_proj.weight"], q)
    assert torch.equal(written["model.layers.0.self_attn.k_proj.weight"], k)
    small = load_strict(out, "llama-gqa")
    assert small.config.num_attention_heads == 2 and small.config.num_key_value_heads == 1
    with torch.no_grad():
        assert torch.isfinite(small(input_ids=torch.tensor([[3, 4, 5]])).logits).all()


def test_activation_drops_embedding_channels_that_carry_nothing(tmp_path, lg):
    """Channels whose every norm gain and bias is zero are zero at every norm's
    output: the width kept is exactly the other channels."""
    model = make_vit()
    silent = sorted(random.Random(1).sample(range(64), 32))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith("blocks.") and (".norm1." in name or ".norm2." in name):
                param[silent] = 0
    source = write_plain(model, tmp_path / "vit.safetensors")
    out = tmp_path / "narrow.safetensors"
    result = lg("shrink", source, "--width", "32", "--source-heads", "2", "--method", "activation", "--calibrate",
                IMAGES, "--calibrate-samples", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["details"]["kept_embed"] == [c for c in range(64) if c not in silent]
    narrow = timm.create_model("vit_base_patch16_224", depth=2, embed_dim=32, num_heads=1, patch_size=8,
                               img_size=32, num_classes=5)
    narrow.load_state_dict(load_file(str(out)), strict=True)
    assert torch.isfinite(narrow.eval()(sample_input(model))).all()


def test_the_same_data_and_seed_give_the_same_bytes(tmp_path, lg):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    outs = [tmp_path / f"{i}.safetensors" for i in range(3)]
    for out, seed in zip(outs, ("0", "0", "1")):
        assert lg("shrink", source, "--depth", "2", "--width", "32", "--source-heads", "2", "--method", "activation",
                  "--calibrate", IMAGES,
                  "--calibrate-samples", "16", "--seed", seed, "-o", out).code == 0
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert recorded(outs[2])["calibration"]["seed"] == 1


@pytest.mark.parametrize("method", ["block-influence", "angular", "activation"])
def test_gpt2_and_bert_outputs_load_strictly(tmp_path, lg, method):
    text = text_file(tmp_path / "c.txt")
    for variant in ("gpt2-lm", "bert-mlm"):
        source = save_folder(make_model(variant), tmp_path / variant, variant)
        out = tmp_path / f"{variant}-{method}"
        sizes = ("--depth", "2") if method != "activation" else ("--width", "16")
        result = lg("shrink", source, *sizes, "--method", method, "--calibrate", text, "--calibrate-samples", "4",
                    "--calibrate-seq-len", "16", "-o", out)
        assert result.code == 0, result.stderr
        load_strict(out, variant)


@pytest.mark.parametrize("args, message", [
    (("--calibrate", "kjv-mini"), "is a text; this model takes images"),
    (("--calibrate", IMAGES, "--calibrate-samples", "100000"), "fewer than --calibrate-samples 100000"),
    ((), "give --calibrate DATA"),
    (("--calibrate", "no-such-folder"), "--calibrate no-such-folder: no such file or folder"),  # the flag given
])
def test_bad_calibration_is_one_line_and_writes_nothing(tmp_path, lg, args, message):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    out = tmp_path / "out.safetensors"
    result = lg("shrink", source, "--depth", "2", "--method", "block-influence", *args, "-o", out)
    assert result.code != 0
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


def test_images_for_a_language_model_and_calibrate_for_a_data_free_method_are_refused(tmp_path, lg):
    source = save_folder(make_model("llama-mha"), tmp_path / "llama", "llama-mha")
    result = lg("shrink", source, "--depth", "2", "--method", "angular", "--calibrate", IMAGES, "-o", tmp_path / "o")
    assert result.code != 0 and "language model" in result.stderr and not (tmp_path / "o").exists()
    result = lg("shrink", source, "--depth", "2", "--method", "select", "--calibrate", IMAGES, "-o", tmp_path / "o")
    assert result.code != 0 and "--calibrate does not apply" in result.stderr
    (tmp_path / "empty.txt").write_text("")
    result = lg("shrink", source, "--depth", "2", "--method", "angular", "--calibrate", tmp_path / "empty.txt",
                "-o", tmp_path / "o")  # found wanting once read: the flag the user gave, once
    assert result.code != 0 and not (tmp_path / "o").exists()
    assert "--calibrate" in result.stderr and "holds no text" in result.stderr, result.stderr
    assert "--data" not in result.stderr, result.stderr


def loaded_model(source: Path):
    """(live model, its Loaded) of a checkpoint, as `lg shrink` reads it."""
    from lgcli.api import load
    from lgcli.arch import get_adapter

    loaded = load(source)
    return get_adapter(loaded.spec.family).load_model(loaded.spec, loaded.stack).float().eval(), loaded


def refusal(model, loaded, data: Path, flag: str, seq_len: int | None = None, **flags) -> str:
    """The message calibration_examples refuses `data` with, given by `flag`."""
    from lgcli.calibration import calibration_examples
    from lgcli.errors import LgError

    with pytest.raises(LgError) as refused:
        calibration_examples(model, loaded.spec, str(data), samples=4, seed=0, seq_len=seq_len,
                             companions=loaded.checkpoint.companions, where=loaded.checkpoint.label, flag=flag,
                             **flags)
    return str(refused.value)


def unreadable_text(tmp_path: Path) -> list[tuple[Path, str]]:
    """(data, what the text readers say of it) for text data found wanting
    at each depth of reading: the path, the folder's listing, a file's bytes."""
    missing = tmp_path / "missing.txt"
    no_text = tmp_path / "no-text"
    (no_text / "sub").mkdir(parents=True)
    (no_text / "sub" / "notes.md").write_text("w3 w4\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"\xff w3 w4\n")
    return [(missing, "no such file or folder, and not a built-in text (kjv-mini, bible-kjv)"),
            (no_text, "no .txt files in the folder"),
            (latin1, "not UTF-8 text (byte 0 is 0xff)")]


@pytest.mark.parametrize("flag", ["--calibrate", "--data"])  # lg shrink's; lg condense --widths' importance pass
def test_text_the_readers_refuse_is_named_by_the_flag_it_came_with(tmp_path, flag):
    model, loaded = loaded_model(save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa"))
    for data, problem in unreadable_text(tmp_path):
        assert refusal(model, loaded, data, flag, seq_len=16) == f"{flag} {data}: {problem}"


@pytest.mark.parametrize("flag, seq_len_flag", [("--calibrate", "--calibrate-seq-len"), ("--data", "--seq-len")])
def test_a_window_length_refused_is_named_by_the_flag_it_came_with(tmp_path, flag, seq_len_flag):
    """lg shrink's window length is --calibrate-seq-len; lg condense's --seq-len.
    Each refusal offers only the remedy its command has (no --test-fraction)."""
    model, loaded = loaded_model(save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa"))
    positions = model.config.max_position_embeddings
    short = tmp_path / "short.txt"
    short.write_text("w3 w4 w5 w6 w7 w8\n")
    assert refusal(model, loaded, short, flag, seq_len=positions + 1, seq_len_flag=seq_len_flag) == \
        f"{seq_len_flag} {positions + 1} is longer than the source can read: it has {positions} positions"
    drawn = "; calibration draws from the train split" if flag == "--calibrate" else ""  # why a split, there
    assert refusal(model, loaded, short, flag, seq_len=4, seq_len_flag=seq_len_flag).endswith(
        f"too few for a train and a test split{drawn} (give more text or a smaller {seq_len_flag})")


@pytest.mark.parametrize("flag", ["--calibrate", "--data"])
def test_an_image_folder_the_readers_refuse_is_named_by_the_flag_it_came_with(tmp_path, flag):
    model, loaded = loaded_model(write_plain(make_vit(depth=2), tmp_path / "vit.safetensors"))
    no_images = tmp_path / "no-images"
    (no_images / "cats").mkdir(parents=True)
    (no_images / "cats" / "notes.txt").write_text("not an image\n")
    assert refusal(model, loaded, no_images, flag) == \
        f"{flag} {no_images}: no class subfolders with images found (expected {no_images}/<class>/<image>)"


def test_grouped_query_targets_that_split_a_group_are_refused(tmp_path, lg):
    source = save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa")
    result = lg("shrink", source, "--heads", "3", "--kv-heads", "3", "--width", "24", "--method", "activation",
                "--calibrate", text_file(tmp_path / "c.txt"), "-o", tmp_path / "o")
    assert result.code != 0 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("variant", ["dinov2", "dinov2-swiglu-classifier", "dinov2-registers", "clip-vision"])
@pytest.mark.parametrize("method, sizes", [("block-influence", ("--depth", "1")),
                                           ("activation", ("--width", "24"))])
def test_transformers_vision_models_are_calibrated_and_load_strictly(tmp_path, lg, variant, method, sizes):
    """The calibration pass hooks the modules each declaration names (a
    SwiGLU DINOv2's down projection is mlp.weights_out, CLIP's blocks are
    encoder.layers): every transformers vision family, classifier or not."""
    import transformers

    from hf_image_models import load_strict as load_image_model
    from test_hf_vision_families import VARIANTS, make_model as make_image_model

    source = tmp_path / "src"
    make_image_model(variant).save_pretrained(source)
    transformers.BitImageProcessor(size={"height": 16, "width": 16},
                                   crop_size={"height": 16, "width": 16}).save_pretrained(source)
    out = tmp_path / "out"
    result = lg("shrink", source, *sizes, "--method", method, "--calibrate", IMAGES, "--calibrate-samples", "4",
                "-o", out, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["details"]["calibration"]["positions"] > 0
    model = load_image_model(out, VARIANTS[variant][2])
    with torch.no_grad():
        output = model(pixel_values=torch.randn(1, 3, 16, 16))
    assert all(bool(torch.isfinite(v).all()) for v in output.values() if torch.is_tensor(v))
