"""`lg eval` on language models: the loss against a hand computation, the
task of a model, the probe on token windows through the one training loop,
steps to a falling baseline, and the command line (folders, tokenizers, bad
input in one line)."""

from __future__ import annotations

import json
from pathlib import Path
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import transformers

from lgcli.arch.base import CAUSAL_LM, IMAGE_CLASSIFICATION, MASKED_LM, TEXT_ENCODER
from lgcli.errors import LgError, UsageError
from lgcli.evaluate import (LOSS, Candidate, ProbeSettings, add_steps_to_baseline, architecture_of, evaluate,
                            model_task, probe_row, steps_to_reach)
from lgcli.losses import IGNORE
from lgcli.text import evaluate_text, load_text, read_text
from lgcli.tokenizing import ByteTokenizer
from lgcli.train import TrainConfig, train

from test_text_data import write_wordpiece_tokenizer

VOCAB = 260  # the 256 byte ids, the byte tokenizer's mask (256) and a few more
SMALL = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def gpt2(seed: int = 0, positions: int = 64) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=positions, **SMALL)
    return transformers.GPT2LMHeadModel(config).eval()


def llama(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=64, max_position_embeddings=64,
                                      **SMALL)
    return transformers.LlamaForCausalLM(config).eval()


def bert(seed: int = 0, head: bool = True) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, vocab_size=VOCAB,
                                     pad_token_id=0)
    return (transformers.BertForMaskedLM if head else transformers.BertModel)(config).eval()


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "genesis.txt"
    path.write_text(read_text("kjv-mini")[1][:12_000])
    return path


def quiet(**kwargs) -> ProbeSettings:
    return ProbeSettings(progress=False, **kwargs)


# ---- the loss, by hand ----

@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
def test_causal_loss_is_mean_next_token_cross_entropy(make, text_file):
    model = make()
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=24, test_subset=5)
    scores = evaluate_text(model, data.test, batch_size=2)
    windows = data.test.inputs
    with torch.no_grad():
        logits = model(input_ids=windows).logits
    # Every window predicts its tokens 1..23 from the ones before them.
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), windows[:, 1:].reshape(-1))
    assert scores["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert scores["perplexity"] == pytest.approx(math.exp(expected.item()), rel=1e-5)
    assert scores["tokens"] == 5 * 23


def test_masked_loss_is_cross_entropy_on_the_masked_tokens_only(text_file):
    model = bert()
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=32, test_subset=6, seed=3)
    scores = evaluate_text(model, data.test, batch_size=4)
    inputs, labels = data.test.inputs, data.test.targets
    chosen = labels != IGNORE
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    expected = F.cross_entropy(logits[chosen], labels[chosen])
    assert scores["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert scores["tokens"] == int(chosen.sum())
    # The masked inputs hide what is scored: most chosen positions show the mask id.
    assert (inputs[chosen] == 256).float().mean() > 0.5


# ---- what a model does ----

def test_model_task_asks_the_adapter_and_falls_back_on_hugging_face_names():
    import timm

    assert model_task(gpt2()) == CAUSAL_LM and model_task(llama()) == CAUSAL_LM
    assert model_task(bert()) == MASKED_LM and model_task(bert(head=False)) == TEXT_ENCODER
    vit = timm.create_model("vit_tiny_patch16_224", depth=1, embed_dim=16, num_heads=1, patch_size=7, img_size=28,
                            in_chans=1, num_classes=3)
    assert model_task(vit) == IMAGE_CLASSIFICATION
    # Families lg has no adapter for: transformers' class names decide.
    small = dict(num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32, vocab_size=VOCAB)
    assert model_task(transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**small))) == CAUSAL_LM
    assert model_task(transformers.RobertaForMaskedLM(transformers.RobertaConfig(**small))) == MASKED_LM
    assert model_task(transformers.RobertaModel(transformers.RobertaConfig(**small))) == TEXT_ENCODER
    with pytest.raises(LgError, match="not a model of a family lg knows"):
        model_task(torch.nn.Linear(2, 2))


# ---- the probe, through the one training loop ----

def candidate(model: torch.nn.Module, name: str = "model", source: str = "model") -> Candidate:
    return Candidate(name, model, source, architecture_of(model))


@pytest.mark.parametrize("make, task", [(gpt2, CAUSAL_LM), (bert, MASKED_LM)], ids=["causal", "masked"])
def test_the_probe_lowers_the_loss_in_a_few_steps(make, task, text_file):
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=task, seq_len=32, subset=64, test_subset=8)
    settings = quiet(steps=8, lr=1e-2, batch_size=8, eval_every=4)
    row = probe_row(candidate(make()), data, settings)
    assert [point["step"] for point in row["curve"]] == [0, 4, 8]
    assert row["final"]["loss"] < row["instinct"]["loss"] - 0.3
    assert row["mean_loss"] == pytest.approx(sum(p["loss"] for p in row["curve"]) / 3)
    assert row["instinct"] == {k: row["curve"][0][k] for k in ("loss", "perplexity")}
    assert row["dip"] == max(0.0, *(p["loss"] - row["curve"][0]["loss"] for p in row["curve"][1:]))


def test_a_sweep_picks_the_lowest_final_loss(text_file):
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=32, subset=32, test_subset=4)
    row = probe_row(candidate(gpt2()), data, quiet(steps=4, batch_size=8, lr_sweep=[1e-5, 3e-3]))
    assert [run["lr"] for run in row["sweep"]] == [1e-5, 3e-3]
    best = min(row["sweep"], key=lambda run: run["final"]["loss"])
    assert row["lr"] == best["lr"] == 3e-3 and row["final"] == best["final"]


def test_training_on_windows_is_reproducible_and_refuses_augmentation(text_file):
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=16, subset=32)
    config = dict(steps=3, batch_size=4, lr=1e-3, progress=False, seed=4)
    first = train(bert(), data.train, TrainConfig(**config)).losses
    assert train(bert(), data.train, TrainConfig(**config)).losses == first
    assert train(bert(), data.train, TrainConfig(**{**config, "seed": 5})).losses != first
    with pytest.raises(LgError, match="augmentation .* is for images; these are windows"):
        train(bert(), data.train, TrainConfig(**config, augment=True))


class Stop(Exception):
    pass


def test_training_on_windows_resumes_exactly(tmp_path, text_file):
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=16, subset=16)
    settings = dict(steps=4, batch_size=4, lr=1e-3, warmup_steps=1, progress=False, seed=2)
    reference = bert()
    full = train(reference, data.train, TrainConfig(**settings))

    def stop_at_step_2(step, model):
        if step == 2:
            raise Stop  # a run killed right after its step-2 checkpoint

    checkpoint = tmp_path / "run.pt"
    with pytest.raises(Stop):
        train(bert(), data.train, TrainConfig(**settings, checkpoint_path=str(checkpoint), checkpoint_every=2,
                                              callback_every=2), on_step=stop_at_step_2)
    resumed = bert(seed=99)  # everything must come from the checkpoint
    rest = train(resumed, data.train, TrainConfig(**settings, checkpoint_path=str(checkpoint), resume=True))
    # Steps 3 and 4 replay: the same windows, the same masks, the same dropout.
    assert rest.resumed_from == 2 and rest.losses == full.losses[2:]
    for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


DDP_WORKER = """
import json, sys
import torch, torch.distributed as dist, transformers
from lgcli.arch.base import MASKED_LM
from lgcli.text import evaluate_text, load_text
from lgcli.tokenizing import ByteTokenizer
from lgcli.train import TrainConfig, train

out, text = sys.argv[1], sys.argv[2]
data = load_text(text, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=16, subset=32, test_subset=6)
torch.manual_seed(0)
config = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                 max_position_embeddings=64, vocab_size=260, pad_token_id=0,
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
model = transformers.BertForMaskedLM(config)
result = train(model, data.train, TrainConfig(steps=4, batch_size=8, lr=2e-3, progress=False))
scores = evaluate_text(model, data.test, batch_size=2)
if dist.get_rank() == 0:
    json.dump({"losses": result.losses, "scores": scores}, open(out, "w"))
    torch.save(model.state_dict(), out + ".pt")
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_gloo_processes_mask_and_train_as_one_process(tmp_path, text_file):
    import os
    import socket

    worker = tmp_path / "worker.py"
    worker.write_text(DDP_WORKER)
    out = tmp_path / "ddp.json"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                          "127.0.0.1", "--master_port", str(port), str(worker), str(out), str(text_file)],
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ddp = json.loads(out.read_text())

    data = load_text(text_file, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=16, subset=32, test_subset=6)
    torch.manual_seed(0)
    model = bert()
    model.config.hidden_dropout_prob = model.config.attention_probs_dropout_prob = 0.0
    for module in model.modules():  # dropout differs by rank by design (seeded per rank): switch it off
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    single = train(model, data.train, TrainConfig(steps=4, batch_size=8, lr=2e-3, progress=False))
    # Every window has the same number of masked tokens, so the mean of the ranks' losses is the global one.
    assert ddp["losses"] == pytest.approx(single.losses, rel=1e-5, abs=1e-6)
    ddp_state = torch.load(str(out) + ".pt")
    for name, tensor in model.state_dict().items():
        assert torch.allclose(tensor, ddp_state[name], atol=1e-5), name
    assert ddp["scores"]["loss"] == pytest.approx(evaluate_text(model, data.test)["loss"], rel=1e-5)


def test_steps_to_a_falling_baseline_interpolate_on_a_hand_made_curve():
    curve = [{"step": 0, "loss": 5.0}, {"step": 100, "loss": 3.0}, {"step": 200, "loss": 2.0},
             {"step": 300, "loss": 2.5}]
    assert steps_to_reach(curve, 2.5, LOSS) == 150.0     # halfway from 3.0 at 100 to 2.0 at 200
    assert steps_to_reach(curve, 3.0, LOSS) == 100.0     # reached exactly on a point
    assert steps_to_reach(curve, 6.0, LOSS) == 0.0       # already below it at the start
    assert steps_to_reach(curve, 1.9, LOSS) is None      # never that low
    assert steps_to_reach(curve, 4.5, LOSS) == 25.0

    arch = {"depth": 2, "width": 32}
    random = {"name": "random", "source": "random", "architecture": arch, "final": {"loss": 2.0},
              "curve": [{"step": 0, "loss": 5.0}, {"step": 100, "loss": 3.0}, {"step": 200, "loss": 2.0}]}
    fast = {"name": "fast", "source": "a", "architecture": arch, "final": {"loss": 1.0},
            "curve": [{"step": 0, "loss": 4.0}, {"step": 100, "loss": 1.0}]}
    slow = {"name": "slow", "source": "b", "architecture": arch, "final": {"loss": 2.2},
            "curve": [{"step": 0, "loss": 5.0}, {"step": 200, "loss": 2.2}]}
    add_steps_to_baseline([fast, slow, random], LOSS)
    assert random["steps_to_random_final"] == 200.0 and random["speedup"] == 1.0
    assert fast["steps_to_random_final"] == pytest.approx(66.7) and fast["speedup"] == 3.0
    assert slow["steps_to_random_final"] is None and slow["speedup"] is None


# ---- evaluate and the command line ----

def save_gpt2(folder, seed: int = 0, positions: int = 64, tokenizer: bool = False):
    gpt2(seed, positions).save_pretrained(folder)
    if tokenizer:
        write_wordpiece_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"plain": save_gpt2(root / "plain"), "other": save_gpt2(root / "other", seed=1),
            "short": save_gpt2(root / "short", positions=16), "tokenized": save_gpt2(root / "tokenized",
                                                                                   tokenizer=True)}


def test_evaluate_reads_folders_adds_a_random_baseline_and_reports_loss(folders, text_file):
    notes = []
    report = evaluate([str(folders["plain"]), str(folders["other"])], str(text_file),
                      quiet(steps=4, batch_size=4, eval_every=2), baseline="random", seq_len=16, subset=16,
                      test_subset=4, notify=notes.append)
    assert report["task"] == CAUSAL_LM and report["data"]["tokenizer"] == "UTF-8 bytes"
    assert report["data"]["seq_len"] == 16 and report["data"]["train"] == 16 and report["data"]["test"] == 4
    assert [row["name"] for row in report["rows"]] == ["plain", "other", "random"]
    assert any("UTF-8 bytes" in note for note in notes)
    target = report["rows"][2]["final"]["loss"]
    for row in report["rows"]:
        assert set(row["final"]) == {"loss", "perplexity"} and "mean_loss" in row
        expected = steps_to_reach(row["curve"], target, LOSS)
        assert row["steps_to_random_final"] == (None if expected is None else round(expected, 1))
    assert report["rows"][2]["steps_to_random_final"] <= 4


def test_evaluate_uses_the_folders_tokenizer_and_defaults_seq_len_to_the_positions(folders, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(read_text("kjv-mini")[1][:6000])
    report = evaluate([str(folders["tokenized"])], str(text), quiet())
    assert report["data"]["tokenizer"].startswith("tokenizer.json of ")
    assert report["data"]["seq_len"] == 64  # the model's 64 positions, fewer than 128
    short = evaluate([str(folders["short"])], str(text), quiet())
    assert short["data"]["seq_len"] == 16


def run_lg(*args):
    return subprocess.run([sys.executable, "-m", "lgcli", *map(str, args)], capture_output=True, text=True)


def test_cli_text_probe_prints_json_only(folders, tmp_path):
    plot = tmp_path / "curves.png"
    result = run_lg("eval", folders["plain"], "--steps", 2, "--batch-size", 4, "--subset", 8, "--test-subset", 4,
                    "--seq-len", 32, "--baseline", "random", "--json", "--plot", plot)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # stdout is the JSON and nothing else
    assert report["data"]["name"] == "kjv-mini" and report["data"]["seq_len"] == 32  # the default text
    assert [row["name"] for row in report["rows"]] == ["plain", "random"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A font the figure asks for and the machine lacks is matplotlib's concern, not a line on stderr.
    assert "findfont" not in result.stderr


def test_a_held_out_file_is_scored_whole_with_test_fraction_1_and_steps_0(folders, text_file):
    """--test-fraction 1 makes every window the test split: the loss is the mean next-token
    cross-entropy over all of the file, as computed here by hand. Training on nothing is refused."""
    report = evaluate([str(folders["plain"])], str(text_file), quiet(steps=0), seq_len=16, test_fraction=1)
    data = load_text(text_file, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=16, test_fraction=1)
    assert report["data"]["train"] == 0 and report["data"]["test"] == len(data.test.inputs) > 1
    model = transformers.AutoModelForCausalLM.from_pretrained(folders["plain"]).eval()
    windows = data.test.inputs
    with torch.no_grad():
        logits = model(input_ids=windows).logits
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), windows[:, 1:].reshape(-1))
    assert report["rows"][0]["final"]["loss"] == pytest.approx(expected.item(), rel=1e-5)
    with pytest.raises(UsageError, match="--test-fraction 1 holds out all of the data, leaving nothing for --steps 2"):
        evaluate([str(folders["plain"])], str(text_file), quiet(steps=2), seq_len=16, test_fraction=1)


def test_cli_table_reads_by_the_loss(folders, lg):
    result = lg("eval", folders["plain"], "--test-subset", 3, "--seq-len", 16)
    assert result.code == 0, result.stderr
    assert "loss" in result.stdout.decode() and "perplexity" in result.stdout.decode()
    assert "top-1" not in result.stdout.decode()


def image_checkpoint(path):
    import timm

    from lgcli.api import save_model

    torch.manual_seed(0)
    save_model(timm.create_model("vit_tiny_patch16_224", depth=1, embed_dim=16, num_heads=1, patch_size=7,
                                 img_size=28, in_chans=1, num_classes=10), path)
    return path


@pytest.mark.parametrize("case, message", [
    ("empty", "holds no text (empty)"),
    ("binary", "not UTF-8 text"),
    ("unknown", "no such file or folder, and not a built-in text (kjv-mini, bible-kjv)"),
    ("seq-len", "--seq-len 65 is longer than plain can read: it has 64 positions"),
    ("mixed", "image and text models cannot be scored on one dataset"),
    ("encoder", "is a text encoder without a language-model head"),
    ("tokenizers", "do not share a tokenizer"),
    ("image-seq-len", "--seq-len is for language models"),
    ("text-on-images", "--data kjv-mini is a text"),
    ("images-on-text", "--data fashion-mnist-mini is an image dataset"),
    ("text-file-on-images", "text.txt: a text file; image classifiers take a folder of class subfolders"),
    ("train-on-nothing", "--test-fraction 1 holds out all of the data, leaving nothing for --steps 5"),
])
def test_cli_bad_input_is_one_line(case, message, folders, tmp_path, lg):
    plain = folders["plain"]
    args = {
        "empty": [plain, "--data", tmp_path / "empty.txt"],
        "binary": [plain, "--data", tmp_path / "binary.txt"],
        "unknown": [plain, "--data", "no-such-bible"],
        "seq-len": [plain, "--seq-len", 65],
        "mixed": [plain, tmp_path / "vit.safetensors"],
        "encoder": [tmp_path / "encoder"],
        "tokenizers": [plain, folders["tokenized"]],
        "image-seq-len": [tmp_path / "vit.safetensors", "--seq-len", 8],
        "text-on-images": [tmp_path / "vit.safetensors", "--data", "kjv-mini"],
        "images-on-text": [plain, "--data", "fashion-mnist-mini"],
        "text-file-on-images": [tmp_path / "vit.safetensors", "--data", tmp_path / "text.txt"],
        "train-on-nothing": [plain, "--steps", 5, "--test-fraction", 1],
    }[case]
    (tmp_path / "text.txt").write_text("In the beginning\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)))
    if case in ("mixed", "image-seq-len", "text-on-images", "text-file-on-images"):
        image_checkpoint(tmp_path / "vit.safetensors")
    if case == "encoder":
        bert(head=False).save_pretrained(tmp_path / "encoder")
    result = lg("eval", *args)
    assert result.code in (1, 2) and result.stdout == b""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: ") and message in lines[0], result.stderr


TEXT_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kjv_llama"
# The example text ancestry's test loss as stated in README.md and examples/README.md.
TEXT_EXAMPLE_LOSS = 3.0586


@pytest.mark.skipif(not TEXT_EXAMPLE.exists(), reason="example text model not built")
def test_example_text_model_reproduces_its_stated_loss():
    result = run_lg("eval", TEXT_EXAMPLE, "--data", "kjv-mini", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["data"]["tokenizer"].startswith("tokenizer.json of")  # the folder's own tokenizer
    assert report["rows"][0]["final"]["loss"] == pytest.approx(TEXT_EXAMPLE_LOSS, rel=0.01)
