"""Learngenes on text: TLEG and WAVE condensed from GPT-2, Llama and BERT
teachers on text, PEG sampled from them, each grown into a folder that
loads strictly and carries the teacher's tokenizer; the model a learngene
trains through computes what the family's own model computes; distillation
scores a token window's scored positions only."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from lgcli.api import load
from lgcli.arch import get_adapter
from lgcli.learngenes import GeneratedModel, get_kind
from lgcli.sizing import target_spec
from lgcli.losses import IGNORE, distillation_loss

from text_models import POSITIONS, Sources, load_strict, outputs, relative_error, token_ids

FAMILIES = {
    "gpt2": ("gpt2-lm", dict(n_layer=2, n_embd=32, n_head=4)),
    "llama-gqa": ("llama-gqa", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=44)),
    "llama-mha": ("llama-mha", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                    intermediate_size=48)),
    "bert": ("bert-mlm", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)),
}
# The tiny tokenizer's words are w1..w95; BERT's masking takes w4 as its mask token.
MASK_WORD = "w4"
QUICK = ["--steps", "2", "--batch-size", "4", "--seq-len", "12", "--test-subset", "4"]


def quick(kind: str) -> list[str]:
    """QUICK for a kind that trains; PEG, sampled, refuses the training flags."""
    return QUICK if kind != "peg" else QUICK[4:]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    built = Sources(tmp_path_factory)

    def source(family: str):
        folder, model = built(FAMILIES[family][0], **FAMILIES[family][1])
        if family == "bert":
            (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": MASK_WORD}))
        return folder, model

    return source


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    """A text of the tiny tokenizer's words (3 000 of them: 250 windows of 12)."""
    path = tmp_path_factory.mktemp("text") / "words.txt"
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(f"w{rng.randrange(5, 96)}" for _ in range(10)) for _ in range(300)) + "\n")
    return path


# ---- the model a learngene trains through

@pytest.mark.parametrize("family", ["gpt2", "llama-gqa", "bert"])
@pytest.mark.parametrize("kind", ["tleg", "wave"])
def test_a_generated_model_computes_what_the_family_model_computes(kind, family, sources):
    """functional_call on the meta skeleton, with the built weights and the
    family's buffers (BERT's position and token type ids, RoPE's
    frequencies), gives the logits of a real model holding those weights."""
    folder, _ = sources(family)
    spec = load(folder).spec
    aux = target_spec(spec, depth=3)
    learngene_kind = get_kind(kind)
    adapter = get_adapter(spec.family)
    trainable, frozen = learngene_kind.initial(aux, adapter.random_stack(aux, seed=0),
                                               dict(alpha=0.5, tau=1.0, template_dim=None, templates=None,
                                                    depths=None), torch.Generator().manual_seed(0))
    generated = GeneratedModel(aux, learngene_kind.build, trainable, frozen).eval()
    real = adapter.load_model(aux, generated.materialise()).eval()
    ids = token_ids()
    with torch.no_grad():
        got = generated(input_ids=ids).logits
    assert relative_error(got, outputs(real, ids)) < 1e-5
    assert generated.config.vocab_size == real.config.vocab_size


# ---- condense, grow, load

GROW = {"tleg": ["--depth", "5"], "wave": ["--depth", "3", "--width", "64"], "peg": ["--depth", "3", "--heads", "6"]}


def condense_cases():
    for kind in ("tleg", "wave", "peg"):
        for family in ("gpt2", "llama-gqa", "bert") if kind != "peg" else ("gpt2", "llama-mha", "bert"):
            yield pytest.param(kind, family, id=f"{kind}-{family}")


@pytest.mark.parametrize("kind, family", list(condense_cases()))
def test_a_text_learngene_grows_into_a_folder_that_loads(kind, family, sources, words, lg, tmp_path):
    folder, _ = sources(family)
    variant = FAMILIES[family][0]
    gene = tmp_path / "gene.lg.safetensors"
    condensed = lg("condense", folder, "--method", kind, "--data", words, *quick(kind), "--aux-depth", "2",
                   "-o", gene, "--json")
    assert condensed.code == 0, condensed.stderr
    report = json.loads(condensed.stdout)
    # Scored on the text as a language model: a loss per token and its perplexity, beside the teacher's.
    assert report["data"]["task"] == ("masked-lm" if family == "bert" else "causal-lm")
    assert report["data"]["tokenizer"].startswith("tokenizer.json")
    for key in ("loss", "teacher_loss"):
        assert 0 < report[key]["loss"] < 20 and report[key]["perplexity"] == pytest.approx(
            torch.tensor(report[key]["loss"]).exp().item(), rel=1e-3)

    inspected = json.loads(lg("inspect", gene, "--json").stdout)
    assert inspected["task"] == report["data"]["task"] and inspected["family"] == variant.split("-")[0]
    assert inspected["kv_heads"] == FAMILIES[family][1].get("num_key_value_heads", inspected["heads"])

    out = tmp_path / "grown"
    grown = lg("grow", gene, *GROW[kind], "-o", out)
    assert grown.code == 0, grown.stderr
    model = load_strict(out, variant)
    logits = outputs(model, token_ids())
    assert torch.isfinite(logits).all()
    # The teacher's tokenizer came through the learngene file, byte for byte.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (folder / name).read_bytes()


@pytest.mark.parametrize("kind, family", [("wave", "llama-gqa"), ("peg", "gpt2"), ("wave", "bert")])
def test_growing_fits_on_text_with_the_learngenes_tokenizer(kind, family, sources, words, lg, tmp_path):
    folder, _ = sources(family)
    gene = tmp_path / "gene.lg.safetensors"
    assert lg("condense", folder, "--method", kind, "--data", words, *quick(kind), "-o", gene).code == 0
    result = lg("grow", gene, *GROW[kind], "--data", words, "--steps", "3", "--batch-size", "4", "-o",
                tmp_path / "out", "--json")
    assert result.code == 0, result.stderr
    details = json.loads(result.stdout)["details"]
    assert details["fitted"] is True and details["steps"] == 3
    # Tokenized with the tokenizer the learngene carries from its teacher.
    assert details["data"]["tokenizer"] == f"tokenizer.json of {gene}"
    assert details["data"]["task"] == ("masked-lm" if family == "bert" else "causal-lm")
    load_strict(tmp_path / "out", FAMILIES[family][0])


def test_wave_templates_follow_gqa_and_an_mlp_the_width_does_not_divide(sources):
    """k and v have fewer rows than q under GQA, so they are not fused into
    qkv; an MLP of 44 at width 32 gets 44-row templates (Table C.2's 32 x 32
    blocks where the width divides)."""
    from lgcli.learngenes.wave import template_config, wave_roles

    spec = load(sources("llama-gqa")[0]).spec
    roles = wave_roles(["q", "k", "v", "o", "gate", "fc1", "fc2", "norm1_weight"], spec)
    assert roles == ["q", "k", "v", "o", "gate", "fc1", "fc2", "norm1_weight"]
    config = template_config(spec, roles, None, {})
    assert config["q"] == {"shape": [32, 32], "count": 2}
    assert config["k"] == {"shape": [16, 32], "count": 2}  # 2 kv heads of 8
    assert config["gate"] == {"shape": [44, 32], "count": 8} and config["fc2"] == {"shape": [32, 44], "count": 8}
    mha = load(sources("llama-mha")[0]).spec
    assert wave_roles(["q", "k", "v", "q_bias"], mha) == ["qkv", "qkv_bias"]
    assert template_config(mha, ["qkv"], None, {})["qkv"] == {"shape": [32, 32], "count": 6}


# ---- refusals

def test_a_text_encoder_is_refused_as_a_teacher_in_one_line(words, lg, tmp_path):
    built = Sources(type("F", (), {"mktemp": lambda self, name: tmp_path / name})())
    (tmp_path / "bert-model").mkdir()
    folder, _ = built("bert-model", num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                      intermediate_size=64)
    result = lg("condense", folder, "--method", "tleg", "--data", words, *QUICK, "-o", tmp_path / "g")
    assert result.code != 0 and len(result.stderr.strip().splitlines()) == 1
    assert "text encoder without a language-model head" in result.stderr
    assert not (tmp_path / "g").exists()


def test_an_image_dataset_is_refused_for_a_text_teacher(sources, lg, tmp_path):
    result = lg("condense", sources("gpt2")[0], "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "1",
                "-o", tmp_path / "g")
    assert result.code != 0 and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("key, value", [("companion:../escape.json", "{}"), ("companion:x/tokenizer.json", "{}"),
                                        ("companion-base64:tokenizer.model", "not base64!")])
def test_carried_files_with_a_bad_name_or_encoding_are_refused(key, value, lg, tmp_path):
    path = tmp_path / "hostile.safetensors"
    save_file({"w": torch.zeros(2)}, str(path), metadata={"format": "pt", key: value})
    result = lg("inspect", path)
    assert result.code != 0 and len(result.stderr.strip().splitlines()) == 1
    assert "refused" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "escape.json").exists()


# ---- distillation on token windows

def test_distillation_scores_the_scored_positions_only():
    """(1 - alpha) CE + alpha tau^2 KL, both means over the positions whose
    target is not IGNORE, computed here position by position."""
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    targets = torch.tensor([[1, IGNORE, 4], [IGNORE, IGNORE, 0]])
    alpha, tau = 0.3, 2.0
    scored = [(b, t) for b in range(2) for t in range(3) if targets[b, t] != IGNORE]
    ce = sum(-F.log_softmax(student[b, t], -1)[targets[b, t]] for b, t in scored) / len(scored)
    kl = sum((F.softmax(teacher[b, t] / tau, -1) * (F.log_softmax(teacher[b, t] / tau, -1)
                                                    - F.log_softmax(student[b, t] / tau, -1))).sum()
             for b, t in scored) / len(scored)
    expected = (1 - alpha) * ce + alpha * tau * tau * kl
    assert distillation_loss(alpha, tau)(student, targets, teacher).item() == pytest.approx(expected.item(), rel=1e-5)
    # Images are one position each: the same formula over the batch.
    images, labels, soft = torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), torch.randn(4, 5)
    image_kl = F.kl_div(F.log_softmax(images / tau, -1), F.log_softmax(soft / tau, -1), reduction="batchmean",
                        log_target=True)
    assert distillation_loss(alpha, tau)(images, labels, soft).item() == pytest.approx(
        ((1 - alpha) * F.cross_entropy(images, labels) + alpha * tau * tau * image_kl).item(), rel=1e-6)


def test_positions_limit_the_window(sources, words, lg, tmp_path):
    result = lg("condense", sources("gpt2")[0], "--method", "tleg", "--data", words, "--steps", "1",
                "--seq-len", str(POSITIONS + 1), "-o", tmp_path / "g")
    assert result.code != 0 and "positions" in result.stderr and not (tmp_path / "g").exists()


def test_bench_compares_text_initialisations_by_test_loss(sources, words, tmp_path):
    """lg bench on a language model: every cell probed on the text with the
    ancestry's tokenizer, compared by test loss (lower is better)."""
    from lgcli.bench import BenchSettings, bench, parse_sizes
    from lgcli.bench_tables import markdown_table
    from lgcli.evaluate import LOSS, ProbeSettings, steps_to_reach

    folder, _ = sources("llama-gqa")
    settings = BenchSettings(sizes=parse_sizes("1x32,2x64"), methods=["select", "clone", "tleg", "wave+fit"],
                             probe=ProbeSettings(steps=4, eval_every=2, batch_size=8, progress=False),
                             condense_steps=2, condense_batch_size=8, fit_steps=2, subset="32", test_subset="8")
    report = bench(folder, str(words), tmp_path / "bench", settings, notify=lambda message: None)
    assert report["measure"] == "loss" and report["data"]["task"] == "causal-lm"
    assert report["data"]["tokenizer"].startswith("tokenizer.json")
    cells = {(c["method"], c["size"]): c for c in report["cells"]}
    done = {key for key, cell in cells.items() if cell["status"] == "done"}
    assert {("select", "1x32"), ("tleg", "1x32"), ("clone", "2x64"), ("wave+fit", "2x64"),
            ("random", "1x32"), ("random", "2x64")} <= done
    for key in done:
        row = cells[key]["row"]
        assert set(row["final"]) == {"loss", "perplexity"} and row["final"]["loss"] > 0
        target = cells[("random", key[1])]["row"]["final"]["loss"]
        expected = steps_to_reach(row["curve"], target, LOSS)
        assert row["steps_to_random_final"] == (None if expected is None else round(expected, 1))
    assert isinstance(report["learngenes"]["tleg"]["score"]["loss"], float)
    table = markdown_table(report)
    assert "test loss" in table
    clone = cells[("clone", "2x64")]["row"]
    assert f"{clone['final']['loss']:.3f} ({clone['instinct']['loss']:.3f})" in table
    assert (tmp_path / "bench" / "summary.png").read_bytes()[:4] == b"\x89PNG"


def test_a_text_bench_at_a_budget_heals_its_resizes_under_the_ancestrys_tokenizer(sources, words, tmp_path):
    """At equal compute a resize is distilled from the ancestry; the model the
    bench built in memory states no tokenizer and takes the ancestry's (it
    was refused as bytes against tokenizer.json, every resize cell n/a)."""
    from lgcli.bench import BenchSettings, bench, parse_sizes
    from lgcli.evaluate import ProbeSettings

    folder, _ = sources("llama-gqa")
    settings = BenchSettings(sizes=parse_sizes("1x32"), methods=["select", "angular"], budget=1, calibrate_samples=4,
                             probe=ProbeSettings(steps=2, eval_every=2, batch_size=8, progress=False),
                             subset="32", test_subset="8")
    report = bench(folder, str(words), tmp_path / "bench", settings, notify=lambda message: None)
    cells = {c["method"]: c for c in report["cells"]}
    for method in ("select", "angular"):
        assert cells[method]["status"] == "done", cells[method].get("reason")
        assert cells[method]["details"]["distill"]["steps"] == 1
        assert cells[method]["details"]["distill"]["alpha"] == 0.5


def test_a_text_learngene_goes_through_a_pipe(sources, words, lg, tmp_path):
    """condense -o - | grow -: the learngene, its provenance and the teacher's tokenizer travel on stdout."""
    folder, _ = sources("llama-gqa")
    condensed = lg("condense", folder, "--method", "wave", "--data", words, *QUICK, "-o", "-")
    assert condensed.code == 0, condensed.stderr
    out = tmp_path / "grown"
    grown = lg("grow", "-", "--depth", "3", "--width", "64", "-o", out, stdin=condensed.stdout)
    assert grown.code == 0, grown.stderr
    model = load_strict(out, "llama-gqa")
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_key_value_heads) == (3, 64, 4)
    assert (out / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    steps = json.loads(lg("inspect", out, "--json").stdout)["provenance"]
    assert [s.get("method") for s in steps[:2]] == ["wave", "wave"] and steps[1]["kind"] == "learngene"
