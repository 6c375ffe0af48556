"""Issue 22: no silent wrong result. Heads lg would have to assume are never
used for a resize that depends on them, nor recorded as fact; eval does not
score a model on data it does not fit; outputs are what -o names, and their
load line works; every hint printed works as printed; usage mistakes exit 2;
binary never goes to a terminal; an interrupted condense says how to resume."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

import lgcli
from conftest import SIGTERM_AT_FIRST_STEP, make_vit, printed_model, run_lg_inproc, sample_input, write_plain
from printed import run_printed
from text_models import token_ids

LG = [sys.executable, "-m", "lgcli"]


def lg_run(*args) -> subprocess.CompletedProcess:
    """lg run in this process, its output as text (the tests of signals and terminals start one of their own)."""
    done = run_lg_inproc(*args)
    return subprocess.CompletedProcess(args, done.code, done.stdout.decode(), done.stderr)


def one_error_line(result) -> str:
    """The one line a refusal prints, asserted to be alone and lg's."""
    stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: "), stderr
    return lines[0]


def last_error_line(result) -> str:
    """The error line ending a run that printed progress first (condense)."""
    lines = result.stderr.strip().splitlines()
    assert [l for l in lines if l.startswith("lg: error: ")] == lines[-1:] and "Traceback" not in result.stderr
    return lines[-1]


def recorded_config(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()["lg.config"])


def run_load_line(stderr: str) -> torch.nn.Module:
    """Run the `load with:` line a write printed on stderr, as a user would paste it."""
    line = next(l for l in stderr.splitlines() if l.startswith("load with: "))
    code = line[len("load with: "):].split("  (")[0]
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the line lg printed for the user to run
    return scope["model"].eval()


# ---- heads: a timm ViT of 8 heads of 48 whose file does not record them ----

@pytest.fixture(scope="module")
def vit8(tmp_path_factory):
    """The issue's case (a): width 384 in 8 heads of 48; lg would assume 6 of 64."""
    model = make_vit(depth=1, embed_dim=384, num_heads=8, patch_size=8, img_size=16, num_classes=3)
    return model, write_plain(model, tmp_path_factory.mktemp("vit8") / "vit8.safetensors")


def test_a_width_change_on_assumed_vit_heads_refuses_naming_source_heads(vit8, tmp_path, lg):
    _, src = vit8
    out = tmp_path / "small.safetensors"
    line = one_error_line(lg("shrink", src, "--width", "192", "-o", out))
    assert "--source-heads" in line and "assume 6 heads of dimension 64" in line
    assert not out.exists()
    for args in (["grow", src, "--width", "768"], ["shrink", src, "--heads", "4"]):  # --heads moves them too
        assert "--source-heads" in one_error_line(lg(*args, "-o", out))
    # Given, the heads are right: 8 of 48 become 4 of 48, recorded as such, and timm loads it strictly.
    assert lg("shrink", src, "--width", "192", "--source-heads", "8", "-o", out).code == 0
    assert recorded_config(out)["num_heads"] == 4
    model = lgcli.load_model(out)[0]
    assert model.blocks[0].attn.num_heads == 4 and torch.isfinite(model(sample_input(model))).all()


def test_a_depth_change_on_assumed_vit_heads_records_them_as_assumed(vit8, tmp_path):
    """Depth alone is the same whatever the heads: it goes ahead, says the heads
    are assumed, and the output does not record them (they are assumed again
    when it is read). Loaded with the true 8 heads, clone's output computes
    the source's function: the heads lg assumed changed nothing."""
    source, src = vit8
    out = tmp_path / "deep.safetensors"
    done = lg_run("grow", src, "--depth", "2", "--method", "clone", "-o", out)
    assert done.returncode == 0, done.stderr
    assert "heads 6 -> 6 (assumed" in done.stderr
    # The load line still runs as pasted: its note on the heads is a Python comment.
    load_line = done.stderr.split("load with: ", 1)[1].splitlines()[0]
    assert "# heads assumed" in load_line
    compile(load_line, "<load line>", "exec")
    assert "num_heads" not in recorded_config(out)
    report = json.loads(lg_run("inspect", out, "--json").stdout)
    assert report["heads_assumed"] is True and report["heads"] == 6
    truth = timm.create_model("vit_base_patch16_224", depth=2, embed_dim=384, num_heads=8, patch_size=8,
                              img_size=16, num_classes=3)
    truth.load_state_dict(lgcli.load(out).checkpoint.tensors, strict=True)
    x = sample_input(source)
    with torch.no_grad():
        torch.testing.assert_close(truth.eval()(x), source(x), rtol=1e-5, atol=1e-5)


def test_eval_and_condense_refuse_assumed_heads(vit8, tmp_path):
    _, src = vit8
    line = one_error_line(lg_run("eval", src, "--data", "fashion-mnist-mini", "--test-subset", "10"))
    assert "--heads" in line and "vit8.safetensors" in line
    line = one_error_line(lg_run("condense", src, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "1",
                                 "-o", tmp_path / "g.lg.safetensors"))
    assert "--teacher-heads" in line and not (tmp_path / "g.lg.safetensors").exists()


def test_bench_refuses_assumed_heads_and_its_hint_records_them(vit8, tmp_path):
    source, src = vit8
    done = lg_run("bench", src, "--data", "fashion-mnist-mini", "--sizes", "1x192", "--steps", "1",
                  "--condense-steps", "1", "-o", tmp_path / "bench")
    line = one_error_line(done)
    assert done.returncode == 1 and "--source-heads N" in line
    recorded = tmp_path / "ancestry.safetensors"
    command = line.split("record them first: ")[1].split(" (")[0].replace(" N ", " 8 ").replace(
        "ANCESTRY", str(recorded))
    assert run_hint(command).returncode == 0
    report = json.loads(lg_run("inspect", recorded, "--json").stdout)
    assert (report["heads"], report["heads_assumed"]) == (8, False)
    written = lgcli.load(recorded).checkpoint.tensors
    assert written.keys() == source.state_dict().keys()
    for key, tensor in source.state_dict().items():  # the same weights, now with their heads
        assert torch.equal(written[key], tensor), key


# ---- heads: a sharded Llama state dict without config.json (4 heads of 32, 2 key/value heads) ----

@pytest.fixture(scope="module")
def llama_shards(tmp_path_factory):
    """The issue's case (b): lg would assume 2 heads of 64 and 1 key/value head."""
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=96, vocab_size=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("llama") / "shards"
    folder.mkdir()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    keys = sorted(state)
    weight_map = {}
    for number, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:]), start=1):
        name = f"model-0000{number}-of-00002.safetensors"
        save_file({k: state[k] for k in part}, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return model, folder


def test_assumed_llama_heads_are_refused_even_for_depth(llama_shards, tmp_path, lg):
    """Every output of a transformers model states its heads in config.json:
    with heads assumed, any resize refuses, naming both flags."""
    _, folder = llama_shards
    for args in (["--depth", "1"], ["--width", "64"], ["--width", "64", "--kv-heads", "1"]):
        line = one_error_line(lg("shrink", folder, *args, "-o", tmp_path / "out"))
        assert "--source-heads" in line and "--source-kv-heads" in line
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", [["--source-heads", "4"], ["--source-kv-heads", "2"]])
def test_given_llama_heads_are_written_right(llama_shards, tmp_path, lg, given):
    model, folder = llama_shards
    out = tmp_path / "out"
    assert lg("shrink", folder, *given, "--depth", "1", "-o", out).code == 0
    written = json.loads((out / "config.json").read_text())
    assert (written["num_attention_heads"], written["num_key_value_heads"]) == (4, 2)
    small, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not any(info.values())
    # select keeps layer 0 of 2 at depth 1; the same model built with the true heads agrees.
    model.model.layers = model.model.layers[:1]
    model.config.num_hidden_layers = 1
    ids = token_ids() % 64
    with torch.no_grad():
        torch.testing.assert_close(small.eval()(input_ids=ids).logits, model(input_ids=ids).logits)
    out2 = tmp_path / "narrow"
    assert lg("shrink", folder, *given, "--width", "64", "-o", out2).code == 0
    narrow = json.loads((out2 / "config.json").read_text())
    assert (narrow["num_attention_heads"], narrow["num_key_value_heads"]) == (2, 1)


def test_disagreeing_source_heads_are_refused(llama_shards, tmp_path, lg):
    _, folder = llama_shards
    line = one_error_line(lg("shrink", folder, "--source-heads", "2", "--source-kv-heads", "2", "--depth", "1",
                             "-o", tmp_path / "out"))
    assert "disagree" in line and "4 query heads" in line


# ---- eval: the default data is for lg's example-shaped models ----

def test_eval_without_data_refuses_a_model_of_other_classes(tmp_path):
    model = make_vit(depth=1, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=1000)
    path = tmp_path / "imagenet.safetensors"
    lgcli.save_model(model, path)
    done = lg_run("eval", path, "--test-subset", "10")
    assert done.returncode == 2 and done.stdout == ""
    line = one_error_line(done)
    assert "1000 classes" in line and "--data" in line


# ---- outputs: what -o names, and a load line that works ----

@pytest.fixture(scope="module")
def known(tmp_path_factory):
    """A ViT whose file records its heads (written by lg)."""
    model = make_vit(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
    path = tmp_path_factory.mktemp("known") / "vit.safetensors"
    lgcli.save_model(model, path)
    return model, path


def test_shards_into_a_file_name_are_refused_and_a_folder_loads_with_its_line(known, tmp_path):
    model, src = known
    named_file = tmp_path / "x.safetensors"
    done = lg_run("grow", src, "--depth", "4", "--method", "clone", "--shard-size", "20KB", "-o", named_file)
    assert done.returncode == 1 and "folder name" in one_error_line(done) and not named_file.exists()
    folder = tmp_path / "x"
    done = lg_run("grow", src, "--depth", "4", "--method", "clone", "--shard-size", "20KB", "-o", folder)
    assert done.returncode == 0 and (folder / "model.safetensors.index.json").is_file()
    loaded = run_load_line(done.stderr)
    x = sample_input(model)
    with torch.no_grad():  # clone keeps the function: the sharded folder is the source's model
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["g.safetensors", "g"])
def test_a_single_file_write_prints_a_load_line_that_works(known, tmp_path, name):
    """Whatever the file's name: timm reads one not ending in .safetensors
    as a pickle, which its weights_only load refused on lg's file."""
    model, src = known
    done = lg_run("grow", src, "--depth", "3", "--method", "clone", "-o", tmp_path / name)
    assert done.returncode == 0
    x = sample_input(model)
    with torch.no_grad():
        torch.testing.assert_close(run_load_line(done.stderr)(x), model(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(printed_model(tmp_path / name)(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_write_says_it_is_an_initialisation_and_how_to_score_it(known, tmp_path):
    _, src = known
    out = tmp_path / "shrunk.safetensors"
    done = lg_run("shrink", src, "--depth", "1", "-o", out)
    lines = done.stderr.splitlines()
    assert done.returncode == 0 and lines[-2].startswith("load with: ")
    assert lines[-1] == (f"this is an initialisation to fine-tune, not a finished model; score it on your data "
                         f"(--data) or on lg's: lg eval {shlex.quote(str(out))} --data fashion-mnist-mini --steps 100")
    scored = run_hint(printed_command(lines[-1], "or on lg's: "))  # as printed
    assert scored.returncode == 0 and "shrunk" in scored.stdout, scored.stderr
    # A language model's hint names lg's built-in text, and runs as printed too.
    from test_hub import gpt2_folder

    text_src, _ = gpt2_folder(tmp_path, "gpt2")
    text_out = tmp_path / "gpt2-1L"
    lines = lg_run("shrink", text_src, "--depth", "1", "-o", text_out).stderr.splitlines()
    # As it is: a training probe of a real language model on a CPU takes hours.
    assert lines[-1].endswith(f"or on lg's as it is (held-out perplexity; --steps N trains a probe first): "
                              f"lg eval {shlex.quote(str(text_out))} --data kjv-mini --steps 0")
    scored = run_hint(printed_command(lines[-1], "first): "))
    assert scored.returncode == 0 and "gpt2-1L" in scored.stdout and "ppl" in scored.stdout, scored.stderr
    quiet = lg_run("shrink", src, "--depth", "1", "--json", "-o", tmp_path / "json.safetensors")
    assert quiet.returncode == 0 and "initialisation" not in quiet.stderr and json.loads(quiet.stdout)


@pytest.mark.parametrize("classes, cuda", [(10, False), (5, False), (10, True)])
def test_the_score_hint_is_proportionate_to_the_model_and_the_device(tmp_path, lg, monkeypatch, classes, cuda):
    """A 100-step probe of a real image model on a CPU takes half an hour
    (lgcli.pace.probe_seconds): where lg eval would run on the CPU, a model
    that large is scored as it is when its head has the data's classes, and
    the probe is said to be long when it has not; with a GPU, the probe."""
    import lgcli.pace

    monkeypatch.setattr(lgcli.pace, "PROBE_WORK_PER_CORE_SECOND", 1.0)  # this tiny model counts as a real one
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    src = tmp_path / "src.safetensors"
    lgcli.save_model(make_vit(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1,
                              num_classes=classes), src)
    out = tmp_path / "shrunk.safetensors"
    done = lg("shrink", src, "--depth", "1", "-o", out)
    assert done.code == 0, done.stderr
    hint = done.stderr.splitlines()[-1]
    command = f"lg eval {shlex.quote(str(out))} --data fashion-mnist-mini --steps"
    if cuda:
        assert hint.endswith(f"or on lg's: {command} 100"), hint
    elif classes == 10:
        assert hint.endswith(f"or on lg's as it is (top-1 on the test split; a --steps 100 probe of a model this size "
                             f"is long on the CPU): {command} 0"), hint
        scored = run_hint(printed_command(hint, "on the CPU): "))  # as printed
        assert scored.returncode == 0 and "shrunk" in scored.stdout, scored.stderr
    else:  # a head of other classes: as it is, it says nothing of the model
        assert hint.endswith(f"or on lg's after a probe of 100 training steps (long on the CPU for a model this size: "
                             f"lg eval says how long after its first 20): {command} 100"), hint


@pytest.mark.parametrize("command, depth", [("shrink", "1"), ("grow", "3")])
def test_the_score_hint_of_a_file_without_its_heads_gives_them_and_runs_as_printed(tmp_path, command, depth):
    """A depth change of a file that does not record its heads writes one that
    does not either (they are assumed): lg eval refuses it without --heads, so
    the hint gives the heads lg assumed (as the load line builds them) and says so."""
    model = make_vit(depth=2, embed_dim=128, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
    src = write_plain(model, tmp_path / "plain.safetensors")
    out = tmp_path / f"{command}-{depth}.safetensors"
    done = lg_run(command, src, "--depth", depth, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "num_heads" not in recorded_config(out)
    hint = done.stderr.splitlines()[-1]
    assert hint.endswith(f"or on lg's with the heads lg assumed (give the model's own to --heads): lg eval "
                         f"{shlex.quote(str(out))} --heads 2 --data fashion-mnist-mini --steps 100"), hint
    quick = printed_command(hint, "--heads): ").replace("--steps 100", "--steps 1 --subset 32 --test-subset 16 "
                                                                      "--batch-size 16")
    scored = run_hint(quick)  # as printed, but for the probe's length
    assert scored.returncode == 0 and out.stem in scored.stdout, scored.stderr


@pytest.mark.parametrize("command", [["shrink", "--depth", "1"], ["condense", "--method", "peg"]])
def test_binary_to_a_terminal_is_refused(known, command):
    _, src = known
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run([*LG, command[0], str(src), *command[1:], "-o", "-"], stdout=terminal,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        os.set_blocking(controller, False)
        try:
            shown = os.read(controller, 1 << 16)
        except BlockingIOError:
            shown = b""
    finally:
        os.close(controller)
        os.close(terminal)
    assert done.returncode == 2 and "terminal" in one_error_line(done)
    assert shown == b""  # nothing reached the terminal


def test_a_text_file_is_said_to_be_text(tmp_path, lg):
    notes = tmp_path / "notes.txt"
    notes.write_text("Things to try on Monday: shrink the ViT.\n")
    line = one_error_line(lg("inspect", notes))
    assert "not a safetensors file (it begins with the text 'Things t')" in line
    assert not re.search(r"\d{10,}", line)  # no absurd header length


# ---- hints: every command lg suggests runs as printed ----

def hinted_pipe(line: str) -> str:
    """The command a refusal suggests, exactly as printed: it names the
    source and the output the user gave (issue 32), so nothing is filled in."""
    found = re.search(r"`(lg (?:grow|shrink) [^`]*)`|(lg (?:grow|shrink) .*)$", line)
    assert found, line
    command = found.group(1) or found.group(2)
    assert not re.search(r"\b(SRC|LG|OUT)\b", command), command  # no placeholder left to fill
    return command


def run_hint(command: str) -> subprocess.CompletedProcess:
    """The command line as a shell reads it (tests/printed.py), its output as text."""
    done = run_printed(command)
    return subprocess.CompletedProcess(command, done.code, done.stdout.decode(), done.stderr)


@pytest.mark.parametrize("args, direction", [(["--width", "48"], "grow"),   # no whole multiple: clone pads
                                              (["--width", "64"], "grow"),   # a whole multiple: clone tiles
                                              (["--width", "16"], "shrink")])
def test_tleg_fit_hints_run(known, tmp_path, args, direction):
    _, src = known
    depth = "3" if direction == "grow" else "1"
    refused = lg_run(direction, src, "--method", "tleg-fit", "--depth", depth, *args, "-o", tmp_path / "o")
    line = one_error_line(refused)
    out = tmp_path / "o"  # the output the refused command named
    command = hinted_pipe(line)
    assert ("--method clone" in command) == (direction == "grow")  # clone wherever it keeps the function
    assert (" grow " in command) == (direction == "grow")  # never a grow while shrinking
    done = run_hint(command)
    assert done.returncode == 0, (command, done.stderr)
    spec = lgcli.load(out).spec
    assert (spec.depth, spec.width) == (int(depth), int(args[1]))


@pytest.fixture(scope="module")
def tleg_gene(known, tmp_path_factory):
    _, src = known
    out = tmp_path_factory.mktemp("gene") / "tleg.lg.safetensors"
    done = lg_run("condense", src, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2",
                  "--batch-size", "8", "--subset", "32", "--test-subset", "10", "-o", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("direction, width", [("grow", "48"), ("grow", "64"), ("shrink", "16")])
def test_tleg_learngene_width_hints_run(tleg_gene, tmp_path, direction, width):
    refused = lg_run(direction, tleg_gene, "--depth", "4", "--width", width, "-o", tmp_path / "o")
    command = hinted_pipe(one_error_line(refused))
    if direction == "shrink":
        assert "| lg shrink" in command  # never a grow while shrinking
    done = run_hint(command)
    assert done.returncode == 0, (command, done.stderr)
    spec = lgcli.load(tmp_path / "o").spec  # written where the refused command named
    assert (spec.depth, spec.width) == (4, int(width))


def printed_command(line: str, after: str) -> str:
    """The command a refusal prints after `after`, as it is."""
    return line.split(after, 1)[1]


@pytest.mark.parametrize("direction, args, route", [
    ("shrink", ["--depth", "1", "--width", "64", "--heads", "4"], "pipe the two: "),    # deeper is shrunk, wider grown
    ("shrink", ["--depth", "3", "--width", "16", "--heads", "1", "--method", "bot"], "pipe the two: "),
    ("grow", ["--depth", "1", "--width", "16", "--heads", "1"], "run: "),               # every axis smaller: a shrink
    # 2 heads of 16 to 4 heads of 4: more heads (a grow) and a smaller head dim (a shrink), through 2 heads of 4
    ("shrink", ["--depth", "2", "--width", "16", "--heads", "4"], "pipe the two: "),
])
def test_a_mixed_change_hint_runs_as_printed(known, tmp_path, direction, args, route):
    _, src = known
    out = tmp_path / "hinted out.safetensors"  # a space: the printed command quotes it
    refused = lg_run(direction, src, *args, "-o", out)
    line = one_error_line(refused)
    assert route in line and "..." not in line and not out.exists()
    if "--method" in args:  # the method stays with the command that was asked for
        assert f"lg {direction} {shlex.quote(str(src))} --method bot" in line
    done = run_hint(printed_command(line, route))
    assert done.returncode == 0, (line, done.stderr)
    spec = lgcli.load(out).spec
    asked = dict(zip(args[::2], args[1::2]))
    assert (spec.depth, spec.width, spec.heads) == (int(asked["--depth"]), int(asked["--width"]), int(asked["--heads"]))


# ---- exit codes: 2 for a usage mistake, 1 for a file or data problem ----

@pytest.mark.parametrize("args", [
    ["shrink", "{src}", "--depth", "1"],                                          # no -o
    ["condense", "{src}", "--method", "tleg", "--data", "fashion-mnist-mini"],   # no -o
    ["bench", "{src}", "--data", "fashion-mnist-mini", "--sizes", "1x32"],      # no -o
    ["shrink", "{src}", "--depth", "1", "--method", "bogus", "-o", "{out}"],     # unknown --method
    ["condense", "{src}", "--method", "bogus", "--data", "fashion-mnist-mini", "-o", "{out}"],
    ["eval", "{src}", "--lr-sweep", "1e-3,1e-4"],                                # --lr-sweep without --steps
    ["condense", "{src}", "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2", "--epochs", "1",
     "-o", "{out}"],
    ["shrink", "{src}", "-o", "{out}"],                                          # nothing to shrink
    ["grow", "{src}", "--depth", "1", "--method", "select", "-o", "{out}"],      # a method of the other way
])
def test_usage_mistakes_exit_2(known, tmp_path, lg, args):
    _, src = known
    filled = [a.format(src=src, out=tmp_path / "o.safetensors") for a in args]
    result = lg(*filled)
    assert result.code == 2, result.stderr
    one_error_line(result)
    assert not (tmp_path / "o.safetensors").exists()


def test_file_and_data_problems_exit_1(known, tmp_path, lg):
    _, src = known
    assert lg("inspect", tmp_path / "missing.safetensors").code == 1
    assert lg("eval", src, "--data", str(tmp_path / "no-such-folder")).code == 1


# ---- an interrupted condense says where its run is and how to resume it ----

DRIVER = r'''
import os, signal, sys
import lgcli.train
real_save = lgcli.train._save_checkpoint
saves = []
def save(*args, **kwargs):
    real_save(*args, **kwargs)
    saves.append(1)
    if len(saves) == 2:  # two checkpoints written: the run is interrupted
        os.kill(os.getpid(), signal.SIGTERM)
lgcli.train._save_checkpoint = save
from lgcli.cli import main
main(sys.argv[1:])
'''


def test_an_interrupted_condense_names_its_checkpoint_and_resume(known, tmp_path):
    _, src = known
    out = tmp_path / "g.lg.safetensors"
    args = ["condense", str(src), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "6",
            "--batch-size", "8", "--subset", "32", "--test-subset", "10", "--checkpoint-every", "2", "-o", str(out)]
    done = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True)
    assert done.returncode == 128 + signal.SIGTERM
    line = last_error_line(done)
    checkpoint = f"{out}.train.pt"
    assert f"saved in {checkpoint}" in line and Path(checkpoint).is_file() and not out.exists()
    resume = line.split("continue it with: ")[1]
    assert resume == "lg " + shlex.join(args + ["--resume"])
    again = run_hint(resume)
    assert again.returncode == 0, again.stderr
    assert lgcli.load_learngene(out).condensed["steps"] == 6
    # Its summary's losses are said to be those of the steps the resumed run trained.
    first, resumed = map(int, re.search(r"in steps (\d+)-6 \(resumed at step (\d+)\)", again.stderr).groups())
    assert first == resumed + 1 and resumed in (2, 4)


def test_an_interrupted_condense_without_checkpoints_says_how_to_keep_one(known, tmp_path):
    _, src = known
    args = ["condense", str(src), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2",
            "--batch-size", "8", "--subset", "32", "--test-subset", "10", "-o", str(tmp_path / "g.lg.safetensors")]
    # Without --checkpoint-every nothing is saved: the signal comes at the first optimiser step.
    done = subprocess.run([sys.executable, "-c", SIGTERM_AT_FIRST_STEP, *args], capture_output=True, text=True)
    assert done.returncode == 128 + signal.SIGTERM
    assert "--checkpoint-every N" in last_error_line(done)


def test_an_interrupted_condense_before_its_first_checkpoint_says_none_was_saved_yet(known, tmp_path):
    """With --checkpoint-every given, "add --checkpoint-every N" was told
    to a run stopped before its first save."""
    _, src = known
    out = tmp_path / "g.lg.safetensors"
    args = ["condense", str(src), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "6",
            "--batch-size", "8", "--subset", "32", "--test-subset", "10", "--checkpoint-every", "4", "-o", str(out)]
    done = subprocess.run([sys.executable, "-c", SIGTERM_AT_FIRST_STEP, *args], capture_output=True, text=True)
    assert done.returncode == 128 + signal.SIGTERM
    assert last_error_line(done).endswith(f"nothing written; no step was saved yet (--checkpoint-every 4 saves the "
                                          f"run every 4 steps to {out}.train.pt)")
    assert not out.exists() and not Path(f"{out}.train.pt").exists()
