"""lg distill --hidden-weight W: the hidden-state term is W times the mean
over the student's blocks of the MSE against the teacher's matched blocks,
checked entry by entry against states computed by hand (a timm ViT, a GPT-2,
a Llama with grouped-query attention); the blocks are matched by the layers
a resize kept (select, block influence; through a distil too) or uniformly;
training with it lowers that MSE; a width mismatch is refused in one line;
W = 0 records what lg always recorded; and a --resume with another alpha,
tau or W is refused, naming each difference."""

from __future__ import annotations

import copy
import json

import pytest
import timm
import torch

import lgcli
from lgcli.api import spec_of_model
from lgcli.data import load_data
from lgcli.distill import DistillSettings, distill, distill_file
from lgcli.hidden_states import HiddenStateTerm, layer_map, uniform_layer_map
from lgcli.resize import resize_file
from lgcli.train import TrainConfig, train

from text_models import make_model

VIT = dict(embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
IMAGES = ["--data", "fashion-mnist-mini", "--subset", "64", "--test-subset", "32", "--batch-size", "16",
          "--device", "cpu"]
QUIET = dict(notify=lambda message: None)
# The options a distillation recorded before --hidden-weight: a run with W = 0 records exactly these.
OPTIONS_WITHOUT_HIDDEN = {"teacher", "teacher_sha256", "data", "alpha", "tau", "steps", "batch_size", "lr", "warmup",
                          "weight_decay", "seed"}


def fast(**overrides) -> DistillSettings:
    return DistillSettings(**{"steps": 6, "batch_size": 16, "lr": 2e-3, "progress": False, "device": "cpu",
                              **overrides})


def vit(depth: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("vit_base_patch16_224", depth=depth, **VIT).eval()


@pytest.fixture(scope="module")
def images():
    return load_data(subset=64, test_subset=32, seed=0)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, images):
    """A 4-block ViT trained a few steps whose blocks 1 and 3 are exact
    identities (attention and MLP outputs zero): block influence drops them."""
    model = vit(4)
    train(model, images.train, TrainConfig(steps=4, batch_size=16, lr=2e-3, progress=False))
    with torch.no_grad():
        for index in (1, 3):
            block = model.blocks[index]
            for projection in (block.attn.proj, block.mlp.fc2):
                projection.weight.zero_()
                projection.bias.zero_()
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


def vit_block_outputs(model: torch.nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Each block's output, by hand: timm's forward_features, one block at a time."""
    x = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(images))))
    outputs = []
    for block in model.blocks:
        x = block(x)
        outputs.append(x)
    return outputs


def hf_block_outputs(model: torch.nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """Each block's output, by hand: transformers' own hidden states, with the
    final norm (applied to the last of them) made an identity on a copy."""
    bare = copy.deepcopy(model)
    if hasattr(bare, "transformer"):
        bare.transformer.ln_f = torch.nn.Identity()
    else:
        bare.model.norm = torch.nn.Identity()
    states = bare(input_ids=ids, output_hidden_states=True).hidden_states
    assert len(states) == bare.config.num_hidden_layers + 1
    return list(states[1:])


# ---- the layer maps

def test_the_uniform_map_is_tinyberts_rounded_half_up():
    assert uniform_layer_map(2, 4) == [1, 3]
    assert uniform_layer_map(2, 3) == [1, 2]  # 1.5 rounds up to 2: block 1
    assert uniform_layer_map(4, 6) == [1, 2, 4, 5]  # 1.5, 3, 4.5, 6
    assert uniform_layer_map(3, 12) == [3, 7, 11]
    assert uniform_layer_map(3, 3) == [0, 1, 2]
    assert uniform_layer_map(4, 2) == [0, 0, 1, 1]  # a deeper student: pairs share a block
    assert uniform_layer_map(5, 1) == [0] * 5


def test_a_student_matches_the_blocks_its_resize_kept(teacher, lg, tmp_path):
    """select keeps the first blocks, block influence the ones that change
    their input (here 0 and 2: 1 and 3 are identities), and a distilled
    student keeps its map; anything else is matched uniformly (1 and 3)."""
    selected, influenced = tmp_path / "select.safetensors", tmp_path / "bi.safetensors"
    assert lg("shrink", teacher, "--depth", "2", "-o", selected).code == 0
    done = lg("shrink", teacher, "--depth", "2", "--method", "block-influence", "--calibrate", "fashion-mnist-mini",
              "--calibrate-samples", "16", "-o", influenced)
    assert done.code == 0, done.stderr
    chosen = lgcli.inspect_checkpoint(influenced)["provenance"][0]["options"]["chosen"]
    assert chosen["kept_layers"] == [0, 2]

    def planned(student) -> dict:
        result = lg("distill", student, "--teacher", teacher, *IMAGES, "--steps", "2", "--hidden-weight", "1",
                    "-o", tmp_path / "never.safetensors", "--dry-run", "--json")
        assert result.code == 0, result.stderr
        return json.loads(result.stdout)["hidden_layers"]

    assert planned(selected) == {"teacher_blocks": [0, 1], "from": "provenance"}
    assert planned(influenced) == {"teacher_blocks": [0, 2], "from": "provenance"}
    healed = tmp_path / "healed.safetensors"  # a distil keeps every block where it was
    assert lg("distill", influenced, "--teacher", teacher, *IMAGES, "--steps", "1", "-o", healed).code == 0
    assert planned(healed) == {"teacher_blocks": [0, 2], "from": "provenance"}
    other = tmp_path / "other.safetensors"  # another teacher's shrink: its provenance is not this teacher's
    lgcli.save_model(vit(4, seed=5), tmp_path / "other-teacher.safetensors")
    assert lg("shrink", tmp_path / "other-teacher.safetensors", "--depth", "2", "-o", other).code == 0
    assert planned(other) == {"teacher_blocks": [1, 3], "from": "uniform"}
    assert not (tmp_path / "never.safetensors").exists()


def test_a_provenance_step_that_does_not_say_where_its_blocks_came_from_falls_back_to_uniform():
    step = {"kind": "model", "method": "heur-lg", "options": {"direction": "shrink"}, "source_sha256": "t" * 64}
    assert layer_map(2, 4, step, "t" * 64) == ([1, 3], "uniform")
    kept = {"kind": "model", "method": "block-influence", "source_sha256": "t" * 64,
            "options": {"direction": "shrink", "chosen": {"kept_layers": [0, 3]}}}
    assert layer_map(2, 4, kept, "t" * 64) == ([0, 3], "provenance")
    assert layer_map(2, 4, {**kept, "options": {"chosen": {"kept_layers": [0, 9]}}}, "t" * 64)[1] == "uniform"
    # Through two steps: a select of a block-influence shrink of the teacher.
    chained = {"kind": "model", "method": "select", "options": {"direction": "shrink"}, "source_sha256": "s" * 64,
               "source": {**kept, "options": {"direction": "shrink", "chosen": {"kept_layers": [1, 2, 3]}}}}
    assert layer_map(2, 4, chained, "t" * 64) == ([1, 2], "provenance")


# ---- the term is the MSE of normalised states, entry by entry

def by_hand_normalised(states: torch.Tensor) -> torch.Tensor:
    """SPEC.md's normalised hidden state: each position's vector less its
    mean over the channels, over the root of its variance (biased) + 1e-5."""
    centred = states - states.mean(-1, keepdim=True)
    return centred / torch.sqrt((centred ** 2).mean(-1, keepdim=True) + 1e-5)


def _check_term(student, teacher, inputs, by_hand, call):
    (student_spec, _), (teacher_spec, _) = spec_of_model(student), spec_of_model(teacher)
    mapping = uniform_layer_map(student_spec.depth, teacher_spec.depth)
    with torch.no_grad():
        ours, theirs = by_hand(student, inputs), by_hand(teacher, inputs)
    expected = torch.stack([((by_hand_normalised(ours[i]) - by_hand_normalised(theirs[m])) ** 2).mean()
                            for i, m in enumerate(mapping)])
    assert (expected > 0).all()
    weight = 0.7
    with HiddenStateTerm(weight, student, student_spec, teacher, teacher_spec, mapping) as term:
        with torch.no_grad():
            teacher_logits = call(teacher, inputs)
            student_logits = call(student, inputs)
            assert torch.allclose(term.layer_mse(), expected, rtol=1e-5, atol=0)
            loss = term.loss(lambda s, y, t: (s - t).abs().sum())(student_logits, None, teacher_logits)
    base = (student_logits - teacher_logits).abs().sum()
    assert torch.allclose(loss, base + weight * expected.mean(), rtol=1e-6, atol=0)
    assert not term.student_states and not term.teacher_states  # the hooks are gone with the term
    with torch.no_grad():
        call(student, inputs)
    assert not term.student_states


def test_the_term_is_the_mean_squared_error_of_the_matched_blocks_of_a_vit():
    inputs = torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(2))
    _check_term(vit(2, seed=1), vit(4, seed=0), inputs, vit_block_outputs, lambda model, x: model(x))


@pytest.mark.parametrize("variant,depth", [("gpt2-lm", dict(n_layer=2)), ("llama-gqa", dict(num_hidden_layers=2))])
def test_the_term_is_the_mean_squared_error_of_the_matched_blocks_of_a_language_model(variant, depth):
    teacher = make_model(variant, seed=0, **({"n_layer": 3} if "n_layer" in depth else {"num_hidden_layers": 3}))
    student = make_model(variant, seed=1, **depth)
    ids = torch.randint(3, 96, (2, 10), generator=torch.Generator().manual_seed(3))
    _check_term(student, teacher, ids, hf_block_outputs, lambda model, x: model(input_ids=x).logits)


# ---- training with it

def _hidden_mse(student: torch.nn.Module, teacher: torch.nn.Module, batch: torch.Tensor) -> float:
    mapping = uniform_layer_map(len(student.blocks), len(teacher.blocks))
    with torch.no_grad():
        ours, theirs = vit_block_outputs(student, batch), vit_block_outputs(teacher, batch)
    return float(torch.stack([((by_hand_normalised(ours[i]) - by_hand_normalised(theirs[m])) ** 2).mean()
                              for i, m in enumerate(mapping)]).mean())


def test_distilling_with_the_term_lowers_the_hidden_states_mse_on_a_fixed_batch(teacher, images):
    """A live student (no provenance: matched uniformly, blocks 1 and 3)."""
    student = vit(2, seed=3)
    teacher_model = timm.create_model("vit_base_patch16_224", depth=4, **VIT, pretrained=True,
                                      pretrained_cfg_overlay=dict(file=str(teacher))).eval()
    batch, _ = images.train.batch(list(range(32)), 28, 1)
    before = _hidden_mse(student, teacher_model, batch)
    with_term, report = distill(student, teacher, images, settings=fast(steps=8, hidden_weight=10.0), **QUIET)
    without, _ = distill(student, teacher, images, settings=fast(steps=8), **QUIET)
    after = _hidden_mse(with_term, teacher_model, batch)
    assert after < 0.7 * before and after < _hidden_mse(without, teacher_model, batch)
    assert report["options"]["hidden_layers"] == {"teacher_blocks": [1, 3], "from": "uniform"}
    held_out = report["held_out"]
    assert held_out["after"]["hidden_mse"] < held_out["before"]["hidden_mse"]


def test_a_language_model_distils_with_the_term_and_loads(tmp_path):
    from text_models import load_strict, save_folder

    teacher = save_folder(make_model("llama-gqa", num_hidden_layers=3, num_key_value_heads=2), tmp_path / "teacher",
                          "llama-gqa")
    text = tmp_path / "words.txt"
    text.write_text("\n".join(" ".join(f"w{(7 * i + j) % 90 + 5}" for j in range(10)) for i in range(200)) + "\n")
    out = tmp_path / "healed"
    report = distill_file(teacher, out, teacher=teacher, data=text, seq_len=12, test_subset=4,
                          settings=fast(steps=2, batch_size=4, hidden_weight=1.0), **QUIET)
    assert report["options"]["hidden_layers"] == {"teacher_blocks": [0, 1, 2], "from": "uniform"}
    assert report["held_out"]["before"]["hidden_mse"] == 0.0  # the teacher distilled into itself
    load_strict(out, "llama-gqa")


# ---- refusals, W = 0, resume

def test_a_width_mismatch_is_refused_in_one_line_and_nothing_is_written(teacher, lg, tmp_path):
    narrow = tmp_path / "narrow.safetensors"
    assert lg("shrink", teacher, "--width", "16", "--heads", "1", "-o", narrow).code == 0
    out = tmp_path / "out.safetensors"
    result = lg("distill", narrow, "--teacher", teacher, *IMAGES, "--steps", "2", "--hidden-weight", "0.5",
                "--checkpoint-every", "1", "-o", out)
    assert result.code != 0
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("lg: error: --hidden-weight needs the "
                                                                        "student's width to be the teacher's")
    assert "is 4 x 16 and the teacher" in result.stderr and "4 x 32" in result.stderr
    assert "--hidden-weight 0" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["narrow.safetensors"]


def test_a_model_of_stages_is_refused_in_one_line(lg, tmp_path):
    from test_swin import make_swin

    swin = tmp_path / "swin.safetensors"
    lgcli.save_model(make_swin(num_classes=10), swin)
    out = tmp_path / "out.safetensors"
    result = lg("distill", swin, "--teacher", swin, *IMAGES, "--steps", "1", "--hidden-weight", "1", "-o", out)
    assert result.code != 0 and result.stderr.count("\n") == 1, result.stderr
    assert "--hidden-weight matches one stack of blocks" in result.stderr and "stages" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["swin.safetensors"]


def test_without_the_term_the_file_records_what_it_always_did(teacher, images, tmp_path):
    student = tmp_path / "student.safetensors"
    resize_file(teacher, student, direction="shrink", depth=2, notify=lambda m: None)
    plain, zero = tmp_path / "plain.safetensors", tmp_path / "zero.safetensors"
    report = distill_file(student, plain, teacher=teacher, data=images, settings=fast(steps=2), **QUIET)
    distill_file(student, zero, teacher=teacher, data=images, settings=fast(steps=2, hidden_weight=0.0), **QUIET)
    assert set(report["options"]) == OPTIONS_WITHOUT_HIDDEN and "hidden_mse" not in report["held_out"]["after"]
    assert plain.read_bytes() == zero.read_bytes()


def test_a_negative_hidden_weight_is_refused():
    with pytest.raises(lgcli.LgError, match="--hidden-weight must be a finite number >= 0"):
        DistillSettings(hidden_weight=-1.0)


def test_resuming_with_another_alpha_tau_or_hidden_weight_is_refused_naming_each(teacher, lg, tmp_path):
    student = tmp_path / "student.safetensors"
    assert lg("shrink", teacher, "--depth", "2", "-o", student).code == 0
    first = tmp_path / "first.safetensors"
    run = ["distill", student, "--teacher", teacher, *IMAGES, "--steps", "2", "--checkpoint", tmp_path / "train.pt"]
    assert lg(*run, "-o", first).code == 0
    again = tmp_path / "again.safetensors"
    result = lg(*run, "--resume", "--alpha", "0.5", "--tau", "2", "--hidden-weight", "1", "-o", again)
    assert result.code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: cannot resume "), result.stderr
    for difference in ("alpha 1.0 -> 0.5", "tau 1.0 -> 2.0", "hidden_weight 0.0 -> 1.0"):
        assert difference in lines[0], lines[0]
    assert not again.exists()
    # The same settings resume (nothing left to train: the same model again).
    assert lg(*run, "--resume", "-o", again).code == 0
    assert again.read_bytes() == first.read_bytes()
