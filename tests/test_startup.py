"""Start-up and help: what needs no tensor (help, usage errors, errors about
a path, `lg inspect` of a safetensors file or folder) runs without importing
torch, `lg inspect` reads the same report from the header alone as from the
tensors, and the help names values as a user would.

No timing here (the figures are benchmarks/startup.py's, in docs/cli.md):
whether torch was imported is the property that makes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lgcli.api import inspect_checkpoint
from lgcli.checkpoint import read_checkpoint
from lgcli.checkpoint.loaded import torch_dtypes
from lgcli.header import DTYPE_SIZES, HeaderTensor

from text_models import make_model, save_folder

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fmnist_vit.safetensors"
COMMANDS = ("inspect", "eval", "bench", "shrink", "grow", "condense", "distill")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A timm file and tiny Hugging Face folders: one file, shards, a head
    tied by the config, and a tied head saved twice (its values are read)."""
    root = tmp_path_factory.mktemp("startup")
    folders = {"vit file": EXAMPLE, "llama folder": ROOT / "examples" / "kjv_llama"}
    for variant in ("gpt2-lm", "llama-gqa", "bert-mlm", "qwen2"):
        folders[variant] = save_folder(make_model(variant), root / variant, variant)
    folders["llama shards"] = save_folder(make_model("llama-mha"), root / "shards", "llama-mha",
                                          max_shard_size="20KB")
    assert (folders["llama shards"] / "model.safetensors.index.json").exists()
    twice = save_folder(make_model("llama-tied"), root / "tied-twice", "llama-tied")
    state = {k: v.contiguous() for k, v in make_model("llama-tied").state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()  # saved twice, equal
    save_file(state, str(twice / "model.safetensors"), metadata={"format": "pt"})
    folders["tied head saved twice"] = twice
    return folders


@pytest.mark.parametrize("name", ["vit file", "llama folder", "gpt2-lm", "llama-gqa", "bert-mlm", "qwen2",
                                  "llama shards", "tied head saved twice"])
def test_inspect_from_the_header_reports_what_the_tensors_do(name, sources, lg, capsys):
    from lgcli.cli import render_inspect

    path = str(sources[name])
    fast = inspect_checkpoint(path)
    assert read_checkpoint(path, header_only=True).header_only
    full_checkpoint = read_checkpoint(path)
    assert not full_checkpoint.header_only
    full = inspect_checkpoint(full_checkpoint)
    assert fast == full
    # What `lg inspect` prints (its fast path) is what the tensors' report renders to.
    printed = lg("inspect", path)
    assert printed.code == 0, printed.stderr
    render_inspect(full)
    assert printed.stdout.decode() == capsys.readouterr().out
    assert json.loads(lg("inspect", path, "--json").stdout) == json.loads(json.dumps(full, default=str))


def test_header_tensors_answer_as_torch_tensors_do():
    for name, dtype in torch_dtypes().items():
        stand_in, tensor = HeaderTensor(name, (2, 3)), torch.zeros((2, 3), dtype=dtype)
        assert stand_in.dtype == str(tensor.dtype).replace("torch.", "")
        assert stand_in.is_floating_point() == tensor.is_floating_point()
        assert stand_in.element_size() == tensor.element_size() == DTYPE_SIZES[name]
        assert (stand_in.dim(), stand_in.numel(), stand_in.shape) == (tensor.dim(), tensor.numel(), tuple(tensor.shape))


# Run in a fresh interpreter: each invocation through lg's own main(), then
# which heavy libraries were imported by then.
_PROBE = """
import json, sys
from lgcli.cli import main
heavy = ("torch", "numpy", "timm", "transformers", "PIL", "matplotlib")
results = []
for args in json.loads(sys.argv[1]):
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    results.append([args, code, [m for m in heavy if m in sys.modules]])
print(json.dumps(results))
"""


def test_help_usage_errors_path_errors_and_inspect_do_not_import_torch(sources, tmp_path):
    out = str(tmp_path / "out.safetensors")
    # Usage mistakes a resize can only make with a source named: said before it is read.
    early = [["shrink", str(EXAMPLE), "--width", "64", "--method", "activation", "-o", out],
             ["shrink", str(EXAMPLE), "--depth", "2", "--method", "block-ablation", "--calibrate", "fashion-mnist-mini",
              "--calibrate-samples", "0", "-o", out],
             ["shrink", str(EXAMPLE), "--depth", "2", "--calibrate", "fashion-mnist-mini", "--calibrate-samples", "0",
              "-o", out],
             ["shrink", str(EXAMPLE), "--params", "100K", "--depth", "2", "-o", out]]
    invocations = [*early,
        ["--help"], ["-h"], ["--version"],
        *[[command, "--help"] for command in COMMANDS],
        *[[command, "-h"] for command in COMMANDS],
        ["shrink", "--bogus"], ["grow", str(EXAMPLE), "--depth", "x", "-o", out], ["condense", str(EXAMPLE)],
        ["shrink", "missing.safetensors", "--depth", "2", "-o", out],
        ["grow", str(EXAMPLE), "--depth", "20", "-o", str(tmp_path / "no-folder" / "out.safetensors")],
        ["eval", "missing.safetensors"],
        ["eval", str(EXAMPLE), "--data", "missing-data"],
        ["condense", "missing.safetensors", "--method", "tleg", "--data", "fashion-mnist-mini", "-o", out],
        ["condense", str(EXAMPLE), "--method", "tleg", "--data", "missing-data", "-o", out],
        ["bench", "missing.safetensors", "--data", "fashion-mnist-mini", "--sizes", "2x64", "-o", str(tmp_path / "b")],
        ["bench", str(EXAMPLE), "--data", "missing-data", "--sizes", "2x64", "-o", str(tmp_path / "b")],
        ["distill", "missing.safetensors", "--teacher", str(EXAMPLE), "--data", "fashion-mnist-mini", "-o", out],
        ["distill", str(EXAMPLE), "--teacher", "missing.safetensors", "--data", "fashion-mnist-mini", "-o", out],
        ["distill", str(EXAMPLE), "--teacher", str(EXAMPLE), "--data", "missing-data", "-o", out],
        ["inspect", "missing.safetensors"],
        ["inspect", str(EXAMPLE)], ["inspect", str(EXAMPLE), "--json"],
        ["inspect", str(sources["llama folder"])], ["inspect", str(sources["gpt2-lm"])],
        ["inspect", str(sources["bert-mlm"])], ["inspect", str(sources["llama shards"])],
    ]
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(invocations)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    heavy_after = {json.dumps(args): imported for args, _, imported in results if imported}
    assert heavy_after == {}  # the first entry names the first invocation that imported one
    codes = {json.dumps(args): code for args, code, _ in results}
    assert [args for args in invocations if args[0] == "inspect" and "missing" not in args[1]
            and codes[json.dumps(args)] != 0] == []
    errors = [args for args in invocations if "missing" in " ".join(args) or "--bogus" in args
              or "no-folder" in " ".join(args) or args == ["condense", str(EXAMPLE)] or args in early]
    assert all(codes[json.dumps(args)] not in (0, None) for args in errors)
    messages = [line for line in proc.stderr.splitlines() if line.startswith("lg: error:")]
    assert len(messages) == len(errors) + 1  # and --depth x
    assert any("--data missing-data: no such file or folder, and not a built-in text (kjv-mini, bible-kjv) or "
               "image dataset (fashion-mnist-mini, fashion-mnist, mnist)" in line for line in messages)
    assert any("missing.safetensors: no such file or folder" in line for line in messages)


# ---- help ----

def _help(lg, *args: str) -> str:
    result = lg(*args)
    assert result.code == 0, result.stderr
    return result.stdout.decode()


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_names_values_not_python_types_and_takes_h(command, lg):
    args = [command] if command else []
    text = _help(lg, *args, "--help")
    for label in ("list[", "<int", "<float", "<str>", "<bool>", "range>", "x>=", "<=x", "{checkpoints}"):
        assert label not in text, f"{label!r} in lg {command or ''} --help"
    assert _help(lg, *args, "-h") == text


def test_shrink_help_shows_only_the_options_of_shrinking_methods(lg):
    from lgcli.methods import RESIZE_METHODS
    from lgcli.methods import METHODS

    shrink, grow = _help(lg, "shrink", "--help"), _help(lg, "grow", "--help")
    assert "Options of clone" not in shrink and "--insert" not in shrink
    assert "Options of clone" in grow and "--insert" in grow
    assert "Options of bot" in shrink and "Options of wave learngene" in shrink  # a learngene is built by either
    for direction in ("shrink", "grow"):
        assert set(RESIZE_METHODS[direction]) == {name for name, m in METHODS.items() if direction in m.directions}
    refused = lg("shrink", str(EXAMPLE), "--depth", "2", "--insert", "top", "-o", "-")
    assert refused.code == 2 and "No such option: --insert" in refused.stderr


def test_condense_help_names_every_learngene_kind(lg):
    """The kinds are listed in the help as text (reading the registry there
    would import every family at start-up); this keeps the list whole."""
    from lgcli.commands.training import condense
    from lgcli.learngenes import KINDS

    listed = condense.__defaults__[1].help
    for name in KINDS:
        assert name in listed.replace(",", " ").split(), f"{name} missing from lg condense --method's help"


def test_help_panels_group_the_options(lg):
    shrink, eval_help = _help(lg, "shrink", "--help"), _help(lg, "eval", "--help")
    for panel in ("Target size", "Method", "Source", "Output"):
        assert f"─ {panel} ─" in shrink
    for panel in ("Data", "Probe (fine-tuning)", "Output"):
        assert f"─ {panel} ─" in eval_help
    for panel in ("Data", "Auxiliary model", "Training", "Resuming", "Output"):
        assert f"─ {panel} ─" in _help(lg, "condense", "--help")


def _option_entry(text: str, flag: str) -> str:
    """The help of one option: its row and the rows continuing it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("│ ").startswith(flag + " "))
    entry = [lines[start]]
    for line in lines[start + 1:]:
        if line.lstrip("│ ").startswith("-") or not line.startswith("│"):
            break
        entry.append(line)
    return " ".join(" ".join(entry).replace("│", " ").split())


def test_every_option_is_documented_once(lg):
    eval_help, bench_help = _help(lg, "eval", "--help"), _help(lg, "bench", "--help")
    for text in (eval_help, bench_help):
        entry = _option_entry(text, "--eval-every")
        assert entry.count("[default:") == 1 and "[default: steps/10]" in entry
    assert "Label smoothing of the probe's cross-entropy" in _option_entry(eval_help, "--label-smoothing")
    assert "weight decay" in _option_entry(_help(lg, "condense", "--help"), "--weight-decay")


@pytest.mark.parametrize("typed, offered", [("lg grow --ins", "--insert"), ("lg shrink --ins", ""),
                                            ("lg shr", "shrink")])
def test_shell_completion_offers_the_commands_and_their_flags(typed, offered):
    env = {**os.environ, "_LG_COMPLETE": "complete_bash", "COMP_WORDS": typed,
           "COMP_CWORD": str(len(typed.split()) - 1)}
    proc = subprocess.run([sys.executable, "-m", "lgcli"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ([offered] if offered else [])
    # With shellingham installed, --show-completion detects the shell from the
    # parent processes, which a background or CI run may not show; typer's own
    # switch makes it take the shell as its value instead.
    script = subprocess.run([sys.executable, "-m", "lgcli", "--show-completion", "bash"], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert script.returncode == 0 and "_LG_COMPLETE=complete_bash" in script.stdout
