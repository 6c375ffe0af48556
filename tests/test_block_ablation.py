"""Block ablation (`--method block-ablation`; Shortened LLaMA, SLEB): a
block's score is what the whole model's output loses when it is skipped, on
tiny models whose answer is known by construction, and each score checked
against the model rebuilt without the block."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file

from conftest import make_vit, sample_input, write_plain
from test_data_aware import IMAGES, VIT_OUTPUTS, recorded, text_file, zero_block_outputs
from text_models import load_strict, make_model, save_folder

from lgcli.resize import resize_file

CALIBRATION = dict(calibrate=IMAGES, calibrate_samples=8)


def small_vit(depth: int) -> torch.nn.Module:
    """The timm model a shrink of make_vit to `depth` blocks is (conftest's TINY sizes)."""
    return timm.create_model("vit_base_patch16_224", depth=depth, embed_dim=64, num_heads=2, patch_size=8,
                             img_size=32, num_classes=5).eval()


def loud_but_useless(model: torch.nn.Module, block: int, size: float = 30.0) -> torch.nn.Module:
    """Block `block` adds the same vector size * (1, ..., 1) to every token and
    nothing else (output projections zero, the attention's bias that vector).
    Every norm after it subtracts each token's mean over channels, so no later
    branch and not the final norm sees it: the model's output is the same with
    or without the block (up to rounding), while the hidden state it writes
    is far from the one it reads (1 - cos near 1, large block influence)."""
    with torch.no_grad():
        zero_block_outputs(model, f"blocks.{block}.", VIT_OUTPUTS)
        model.blocks[block].attn.proj.bias.fill_(size)
    return model


def without_blocks(model: torch.nn.Module, skipped) -> torch.nn.Module:
    """The timm ViT rebuilt with those blocks removed (what the written model computes)."""
    rebuilt = copy.deepcopy(model)
    rebuilt.blocks = torch.nn.Sequential(*[b for i, b in enumerate(model.blocks) if i not in set(skipped)])
    return rebuilt.eval()


def calibration_of(path: Path):
    """The calibration a shrink of `path` measures (the same examples, in process)."""
    from lgcli.api import load
    from lgcli.arch import get_adapter
    from lgcli.calibration import calibrate, calibration_examples

    loaded = load(path)
    model = get_adapter(loaded.spec.family).load_model(loaded.spec, loaded.stack).float().eval()
    examples, name = calibration_examples(model, loaded.spec, IMAGES, samples=8, seed=0, seq_len=None,
                                          companions=loaded.checkpoint.companions, where=str(path))
    return calibrate(model, loaded.spec, examples, name=name, seed=0), examples


def kl_without(model: torch.nn.Module, examples, skipped) -> float:
    """Mean over the examples of KL(p_full || p_without the blocks), by hand."""
    inputs, _ = examples.batch(range(len(examples)))
    with torch.no_grad():
        log_p = torch.log_softmax(model(inputs).double(), -1)
        log_q = torch.log_softmax(without_blocks(model, skipped)(inputs).double(), -1)
    return float((log_p.exp() * (log_p - log_q)).sum(-1).mean())


@pytest.mark.parametrize("ablation", ["greedy", "one-shot"])
def test_an_identity_block_scores_zero_is_dropped_and_the_logits_are_kept(tmp_path, lg, ablation):
    model = make_vit(depth=4)
    zero_block_outputs(model, "blocks.2.", VIT_OUTPUTS)
    source, out = write_plain(model, tmp_path / "vit.safetensors"), tmp_path / "out.safetensors"
    result = lg("shrink", source, "--depth", "3", "--method", "block-ablation", "--ablation", ablation,
                "--calibrate", IMAGES, "--calibrate-samples", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    scores = details["ablation_scores"] if ablation == "one-shot" else details["ablation_rounds"][0]
    assert scores[2] == 0.0 and min(scores[:2] + scores[3:]) > 1e-4
    assert details["dropped_layers"] == [2] and details["kept_layers"] == [0, 1, 3]
    assert details["measure"] == "kl"
    small = small_vit(3)
    small.load_state_dict(load_file(str(out)), strict=True)
    x = sample_input(model)
    with torch.no_grad():
        assert torch.equal(small(x), model(x))  # the identity's x + 0 + 0 is x: the same arithmetic after it


def test_a_timm_model_without_a_head_is_ablated_by_its_features(tmp_path, lg):
    """No classifier: 1 - cos of timm's forward_features (every token, after
    the final norm); the identity block scores exactly 0 and is dropped."""
    model = make_vit(depth=4, num_classes=0)
    zero_block_outputs(model, "blocks.1.", VIT_OUTPUTS)
    out = tmp_path / "out.safetensors"
    result = lg("shrink", write_plain(model, tmp_path / "vit.safetensors"), "--depth", "3", "--method",
                "block-ablation", "--ablation", "one-shot", "--calibrate", IMAGES, "--calibrate-samples", "8", "-o",
                out, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    assert details["measure"] == "1-cos" and details["ablation_scores"][1] == 0.0
    assert min(details["ablation_scores"][:1] + details["ablation_scores"][2:]) > 1e-4
    assert details["dropped_layers"] == [1]


def test_one_shot_scores_are_the_kl_of_the_model_without_each_block(tmp_path):
    """s(l) = E[KL(p_full || p_without l)], checked block by block against the
    timm model rebuilt without the block."""
    statistics, examples = calibration_of(write_plain(make_vit(depth=4), tmp_path / "vit.safetensors"))
    ablation = statistics.ablation
    model = ablation.model  # the source as lg reads it (timm's model of the file)
    scores = ablation.divergences([(0,), (1,), (2,), (3,), (1, 3)])
    for skipped, score in zip([(0,), (1,), (2,), (3,), (1, 3)], scores):
        assert score == pytest.approx(kl_without(model, examples, skipped), rel=1e-4, abs=1e-9)
    assert ablation.passes == 6  # the full model once, then one pass per set of skipped blocks (one batch)
    # Greedy's rounds replay the blocks before a set's first new block from one
    # pass without the blocks already removed: the same numbers, bit for bit.
    sets = [(1, 3), (1, 2), (0, 1)]
    assert ablation.divergences(sets, base=(1,)) == ablation.divergences(sets)


def test_a_block_that_moves_its_input_but_not_the_output_is_dropped_where_block_influence_keeps_it(tmp_path):
    """The loud-but-useless block: the largest block influence (ShortGPT keeps
    it), an output change of rounding size (block ablation drops it, and
    the model it writes computes the source's logits)."""
    model = loud_but_useless(make_vit(depth=4), 1)
    source = write_plain(model, tmp_path / "vit.safetensors")
    influence = resize_file(source, tmp_path / "bi.safetensors", direction="shrink", method="block-influence",
                            depth=3, **CALIBRATION)["details"]
    assert max(range(4), key=lambda b: influence["block_influence"][b]) == 1 and 1 in influence["kept_layers"]
    for ablation in ("greedy", "one-shot"):
        out = tmp_path / f"{ablation}.safetensors"
        details = resize_file(source, out, direction="shrink", method="block-ablation", depth=3, ablation=ablation,
                              **CALIBRATION)["details"]
        scores = details["ablation_scores"] if ablation == "one-shot" else details["ablation_rounds"][0]
        # Rounding's size depends on the CPU's kernels (4.6e-8 on one machine, under 1e-8 on another);
        # the blocks that matter score 0.03 or more.
        assert scores[1] < 1e-6 and min(scores[0], scores[2], scores[3]) > 1e-2
        assert details["dropped_layers"] == [1]
        small = small_vit(3)
        small.load_state_dict(load_file(str(out)), strict=True)
        x = sample_input(model)
        with torch.no_grad():
            torch.testing.assert_close(small(x), model(x), atol=1e-4, rtol=0)


def test_greedy_measures_each_round_with_the_blocks_already_removed(tmp_path):
    """SLEB: round r scores every remaining block b by the KL of the model
    without (removed so far + b), and removes the least; each entry checked
    against the rebuilt model."""
    source = write_plain(make_vit(depth=4, seed=3), tmp_path / "vit.safetensors")
    details = resize_file(source, tmp_path / "g.safetensors", direction="shrink", method="block-ablation", depth=1,
                          ablation="greedy", **CALIBRATION)["details"]
    statistics, examples = calibration_of(source)
    model = statistics.ablation.model
    removed: list[int] = []
    for scores in details["ablation_rounds"]:
        for block, score in enumerate(scores):
            if block in removed:
                assert score is None
            else:
                assert score == pytest.approx(kl_without(model, examples, [*removed, block]), rel=1e-4, abs=1e-9)
        removed.append(min((s, b) for b, s in enumerate(scores) if s is not None)[1])
    assert details["removal_order"] == removed and details["kept_layers"] == [b for b in range(4) if b not in removed]


def test_a_block_whose_removal_flips_the_predictions_is_kept(tmp_path):
    """Block 2's MLP adds a large vector that the final norm and head read as
    class k, a class the model without it does not predict: every prediction
    is k with the block and none without. Shrunk to one block, it is the one kept."""
    model = make_vit(depth=4)
    source = write_plain(model, tmp_path / "plain.safetensors")
    statistics, examples = calibration_of(source)
    inputs, _ = examples.batch(range(len(examples)))
    with torch.no_grad():
        without = without_blocks(statistics.ablation.model, [2])(inputs).argmax(-1)
        k = next(c for c in range(5) if c not in without.tolist())
        direction = model.head.weight[k] / model.norm.weight
        model.blocks[2].mlp.fc2.weight.zero_()
        model.blocks[2].mlp.fc2.bias.copy_(100 * (direction - direction.mean()) / direction.norm())
    source = write_plain(model, tmp_path / "vit.safetensors")
    statistics, examples = calibration_of(source)
    model = statistics.ablation.model
    with torch.no_grad():
        assert (model(inputs).argmax(-1) == k).all() and (without_blocks(model, [2])(inputs).argmax(-1) != k).all()
    for ablation in ("greedy", "one-shot"):
        details = resize_file(source, tmp_path / f"{ablation}.safetensors", direction="shrink",
                              method="block-ablation", depth=1, ablation=ablation, **CALIBRATION)["details"]
        assert details["kept_layers"] == [2]


def test_the_same_data_and_seed_give_the_same_bytes_and_the_file_says_what_was_kept(tmp_path, lg):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    outs = [tmp_path / f"{i}.safetensors" for i in range(3)]
    for out, seed in zip(outs, ("0", "0", "1")):
        result = lg("shrink", source, "--depth", "2", "--method", "block-ablation", "--calibrate", IMAGES,
                    "--calibrate-samples", "16", "--seed", seed, "-o", out)
        assert result.code == 0, result.stderr
    assert outs[0].read_bytes() == outs[1].read_bytes()
    options = recorded(outs[0])
    assert options["calibration"] == {"data": IMAGES, "samples": 16, "seed": 0, "positions": 16 * 17}
    kept = options["chosen"]["kept_layers"]
    assert len(kept) == 2 and options["chosen"]["dropped_layers"] == sorted(set(range(4)) - set(kept))
    assert options["ablation"] == "greedy"  # the default
    assert recorded(outs[2])["calibration"]["seed"] == 1
    shown = lg("inspect", outs[0])
    assert shown.code == 0 and f"layers {kept}" in " ".join(shown.stdout.decode().split()), shown.stdout


@pytest.mark.parametrize("variant", ["gpt2-lm", "bert-mlm", "llama-gqa", "llama-model"])
def test_text_models_are_ablated_and_load_strictly(tmp_path, lg, variant):
    """Next-token (GPT-2, Llama) and masked-token (BERT) distributions by KL;
    a Llama with no head by 1 - cos of its final hidden states. The identity
    block is the one dropped."""
    model = make_model(variant)
    layers = model.layers if variant == "llama-model" else model.model.layers if "llama" in variant else (
        model.transformer.h if variant == "gpt2-lm" else model.bert.encoder.layer)
    outputs = {"gpt2-lm": ("attn.c_proj", "mlp.c_proj"), "llama-gqa": ("self_attn.o_proj", "mlp.down_proj"),
               "llama-model": ("self_attn.o_proj", "mlp.down_proj")}
    if variant in outputs:  # pre-norm: the output projections zero make block 1 an identity
        with torch.no_grad():
            for name in outputs[variant]:
                for param in layers[1].get_submodule(name).parameters():
                    param.zero_()
    source = save_folder(model, tmp_path / variant, variant)
    out = tmp_path / "out"
    result = lg("shrink", source, "--depth", str(len(layers) - 1), "--method", "block-ablation", "--ablation",
                "one-shot", "--calibrate", text_file(tmp_path / "c.txt"), "--calibrate-samples", "4", "--calibrate-seq-len",
                "16", "-o", out, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    assert details["measure"] == ("1-cos" if variant == "llama-model" else "kl")
    if variant in outputs:
        assert details["ablation_scores"][1] == 0.0 < min(details["ablation_scores"][:1] + details["ablation_scores"][2:])
        assert details["dropped_layers"] == [1]
    load_strict(out, variant)


@pytest.mark.parametrize("variant, measure", [("dinov2-swiglu-classifier", "kl"), ("dinov2", "1-cos"),
                                              ("clip-vision", "1-cos")])
def test_transformers_vision_models_are_ablated_and_load_strictly(tmp_path, lg, variant, measure):
    import transformers

    from hf_image_models import load_strict as load_image_model
    from test_hf_vision_families import VARIANTS, make_model as make_image_model

    source = tmp_path / "src"
    make_image_model(variant).save_pretrained(source)
    transformers.BitImageProcessor(size={"height": 16, "width": 16},
                                   crop_size={"height": 16, "width": 16}).save_pretrained(source)
    out = tmp_path / "out"
    result = lg("shrink", source, "--depth", "1", "--method", "block-ablation", "--calibrate", IMAGES,
                "--calibrate-samples", "4", "-o", out, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    assert details["measure"] == measure and len(details["kept_layers"]) == 1
    model = load_image_model(out, VARIANTS[variant][2])
    with torch.no_grad():
        output = model(pixel_values=torch.randn(1, 3, 16, 16))
    assert all(bool(torch.isfinite(v).all()) for v in output.values() if torch.is_tensor(v))


def test_a_swin_is_ablated_stage_by_stage(tmp_path):
    """Each stage's identity block (its last: the kept block keeps its window
    pattern) scores 0 and is dropped; the logits are kept, and timm loads the
    file strictly."""
    from conftest import printed_model
    from test_swin import images, make_swin
    from test_swin_calibration import saved, with_identities

    model = with_identities(make_swin(), [(0, 1), (1, 1)])
    out = tmp_path / "swin-small.safetensors"
    report = resize_file(saved(model, tmp_path / "swin.safetensors"), out, direction="shrink",
                         method="block-ablation", depth=(1, 1), ablation="one-shot", **CALIBRATION)
    stages = report["details"]["stages"]
    for stage in stages:
        assert stage["ablation_scores"][1] == 0.0 < stage["ablation_scores"][0]
        assert stage["kept_layers"] == [0]
    x = images(model)
    with torch.no_grad():
        torch.testing.assert_close(printed_model(out)(x), model(x), atol=1e-5, rtol=0)


def test_a_transformers_swin_chooses_as_timm_and_loads_strictly(tmp_path):
    """The same Swin as a timm file and a transformers folder: each form's
    blocks are skipped by its own modules, both score and choose the same
    (greedy, each stage's identity block first), and the folder loads strictly."""
    import transformers
    from safetensors.torch import save_file

    from hf_image_models import load_strict as load_image_model
    from test_hf_swin import TINY, hf_names
    from test_swin import make_swin
    from test_swin_calibration import saved, with_identities

    model = with_identities(make_swin(), [(0, 1), (1, 1)])
    folder = tmp_path / "src"
    folder.mkdir()
    transformers.SwinConfig(**TINY, architectures=["SwinForImageClassification"]).save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in hf_names(model.state_dict()).items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    reports = [resize_file(source, tmp_path / name, direction="shrink", method="block-ablation", depth=(1, 1),
                           **CALIBRATION)["details"]["stages"]
               for source, name in ((saved(model, tmp_path / "swin.safetensors"), "timm.safetensors"),
                                    (folder, "hf"))]
    for timm_stage, hf_stage in zip(*reports):
        assert timm_stage["removal_order"] == hf_stage["removal_order"] == [1]
        assert hf_stage["ablation_rounds"][0] == pytest.approx(timm_stage["ablation_rounds"][0], rel=1e-3, abs=1e-7)
    resized = load_image_model(tmp_path / "hf", "SwinForImageClassification")
    assert resized.config.depths == [1, 1]


@pytest.mark.parametrize("args, message", [
    ((), "give --calibrate DATA"),
    (("--calibrate", "kjv-mini"), "is a text; this model takes images"),
    (("--calibrate", IMAGES, "--calibrate-samples", "100000"), "fewer than --calibrate-samples 100000"),
    (("--calibrate", IMAGES, "--ablation", "random"), "random"),
])
def test_bad_requests_are_one_line_and_write_nothing(tmp_path, lg, args, message):
    source = write_plain(make_vit(depth=4), tmp_path / "vit.safetensors")
    out = tmp_path / "out.safetensors"
    result = lg("shrink", source, "--depth", "2", "--method", "block-ablation", *args, "-o", out)
    assert result.code != 0
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()


def test_images_for_a_language_model_are_refused(tmp_path, lg):
    source = save_folder(make_model("llama-mha"), tmp_path / "llama", "llama-mha")
    result = lg("shrink", source, "--depth", "2", "--method", "block-ablation", "--calibrate", IMAGES,
                "-o", tmp_path / "o")
    assert result.code != 0 and "language model" in result.stderr and not (tmp_path / "o").exists()
    assert len(result.stderr.strip().splitlines()) == 1


def test_greedy_says_each_round_on_stderr_and_keeps_stdout_for_data(tmp_path, lg):
    """A greedy run costs a pass per block left each round: each round is
    said on stderr as it ends (the block removed, its score, the time left),
    and stdout still holds only the JSON report."""
    model = make_vit(depth=4)
    zero_block_outputs(model, "blocks.2.", VIT_OUTPUTS)
    source, out = write_plain(model, tmp_path / "vit.safetensors"), tmp_path / "out.safetensors"
    result = lg("shrink", source, "--depth", "2", "--method", "block-ablation", "--calibrate", IMAGES,
                "--calibrate-samples", "8", "-o", out, "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    rounds = [line for line in result.stderr.splitlines() if line.startswith("block-ablation: round")]
    assert len(rounds) == 2, result.stderr
    for number, (line, block) in enumerate(zip(rounds, details["removal_order"]), start=1):
        assert line.startswith(f"block-ablation: round {number} of 2: block {block} removed (kl "), line
        assert " s left" in line
    assert rounds[0].startswith("block-ablation: round 1 of 2: block 2 removed (kl 0)")


class TimedAblation:
    """An ablation of 4 blocks on 64 examples whose first batch of every
    call took `seconds` of 3 batches: what the run's length is said from."""

    depth, measure = 4, "kl"

    def __init__(self, seconds: float = 10.0, examples: int = 64) -> None:
        self.seconds, self.examples = seconds, range(examples)

    def divergences(self, skipped, base=(), first_batch=None):
        if first_batch is not None:
            first_batch(self.seconds, 3)
        return [float(len(blocks)) + block / 10 for block, blocks in enumerate(skipped)]


def test_a_long_run_says_how_long_before_its_first_round_ends():
    """Greedy 4 -> 2: rounds of 5 passes (the full model, one per block)
    and 5 (the full model, the model without the block removed, one per
    block left), 10 in all. The first round's passes over the first of 3
    batches took 10 s, so the round takes 30 s and the run about 60 s:
    said once, before the first round's line, with what costs less."""
    from lgcli.methods.block_ablation import _greedy_passes, greedy, one_shot

    assert _greedy_passes(4, 2) == [5, 5]
    assert sum(_greedy_passes(30, 20)) == 274  # SmolLM2 30 -> 20: 31 + 30 + ... + 23
    said: list[str] = []
    greedy(TimedAblation(), 2, said.append)
    assert said[0] == ("block-ablation: 2 rounds, 10 passes over 64 examples: about 60 s "
                       "(--calibrate-samples 16: about 15 s; --ablation one-shot: about 30 s)")
    assert [line.startswith("block-ablation: round") for line in said] == [False, True, True]
    said.clear()
    one_shot(TimedAblation(), 2, said.append)  # 5 passes, 30 s: 20 s more is not long, and is not said
    assert len(said) == 1 and said[0].startswith("block-ablation: 5 passes over the calibration examples")
    one_shot(TimedAblation(seconds=20.0), 2, said.append)
    assert said[2] == "block-ablation: 5 passes over 64 examples: about 60 s (--calibrate-samples 16: about 15 s)"
    said.clear()
    greedy(TimedAblation(examples=31), 2, said.append)  # a quarter would be under 8 examples: not offered
    assert said[0] == ("block-ablation: 2 rounds, 10 passes over 31 examples: about 60 s "
                       "(--ablation one-shot: about 30 s)")
