"""lg distill: the KL from the teacher falls on a fixed batch (a timm ViT, a
Llama with grouped-query attention, a GPT-2, a BERT masked LM); the output loads strictly in
its ecosystem in the student's form and computes what the trained model
computes; a resumed run writes the same bytes as an uninterrupted one; a
shrink piped into a distill works; bad input is one line and writes nothing."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
import timm
import torch
import torch.nn.functional as F
from safetensors import safe_open

import lgcli
from lgcli.data import load_data
from lgcli.distill import DistillSettings, distill, distill_file
from lgcli.resize import resize_file

from conftest import run_lg, sharpened_teacher_and_shrink
from text_models import Sources, load_strict

VIT = dict(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
IMAGES = ["--subset", "64", "--test-subset", "32", "--batch-size", "16"]
TEXT_FAMILIES = {
    "llama-gqa": dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=44),
    "gpt2-lm": dict(n_layer=3, n_embd=32, n_head=4),
    "bert-mlm": dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64),
}
# The tiny tokenizer's words are w1..w95; a masked LM takes w4 as its mask token.
MASK_WORD = "w4"
QUIET = dict(notify=lambda message: None)


def fast(**overrides) -> DistillSettings:
    return DistillSettings(**{"steps": 6, "batch_size": 16, "lr": 2e-3, "progress": False, "device": "cpu",
                              **overrides})


@pytest.fixture(scope="module")
def images():
    return load_data(subset=64, test_subset=32, seed=0)


@pytest.fixture(scope="module")
def vits(tmp_path_factory, images):
    """A teacher (a tiny ViT trained a few steps, its head sharpened so that
    its logits are far from uniform) and its shrink to one block, the student."""
    return sharpened_teacher_and_shrink(tmp_path_factory.mktemp("vits"), images.train, **VIT)


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    """A text of the tiny tokenizer's words (w5..w95), 250 windows of 12 tokens."""
    path = tmp_path_factory.mktemp("text") / "words.txt"
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(f"w{rng.randrange(5, 96)}" for _ in range(10)) for _ in range(300)) + "\n")
    return path


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """Per family: the teacher's Hugging Face folder (with its tokenizer) and
    its shrink to 2 layers, a folder too."""
    built = Sources(tmp_path_factory)
    made = {}

    def pair(variant: str):
        if variant not in made:
            teacher, _ = built(variant, **TEXT_FAMILIES[variant])
            if variant == "bert-mlm":
                (teacher / "tokenizer_config.json").write_text(json.dumps({"mask_token": MASK_WORD}))
            student = tmp_path_factory.mktemp("student") / variant
            resize_file(teacher, student, direction="shrink", depth=2, notify=lambda m: None)
            made[variant] = teacher, student
        return made[variant]

    return pair


def kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> float:
    """Mean KL(softmax(teacher) || softmax(student)) over the rows."""
    return float(F.kl_div(F.log_softmax(student_logits.flatten(0, -2), -1),
                          F.log_softmax(teacher_logits.flatten(0, -2), -1), reduction="batchmean", log_target=True))


def load_timm(path) -> torch.nn.Module:
    """The exact line `lg inspect` prints, evaluated: a strict timm load."""
    report = lgcli.inspect_checkpoint(path)
    return eval(report["load_call"].replace("'" + str(path) + "'", repr(str(path))), {"timm": timm}).eval()


# ---- the KL falls, the output loads and runs

def test_distilling_a_vit_lowers_the_kl_on_a_fixed_batch_and_writes_a_strict_timm_file(vits, images, tmp_path):
    teacher_path, student_path = vits
    out = tmp_path / "healed.safetensors"
    report = distill_file(student_path, out, teacher=teacher_path, data=images, settings=fast(steps=8), **QUIET)
    batch, _ = images.train.batch(list(range(32)), 28, 1)
    teacher = load_timm(teacher_path)
    before, healed = load_timm(student_path), load_timm(out)  # strict timm loads, by the printed line
    with torch.no_grad():
        target = teacher(batch)
        assert kl(healed(batch), target) < 0.8 * kl(before(batch), target)
    # The report's held-out figures say the same, and the file is the student's shape.
    assert report["held_out"]["after"]["kl"] < report["held_out"]["before"]["kl"]
    assert report["steps"] == 8 and report["student"]["depth"] == 1 and report["teacher"]["depth"] == 2
    assert {"top1", "loss", "kl", "agreement"} <= set(report["held_out"]["after"])
    lg = lgcli.inspect_checkpoint(out)
    assert lg["depth"] == 1 and lg["provenance"][0]["method"] == "distill"
    options = lg["provenance"][0]["options"]
    assert options["teacher_sha256"] == hashlib.sha256(teacher_path.read_bytes()).hexdigest()
    assert options["alpha"] == 1.0 and options["steps"] == 8
    assert lg["provenance"][1]["method"] == "select"  # chained to the student's own provenance


def test_the_held_out_kl_is_of_images_prepared_as_the_models_want_them(vits, images):
    """A model that states its own mean and std (a real DINOv2's ImageNet
    ones) is scored against its teacher on images prepared that way, as it
    is trained and as its top-1 is scored, not by lg's default 0.5."""
    from lgcli.held_out import agreement
    from lgcli.preprocessing import Preprocessing, attach

    recipe = Preprocessing(mean=(0.2,), std=(0.3,), interpolation="bilinear", crop_pct=1.0, input_size=(1, 28, 28),
                           source="a test's own")
    teacher, student = (attach(load_timm(path), recipe) for path in vits)
    figures = agreement(student, teacher, images)
    prepared, _ = images.test.batch(list(range(len(images.test))), 28, 1, recipe)
    with torch.no_grad():
        student_logits, teacher_logits = student(prepared), teacher(prepared)
    assert figures["kl"] == pytest.approx(kl(student_logits, teacher_logits), rel=1e-5)
    assert figures["agreement"] == pytest.approx(
        100.0 * float((student_logits.argmax(-1) == teacher_logits.argmax(-1)).float().mean()))


RECIPE_FIELDS = dict(mean=(0.2,), std=(0.3,), interpolation="bilinear", crop_pct=1.0, input_size=(1, 28, 28))


@pytest.fixture(scope="module")
def stated(tmp_path_factory, vits):
    """The teacher written with a recipe of its own (as a real DINOv2 states
    ImageNet's mean and std), and its shrink, which carries the recipe."""
    from lgcli.preprocessing import Preprocessing, attach

    folder = tmp_path_factory.mktemp("stated")
    recipe = Preprocessing(**RECIPE_FIELDS, source="a test's own")
    teacher = folder / "teacher.safetensors"
    lgcli.save_model(attach(load_timm(vits[0]), recipe), teacher)
    student = folder / "student.safetensors"
    resize_file(teacher, student, direction="shrink", depth=1, notify=lambda m: None)
    return teacher, student, recipe


def test_a_models_own_preprocessing_feeds_distillation_and_its_figures(stated, images, tmp_path):
    """The models lg distill read from files were fed lg's default (0.5,
    0.5), not the recipe they record: on a real DINOv2 (ImageNet's mean and
    std) the distilled student then scored 20 points lower in lg eval than
    distill had reported. Now distill trains and scores on images prepared
    by the recipe, so its held-out figures are those of the written file,
    loaded as users load it."""
    from lgcli.held_out import agreement
    from lgcli.heads import model_preprocessing
    from lgcli.accuracy import evaluate_accuracy

    teacher_path, student_path, recipe = stated
    out = tmp_path / "healed.safetensors"
    report = distill_file(student_path, out, teacher=teacher_path, data=images, settings=fast(steps=2), **QUIET)
    healed, teacher = lgcli.load_model(out)[0], lgcli.load_model(teacher_path)[0]
    assert model_preprocessing(healed) == recipe == model_preprocessing(teacher)
    after = report["held_out"]["after"]
    assert after["top1"] == round(evaluate_accuracy(healed, images.test)["top1"], 4)
    assert after["kl"] == round(agreement(healed, teacher, images)["kl"], 4)
    assert report["held_out"]["teacher"]["top1"] == round(evaluate_accuracy(teacher, images.test)["top1"], 4)


def test_a_student_that_states_no_preprocessing_is_prepared_as_its_teacher(stated, vits, images, tmp_path):
    from lgcli.heads import model_preprocessing

    teacher_path, _, recipe = stated
    live = load_timm(vits[1])  # a model lg did not load: it states no recipe
    said = []
    out = tmp_path / "healed.safetensors"
    distill_file(live, out, teacher=teacher_path, data=images, settings=fast(steps=1), notify=said.append)
    assert any("states no preprocessing; its images are prepared as the teacher's" in line for line in said)
    assert model_preprocessing(lgcli.load_model(out)[0]) == recipe


def test_mean_std_and_interpolation_prepare_both_models_and_are_recorded(vits, words, texts, tmp_path, lg):
    """As lg eval, bench, condense and shrink take them: over each model's
    own recipe, for training and scoring, and the written student records
    them; a language model refuses them in one line."""
    from lgcli.accuracy import evaluate_accuracy
    from lgcli.heads import model_preprocessing
    from lgcli.preprocessing import Preprocessing

    teacher_path, student_path = vits
    out = tmp_path / "healed.safetensors"
    result = lg("distill", student_path, "--teacher", teacher_path, "--data", "fashion-mnist-mini", *IMAGES,
                "--steps", "1", "--mean", "0.2", "--std", "0.3", "--interpolation", "bicubic", "-o", out, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    healed = lgcli.load_model(out)[0]
    recipe = model_preprocessing(healed)
    assert isinstance(recipe, Preprocessing)
    assert (recipe.mean, recipe.std, recipe.interpolation) == ((0.2,), (0.3,), "bicubic")
    data = load_data(subset=64, test_subset=32, seed=0)
    assert report["held_out"]["after"]["top1"] == round(evaluate_accuracy(healed, data.test)["top1"], 4)
    teacher_folder, student_folder = texts("llama-gqa")
    refused = lg("distill", student_folder, "--teacher", teacher_folder, "--data", words, "--seq-len", "12",
                 "--steps", "1", "--mean", "0.2", "-o", tmp_path / "text")
    assert refused.code == 2 and refused.stderr.splitlines() == [
        "lg: error: --mean, --std and --interpolation prepare images; these models take tokens"]
    assert not (tmp_path / "text").exists()


@pytest.mark.parametrize("with_labels", [True, False])
def test_images_are_scored_in_three_passes_with_the_figures_of_seven(vits, with_labels):
    """The teacher runs once over the held-out images and each scoring of a
    student once (`HeldOutScores`), where the teacher's figures, and the
    student's label figures and its KL and agreement, each took a pass of
    their own before: the same figures to the bit (evaluate_accuracy and
    agreement, on 300 images, two batches), for a student fed as the
    teacher and for one that prepares its images otherwise."""
    from lgcli.accuracy import evaluate_accuracy
    from lgcli.held_out import HeldOutScores, agreement
    from lgcli.preprocessing import Preprocessing, attach

    data = load_data(subset=64, test_subset=300, seed=0)
    teacher, student = (load_timm(path) for path in vits)
    other = attach(load_timm(vits[1]), Preprocessing(mean=(0.2,), std=(0.3,), interpolation="bilinear",
                                                     crop_pct=1.0, input_size=(1, 28, 28), source="a test's own"))
    seen = {"teacher": 0, "student": 0, "other": 0}
    for name, model in (("teacher", teacher), ("student", student), ("other", other)):
        model.register_forward_hook(lambda module, inputs, output, name=name: seen.__setitem__(
            name, seen[name] + len(inputs[0])))
    scores = HeldOutScores(teacher, data, with_labels=with_labels, tau=2.0, device="cpu")
    got = {"teacher": scores.teacher(), "student": scores.student(student), "again": scores.student(student)}
    assert seen == {"teacher": 300, "student": 600, "other": 0}
    got["other"] = scores.student(other)
    assert seen == {"teacher": 600, "student": 600, "other": 300}  # the teacher once more, on the other's inputs
    scores.student(other)
    assert seen["teacher"] == 600

    def by_hand(model):
        figures = {**evaluate_accuracy(model, data.test), **agreement(model, teacher, data, tau=2.0)}
        kept = ("top1", "top5", "loss", "kl", "agreement") if with_labels else ("kl", "agreement")
        return {k: round(v, 4) for k, v in figures.items() if k in kept}

    labels = {k: round(v, 4) for k, v in evaluate_accuracy(teacher, data.test).items() if k != "images"}
    assert got["teacher"] == (labels if with_labels else {})
    assert got["student"] == got["again"] == by_hand(student)
    assert got["other"] == by_hand(other) and got["other"] != got["student"]
    # In distill's order, the student first: the teacher's pass made for it gives the teacher's figures.
    seen.update(teacher=0, student=0)
    again = HeldOutScores(teacher, data, with_labels=with_labels, tau=2.0, device="cpu")
    assert (again.student(student), again.teacher()) == (got["student"], got["teacher"])
    assert seen["teacher"] == seen["student"] == 300



@pytest.mark.parametrize("variant", ["llama-gqa", "bert-mlm"])
@pytest.mark.parametrize("with_hidden", [False, True])
def test_text_is_scored_in_two_passes_of_each_model_with_the_figures_of_seven(texts, words, variant, with_hidden,
                                                                              monkeypatch):
    """On text each scoring of the student is one pass beside the teacher
    (`HeldOutScores`), the first giving the teacher's own figures too,
    where the teacher alone, then the student alone and again beside the
    teacher, each took a pass before: the same figures to the bit
    (evaluate_text and agreement, in batches of 20 windows), for a causal
    and a masked LM (whose unmasked targets are not scored), with and
    without the hidden-state term."""
    from lgcli import held_out, text
    from lgcli.api import spec_of_model
    from lgcli.distill import read_data, read_party
    from lgcli.held_out import HeldOutScores, agreement
    from lgcli.hidden_states import HiddenStateTerm, uniform_layer_map
    from lgcli.text import evaluate_text

    teacher_path, student_path = texts(variant)
    student, teacher = read_party(student_path, "student"), read_party(teacher_path, "teacher")
    data = read_data(student, teacher, words, test_fraction=0.4, seq_len=12, **QUIET)
    vocabulary = student.model.config.vocab_size
    for module in (held_out, text):  # batches of 20 windows: the sums run over several
        monkeypatch.setattr(module, "MAX_LOGIT_ELEMENTS", 20 * 12 * vocabulary)
    windows = len(data.test)
    assert windows > 40

    def term():
        if not with_hidden:
            return None
        (student_spec, _), (teacher_spec, _) = spec_of_model(student.model), spec_of_model(teacher.model)
        return HiddenStateTerm(0.5, student.model, student_spec, teacher.model, teacher_spec,
                               uniform_layer_map(student_spec.depth, teacher_spec.depth))

    seen = {"teacher": 0, "student": 0}
    hooks = [party.model.register_forward_hook(lambda module, args, kwargs, output, name=name: seen.__setitem__(
        name, seen[name] + len(kwargs["input_ids"])), with_kwargs=True)
        for name, party in (("teacher", teacher), ("student", student))]
    scores = HeldOutScores(teacher.model, data, with_labels=True, tau=2.0, device="cpu")
    got = {"student": scores.student(student.model, hidden=term()), "teacher": scores.teacher(),
           "again": scores.student(student.model, hidden=term())}
    kept = variant == "bert-mlm" and not with_hidden  # its few masked tokens' teacher logits fit: kept, run once
    assert seen == {"teacher": (1 if kept else 2) * windows, "student": 2 * windows}
    for hook in hooks:
        hook.remove()

    def rounded(figures):
        return {k: round(v, 4) for k, v in figures.items() if k != "tokens"}

    expected = {**rounded(evaluate_text(student.model, data.test)),
                **rounded(agreement(student.model, teacher.model, data, tau=2.0, hidden=term()))}
    assert got["student"] == got["again"] == expected
    assert set(expected) == {"loss", "perplexity", "kl", "agreement", *(("hidden_mse",) if with_hidden else ())}
    assert got["teacher"] == rounded(evaluate_text(teacher.model, data.test))


def test_a_long_scoring_pass_says_how_long_and_how_many_examples_take_less(vits, monkeypatch):
    """A pass whose first batch says it will be long (a real LLM's windows
    on a CPU) says so once, with the --test-subset that takes about
    ANNOUNCE_PASS_ABOVE_SECONDS; a short one says nothing."""
    from lgcli import pace
    from lgcli.held_out import HeldOutScores

    data = load_data(subset=64, test_subset=300, seed=0)
    teacher, student = (load_timm(path) for path in vits)
    said = []
    quiet = HeldOutScores(teacher, data, with_labels=True, tau=1.0, device="cpu", notify=said.append,
                          fewer_flag="--test-subset")
    quiet.teacher(), quiet.student(student)
    assert said == []
    clock = iter(range(0, 1000, 10))  # every reading of the clock 10 s after the last: a batch takes 10 s
    monkeypatch.setattr(pace, "clock", lambda: float(next(clock)))
    monkeypatch.setattr(pace, "ANNOUNCE_PASS_ABOVE_SECONDS", 1.0)
    slow = HeldOutScores(teacher, data, with_labels=True, tau=1.0, device="cpu", notify=said.append,
                         fewer_flag="--test-subset")
    slow.teacher(), slow.student(student)
    # 10 s for the first 256 images: 44 left take 1.7 s; 25 images take 1 s.
    assert said == ["scoring the teacher on 300 held-out images: about 2 s more (--test-subset 25: about 1 s a pass)",
                    "scoring the student on 300 held-out images: about 2 s more (--test-subset 25: about 1 s a pass)"]


def test_without_scoring_the_same_model_is_trained_and_no_held_out_example_is_seen(vits, images):
    """lg bench's cells probe the student themselves: `score=False` trains
    the same student to the bit and runs neither model on the held-out split."""
    teacher_path, student_path = vits
    scored_model, scored = distill(student_path, teacher_path, images, settings=fast(steps=3), **QUIET)
    seen = []
    teacher = load_timm(teacher_path)
    teacher.register_forward_hook(lambda module, inputs, output: seen.append(len(inputs[0])))
    model, report = distill(student_path, teacher, images, settings=fast(steps=3), score=False, **QUIET)
    assert report["held_out"] == {} and set(scored["held_out"]) == {"teacher", "before", "after"}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in scored_model.state_dict().items())
    assert sum(seen) == 3 * 16  # the teacher's logits of the three training batches, nothing more


def test_logits_too_many_to_keep_run_the_teacher_beside_the_student(vits, monkeypatch):
    """Tens of thousands of classes over a large split would keep gigabytes:
    above MAX_LOGIT_ELEMENTS the teacher runs beside the student as before,
    with the same figures."""
    from lgcli import held_out
    from lgcli.held_out import HeldOutScores

    data = load_data(subset=64, test_subset=300, seed=0)
    teacher, student = (load_timm(path) for path in vits)
    kept = HeldOutScores(teacher, data, with_labels=True, tau=1.0, device="cpu")
    expected = (kept.teacher(), kept.student(student))
    monkeypatch.setattr(held_out, "MAX_LOGIT_ELEMENTS", 299 * 10)  # 300 images x 10 classes do not fit
    seen = []
    teacher.register_forward_hook(lambda module, inputs, output: seen.append(len(inputs[0])))
    beside = HeldOutScores(teacher, data, with_labels=True, tau=1.0, device="cpu")
    assert (beside.teacher(), beside.student(student)) == expected
    assert sum(seen) == 600  # its own pass, then beside the student


def test_the_returned_model_is_what_the_file_holds_and_the_student_given_is_kept(vits, images, tmp_path):
    teacher_path, student_path = vits
    student = load_timm(student_path)
    kept = {k: v.clone() for k, v in student.state_dict().items()}
    model, report = distill(student, teacher_path, images, settings=fast(steps=2), **QUIET)
    assert all(torch.equal(kept[k], v) for k, v in student.state_dict().items())  # a live student is copied
    out = tmp_path / "from_live.safetensors"
    distill_file(student, out, teacher=teacher_path, data=images, settings=fast(steps=2), **QUIET)
    batch, _ = images.train.batch(list(range(8)), 28, 1)
    with torch.no_grad():
        assert torch.equal(load_timm(out)(batch), model(batch))


@pytest.mark.parametrize("variant", sorted(TEXT_FAMILIES))
def test_distilling_a_language_model_lowers_the_kl_and_writes_a_folder_that_loads(variant, texts, words,
                                                                                  tmp_path):
    teacher_path, student_path = texts(variant)
    out = tmp_path / "healed"
    # Pure distillation: the teacher's logits alone (text's default mixes in the next tokens of these random words).
    report = distill_file(student_path, out, teacher=teacher_path, data=words, seq_len=12,
                          settings=fast(steps=8, batch_size=8, alpha=1.0), test_subset=8, **QUIET)
    ids = torch.randint(5, 96, (4, 12), generator=torch.Generator().manual_seed(1))
    teacher, before, healed = (load_strict(path, variant) for path in (teacher_path, student_path, out))
    with torch.no_grad():
        target = teacher(input_ids=ids).logits
        assert kl(healed(input_ids=ids).logits, target) < 0.9 * kl(before(input_ids=ids).logits, target)
    assert (out / "tokenizer.json").read_bytes() == (teacher_path / "tokenizer.json").read_bytes()
    assert healed.config.num_hidden_layers == 2
    card = (out / "README.md").read_text()
    assert "distilled from a teacher" in card and "resized" not in card
    assert f"distilled from `{teacher_path}` on words.txt for 8 steps: held-out perplexity" in card
    assert {"loss", "perplexity", "kl", "agreement"} <= set(report["held_out"]["after"])
    assert report["held_out"]["after"]["kl"] < report["held_out"]["before"]["kl"]


def test_the_output_keeps_the_students_dtype(vits, images, tmp_path):
    teacher_path, student_path = vits
    half = tmp_path / "bf16.safetensors"
    lgcli.save_model(load_timm(student_path), half, dtype=torch.bfloat16)
    out = tmp_path / "out.safetensors"
    distill_file(half, out, teacher=teacher_path, data=images, settings=fast(steps=1), **QUIET)
    with safe_open(str(out), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


# ---- resume

class Stop(Exception):
    pass


def test_a_resumed_run_writes_the_same_bytes_as_an_uninterrupted_one(vits, images, tmp_path):
    teacher_path, student_path = vits
    whole = tmp_path / "whole.safetensors"
    distill_file(student_path, whole, teacher=teacher_path, data=images, settings=fast(), **QUIET)

    def stop_at_4(step, model):
        if step == 4:
            raise Stop  # a run killed right after its step-4 checkpoint

    resumed = tmp_path / "resumed.safetensors"
    checkpoint = str(tmp_path / "run.pt")
    with pytest.raises(Stop):
        distill_file(student_path, resumed, teacher=teacher_path, data=images, on_step=stop_at_4, **QUIET,
                     settings=fast(checkpoint=checkpoint, checkpoint_every=2))
    assert not resumed.exists()
    report = distill_file(student_path, resumed, teacher=teacher_path, data=images, **QUIET,
                          settings=fast(checkpoint=checkpoint, resume=True))
    assert report["resumed_from"] == 4
    assert resumed.read_bytes() == whole.read_bytes()


def test_a_resumed_finished_run_says_it_trained_no_step(vits, lg, tmp_path):
    """As lg condense does: a --resume says where it resumed, here of a run that had ended."""
    teacher_path, student_path = vits
    checkpoint = tmp_path / "run.pt"
    common = ("distill", student_path, "--teacher", teacher_path, "--data", "fashion-mnist-mini", *IMAGES,
              "--steps", "2", "--checkpoint", checkpoint, "--checkpoint-every", "1")
    first = lg(*common, "-o", tmp_path / "a.safetensors")
    assert first.code == 0 and "distilled 1 x 32 from 2 x 32 in 2 steps," in first.stderr, first.stderr
    again = lg(*common, "--resume", "-o", tmp_path / "b.safetensors")
    assert again.code == 0, again.stderr
    assert "resumed at step 2 of 2: no step left to train" in again.stderr
    assert (tmp_path / "b.safetensors").read_bytes() == (tmp_path / "a.safetensors").read_bytes()


# ---- pipes and the command line

def test_a_shrink_piped_into_a_distill_heals_the_shrunk_model(vits, tmp_path):
    teacher_path, _ = vits
    shrunk = run_lg("shrink", teacher_path, "--depth", "1", "-o", "-")
    assert shrunk.code == 0, shrunk.stderr
    out = tmp_path / "small.safetensors"
    healed = run_lg("distill", "-", "--teacher", teacher_path, "--data", "fashion-mnist-mini", "--steps", "3",
                    *IMAGES, "--device", "cpu", "-o", out, "--json", stdin=shrunk.stdout)
    assert healed.code == 0, healed.stderr
    report = json.loads(healed.stdout)
    assert report["steps"] == 3 and report["output"] == str(out)
    chain = lgcli.inspect_checkpoint(out)["provenance"]
    assert [step.get("method") for step in chain[:2]] == ["distill", "select"]
    assert load_timm(out) is not None


def test_a_language_model_piped_through_distill_keeps_its_tokenizer(texts, words, tmp_path):
    teacher_path, _ = texts("llama-gqa")
    shrunk = run_lg("shrink", teacher_path, "--depth", "2", "-o", "-")
    assert shrunk.code == 0, shrunk.stderr
    out = tmp_path / "small"
    healed = run_lg("distill", "-", "--teacher", teacher_path, "--data", words, "--seq-len", "12", "--steps", "2",
                    "--batch-size", "4", "--test-subset", "4", "--device", "cpu", "-o", out, stdin=shrunk.stdout)
    assert healed.code == 0, healed.stderr
    assert "perplexity" in healed.stderr and "wrote" in healed.stderr
    load_strict(out, "llama-gqa")
    assert (out / "tokenizer.json").read_bytes() == (teacher_path / "tokenizer.json").read_bytes()


def test_a_live_language_model_takes_the_teachers_tokenizer(texts, words, tmp_path):
    """A model handed in from Python has no files to name a tokenizer: it is
    tokenized as its teacher is, not refused as bytes against tokenizer.json,
    and the folder written holds that tokenizer."""
    teacher_path, student_path = texts("llama-gqa")
    live = load_strict(student_path, "llama-gqa")
    out = tmp_path / "healed"
    report = distill_file(live, out, teacher=teacher_path, data=words, seq_len=12,
                          settings=fast(steps=1, batch_size=4), test_subset=4, **QUIET)
    assert report["data"]["tokenizer"].startswith("tokenizer.json") and report["steps"] == 1
    assert (out / "tokenizer.json").read_bytes() == (teacher_path / "tokenizer.json").read_bytes()
    assert load_strict(out, "llama-gqa").config.num_hidden_layers == 2


def test_a_dry_run_plans_and_writes_nothing(vits, lg, tmp_path):
    teacher_path, student_path = vits
    out = tmp_path / "planned.safetensors"
    result = lg("distill", student_path, "--teacher", teacher_path, "--data", "fashion-mnist-mini", *IMAGES,
                "--steps", "40", "--device", "cpu", "-o", out, "--dry-run", "--json")
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["dry_run"] and plan["steps"] == 40 and plan["estimated_seconds"] > 0
    assert not out.exists()


@pytest.fixture(scope="module")
def foreign(tmp_path_factory, texts):
    """Teachers that do not fit a student: another family, another vocabulary, other classes."""
    folder = tmp_path_factory.mktemp("foreign")
    llama, _ = texts("llama-gqa")
    small_vocabulary = Sources(tmp_path_factory)("llama-gqa", vocab_size=80, **TEXT_FAMILIES["llama-gqa"])[0]
    torch.manual_seed(0)
    five = folder / "five.safetensors"
    lgcli.save_model(timm.create_model("vit_base_patch16_224", **{**VIT, "num_classes": 5}).eval(), five)
    return {"llama": llama, "llama-80": small_vocabulary, "vit-5": five}


BAD = {
    "another family": (("vits", 1), ("llama",), [], "is a llama model and the student"),
    "another vocabulary": (("texts",), ("llama-80",), ["--seq-len", "12"], "vocabulary has 80 tokens"),
    "other classes": (("vits", 1), ("vit-5",), [], "the teacher has 5 classes and the student 10"),
    "text for an image model": (("vits", 1), ("vits", 0), ["--data", "kjv-mini"], "kjv-mini is a text"),
    "images for a language model": (("texts",), ("texts",), ["--data", "fashion-mnist-mini"],
                                    "is an image dataset"),
    "no steps": (("vits", 1), ("vits", 0), ["--steps", "0"], "--steps must be a whole number >= 1"),
    "negative steps": (("vits", 1), ("vits", 0), ["--steps", "-2"], "--steps must be a whole number >= 1"),
    "alpha out of range": (("vits", 1), ("vits", 0), ["--alpha", "1.5"], "--alpha must be"),
    "both from stdin": (("stdin",), ("stdin",), [], "stdin ('-') can be read only once"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_nothing_is_written(case, vits, texts, foreign, words, lg, tmp_path):
    student_of, teacher_of, extra, message = BAD[case]

    def path(which):
        if which[0] == "vits":
            return vits[which[1]]
        if which[0] == "texts":
            return texts("llama-gqa")[1 if which is student_of else 0]
        if which[0] == "stdin":
            return "-"
        return foreign[which[0]]

    student, teacher = path(student_of), path(teacher_of)
    data = ["--data", words if student_of == ("texts",) else "fashion-mnist-mini"]
    out = tmp_path / "out"
    result = lg("distill", student, "--teacher", teacher, *data, *IMAGES[:4], "--steps", "2", *extra, "-o", out)
    assert result.code != 0
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("lg: error: "), result.stderr
    assert message in result.stderr, result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_existing_output_is_kept_without_force(vits, lg, tmp_path):
    teacher_path, student_path = vits
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"mine")
    args = ["distill", student_path, "--teacher", teacher_path, "--data", "fashion-mnist-mini", *IMAGES,
            "--steps", "1", "--device", "cpu", "-o", out]
    refused = lg(*args)
    assert refused.code != 0 and refused.stderr.count("\n") == 1 and "--force" in refused.stderr
    assert out.read_bytes() == b"mine"
    assert lg(*args, "--force").code == 0 and out.read_bytes() != b"mine"


def test_labels_of_other_classes_are_refused_for_the_cross_entropy_but_not_for_pure_distillation(foreign, images,
                                                                                                  tmp_path):
    five = foreign["vit-5"]  # 5 classes; the data have 10: a teacher of the student's own 5 still teaches
    with pytest.raises(lgcli.LgError, match="--alpha below 1 needs labels of the models' classes"):
        distill(five, five, images, settings=fast(alpha=0.5), **QUIET)
    _, report = distill(five, five, images, settings=fast(steps=1), **QUIET)
    assert "top1" not in report["held_out"]["after"] and report["held_out"]["before"]["kl"] == 0.0


def test_the_default_alpha_is_half_on_text_and_one_on_images_and_a_given_one_is_kept(vits, images, texts, words,
                                                                                     monkeypatch):
    """Text always has its labels, and half of them healed to a lower
    perplexity (benchmarks/distill_alpha.py): the loss a run trains on is the
    one its report and file name, and the settings given stay as they were."""
    import lgcli.distill as module

    built, real = [], module.distillation_loss
    monkeypatch.setattr(module, "distillation_loss", lambda alpha, tau: built.append(alpha) or real(alpha, tau))
    teacher, student = texts("llama-gqa")
    for given, used in ((None, 0.5), (1.0, 1.0), (0.0, 0.0)):
        settings = fast(steps=1, batch_size=8, alpha=given)
        _, report = distill(student, teacher, words, seq_len=12, settings=settings, test_subset=8, **QUIET)
        assert (report["options"]["alpha"], built[-1], settings.alpha) == (used, used, given)
    teacher, student = vits
    for given, used in ((None, 1.0), (0.5, 0.5)):
        _, report = distill(student, teacher, images, settings=fast(steps=1, alpha=given), **QUIET)
        assert (report["options"]["alpha"], built[-1]) == (used, used)


def test_until_stops_at_the_first_check_that_reaches_the_fraction(vits, images):
    teacher_path, student_path = vits
    messages = []
    _, report = distill(student_path, teacher_path, images, settings=fast(steps=20, until=0.01, until_every=2),
                        notify=messages.append)
    assert report["steps"] == 2 and report["until"]["stopped"] == "reached 0.01 of the teacher"
    assert [check["step"] for check in report["until"]["checks"]] == [0, 2]
    assert any(m.startswith("distill: stopping at step 2") for m in messages)


def test_a_training_checkpoint_in_the_way_is_refused_without_resume_or_force(vits, lg, tmp_path):
    teacher_path, student_path = vits
    out = tmp_path / "out.safetensors"
    (tmp_path / "out.safetensors.train.pt").write_bytes(b"an earlier run")
    result = lg("distill", student_path, "--teacher", teacher_path, "--data", "fashion-mnist-mini", *IMAGES,
                "--steps", "2", "--checkpoint-every", "1", "-o", out)
    assert result.code != 0 and result.stderr.count("\n") == 1 and "--resume" in result.stderr, result.stderr
    assert not out.exists() and (tmp_path / "out.safetensors.train.pt").read_bytes() == b"an earlier run"


def test_a_hugging_face_image_classifier_is_healed_into_a_folder_of_its_own(images, tmp_path):
    import transformers

    from hf_image_models import load_strict as load_hf, non_trivial

    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    image_size=16, patch_size=4, num_labels=10, num_channels=1)
    torch.manual_seed(0)
    teacher = tmp_path / "teacher"
    non_trivial(transformers.ViTForImageClassification(config)).save_pretrained(teacher)
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5],
                                   image_std=[0.5]).save_pretrained(teacher)  # one channel
    student, out = tmp_path / "student", tmp_path / "healed"
    resize_file(teacher, student, direction="shrink", depth=1, notify=lambda m: None)
    report = distill_file(student, out, teacher=teacher, data=images, settings=fast(steps=2), **QUIET)
    healed = load_hf(out, "ViTForImageClassification")
    assert healed.config.num_hidden_layers == 1 and report["steps"] == 2
    assert (out / "preprocessor_config.json").read_bytes() == (teacher / "preprocessor_config.json").read_bytes()
    pixels = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.isfinite(healed(pixel_values=pixels).logits).all()
    # A live transformers model (its live names are not its saved ones) is written back as the family's folder.
    model, _ = distill(healed, teacher, images, settings=fast(steps=1), **QUIET)
    again = tmp_path / "again"
    lgcli.save_model(model, again)
    with torch.no_grad():
        assert torch.equal(load_hf(again, "ViTForImageClassification")(pixel_values=pixels).logits,
                           model(pixel_values=pixels).logits)


# ---- a run that left the student worse says so

@pytest.mark.parametrize("before, after, said", [
    ({"kl": 16.6, "loss": 0.4}, {"kl": 37.8, "loss": 0.9}, "KL 16.6 -> 37.8, loss 0.4 -> 0.9"),
    ({"kl": 16.6}, {"kl": 37.8}, "KL 16.6 -> 37.8"),  # no labels of the model's classes: the KL alone
    ({"kl": 1.0, "loss": 2.0}, {"kl": 1.5, "loss": 1.5}, ""),  # a risen KL bought a lower loss (--alpha below 1)
    ({"kl": 1.0, "loss": 2.0}, {"kl": 0.5, "loss": 2.5}, ""),
    ({"kl": 1.0, "loss": 2.0}, {"kl": 1.0, "loss": 2.0}, ""),  # unchanged is not worse
])
def test_worse_is_a_risen_kl_and_a_risen_loss_where_there_is_one(before, after, said):
    from lgcli.held_out import worsened

    assert worsened(before, after) == said


def test_a_run_that_leaves_the_student_further_from_its_teacher_says_so_in_one_line(vits, images):
    """The teacher as its own student (KL 0) at a rate far too high for two
    steps: the run ends worse on both counts, and lg says so, with the
    flags that would change it; a run that heals says nothing of the kind."""
    teacher_path, student_path = vits
    said: list[str] = []
    _, report = distill(teacher_path, teacher_path, images, settings=fast(steps=2, lr=0.3), notify=said.append)
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert before["kl"] == 0 and after["kl"] > 0 and after["loss"] > before["loss"]
    worse = [line for line in said if "further from its teacher" in line]
    assert worse == [f"distill: the student ended further from its teacher than it started (held-out KL 0 -> "
                     f"{after['kl']:.4g}, loss {before['loss']:.4g} -> {after['loss']:.4g}): 2 steps at rate 0.3 "
                     f"with no warm-up were too few for that rate; give more --steps (the first 10 % warm up "
                     f"unless --warmup is given) or a lower --lr"]
    said.clear()
    _, healed = distill(student_path, teacher_path, images, settings=fast(steps=8), notify=said.append)
    assert healed["held_out"]["after"]["kl"] < healed["held_out"]["before"]["kl"]
    assert not [line for line in said if "further from its teacher" in line]


# ---- a dry run counts the held-out scoring

@pytest.mark.parametrize("data", ["images", "text"])
def test_a_dry_runs_time_adds_the_scoring_passes_of_both_models(data, vits, images, texts, words, monkeypatch):
    """Each model's batch takes a set time here (student 0.5 s, teacher 2 s):
    on images the teacher scores once and the student twice over
    ceil(examples / 256) batches; on text both run in both passes, in the
    batches evaluate_text takes; the plan's time is the training's plus that."""
    import lgcli.held_out as held_out

    monkeypatch.setattr(held_out, "_batch_seconds",
                        lambda model, batches, size, target: 2.0 if model is teachers[0] else 0.5)
    teachers: list = []
    real_read = lgcli.distill.read_party

    def read(source, role, *args, **kwargs):
        party = real_read(source, role, *args, **kwargs)
        if role == "teacher":
            teachers.append(party.model)
        return party

    monkeypatch.setattr(lgcli.distill, "read_party", read)
    if data == "images":
        teacher, student = vits
        _, plan = distill(student, teacher, load_data(subset=64, test_subset=300, seed=0), settings=fast(steps=4),
                          dry_run=True, **QUIET)
        assert plan["scoring"] == {"examples": 300, "passes": {"student": 2, "teacher": 1}, "batch_size": 256,
                                   "estimated_seconds": 2 * (2 * 0.5 + 1 * 2.0)}
    else:
        teacher, student = texts("llama-gqa")
        _, plan = distill(student, teacher, words, seq_len=12, test_subset=20, settings=fast(steps=4, batch_size=4),
                          dry_run=True, **QUIET)
        size = plan["scoring"]["batch_size"]
        assert size == 256  # evaluate_text's batch: the tiny vocabulary's logits are far under MAX_LOGIT_ELEMENTS
        batches = -(-20 // size)
        assert plan["scoring"] == {"examples": 20, "passes": {"student": 2, "teacher": 2}, "batch_size": size,
                                   "estimated_seconds": round(batches * 2 * (0.5 + 2.0), 1)}
    scoring = plan["scoring"]["estimated_seconds"]
    assert plan["estimated_seconds"] == pytest.approx(plan["seconds_per_step"] * 4 + scoring)
