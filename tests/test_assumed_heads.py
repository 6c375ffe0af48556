"""Heads a file does not record, and its weights do not show, are never used
silently: `lg inspect` says by what rule it assumed them, in the numbers its
table shows; `lgcli.load_model` refuses the file unless it is given them; and
`lg inspect` prints no load line that builds a model of guessed heads, but
the command that prints one once the heads are given, which loads the model
the file is. The two cases of the report: a Llama's bare model.safetensors
(4 heads of 16 sharing 2 key/value heads; lg would take 2 of 32) and a timm
DINOv2 with registers saved as a plain state dict (3 heads of 32; lg would
take 2 of 48)."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
import torch
import transformers

import lgcli
from lgcli.loading import build_model
from conftest import make_vit, run_lg_inproc, sample_input, write_plain
from printed import run_printed

LLAMA = dict(vocab_size=1024, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128)
DINO = dict(model_name="vit_small_patch14_reg4_dinov2", img_size=28, patch_size=14, depth=3, embed_dim=96,
            num_heads=3, num_classes=10)
TOKENS = torch.tensor([[5, 17, 300, 2, 999, 64, 128, 7]])


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(from_pretrained's model, the folder's bare weights file, read without its config.json)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llama") / "llama"
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder).eval(), folder / "model.safetensors"


@pytest.fixture(scope="module")
def dino(tmp_path_factory):
    """(the timm model, its state dict saved with safetensors: no lg metadata). Its layer-scale gammas are
    made O(1) (make_vit), so that the attention, and so its heads, shows in the logits."""
    model = make_vit(**DINO)
    return model, write_plain(model, tmp_path_factory.mktemp("dino") / "dino_reg.safetensors")


def llama_logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS).logits


def vit_logits(model: torch.nn.Module, like: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(sample_input(like))


def table_rows(stdout: bytes) -> dict[str, str]:
    """`lg inspect`'s rows (COLUMNS wide enough that none wraps), field -> value."""
    rows = {}
    for line in stdout.decode().splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 2 and cells[0]:
            rows[cells[0]] = cells[1]
    return rows


def inspected(path, *args, monkeypatch) -> tuple[dict[str, str], str]:
    """(the table's rows, the text after `load with:`) of `lg inspect path *args`."""
    monkeypatch.setenv("COLUMNS", "1000")
    done = run_lg_inproc("inspect", path, *args)
    assert done.code == 0, done.stderr
    return table_rows(done.stdout), done.stdout.decode().split("load with:\n", 1)[1]


@pytest.mark.parametrize("case, heads, head_dim, kv", [("llama", 2, 32, 1), ("dino", 2, 48, None)])
def test_the_assumed_label_states_the_rule_in_the_numbers_shown(case, heads, head_dim, kv, request, monkeypatch):
    """The label names the heads lg took and their dimension, the same as the
    heads and head dim rows; 64-wide heads truly do not divide the width it
    names; and the count is the one nearest width/64 that divides it (the
    rule lg assumes by). It used to say 'head dim 64' beside 'head dim 32'."""
    _, path = request.getfixturevalue(case)
    rows, _ = inspected(path, monkeypatch=monkeypatch)
    label = rows["heads"]
    assert label.startswith(f"{heads} (assumed: not recorded") and label.endswith("; pass --heads)"), label
    assert rows["head dim"] == str(head_dim) and rows.get("key/value heads") == (None if kv is None else str(kv))
    took = re.search(r"lg took (\d+) heads? of (\d+), the count nearest (\d+)/64 that divides", label)
    assert took and (int(took[1]), int(took[2])) == (heads, head_dim), label
    assert int(took[3]) == heads * head_dim  # the query width the heads split
    undivided = re.search(r"64-wide heads do not divide the (?:width (\d+)|(\d+) key/value outputs):", label)
    assert undivided, label
    width = int(undivided[1] or undivided[2])
    assert width % 64 != 0 and width == (kv or heads) * head_dim
    assert "head dim 64" not in label


def test_load_model_refuses_assumed_heads_and_loads_the_given_ones(llama):
    """Without heads, one line naming heads=; with the true heads (or key/value
    heads, which fix the head dim), the model from_pretrained builds from the
    folder, logit for logit. The refusal matters: the 2 heads lg would take
    load strictly and compute another function."""
    reference, path = llama
    with pytest.raises(lgcli.LgError) as refused:
        lgcli.load_model(path)
    message = str(refused.value)
    assert "\n" not in message and "does not record its attention heads" in message and "heads=N" in message
    expected = llama_logits(reference)
    for given in (dict(heads=4), dict(kv_heads=2)):
        model, spec = lgcli.load_model(path, **given)
        assert (spec.heads, spec.key_value_heads, spec.head_dim, spec.heads_assumed) == (4, 2, 16, False)
        torch.testing.assert_close(llama_logits(model.eval()), expected, rtol=1e-5, atol=1e-5)
    loaded = lgcli.load(path)  # what the refusal spares: the heads lg would assume
    guessed = build_model(loaded.spec, loaded.stack)
    assert (loaded.spec.heads, loaded.spec.heads_assumed) == (2, True)
    assert not torch.allclose(llama_logits(guessed.eval()), expected, rtol=1e-2, atol=1e-2)


def test_load_model_refuses_a_plain_timm_file_without_its_heads(dino):
    source, path = dino
    with pytest.raises(lgcli.LgError, match="heads=N"):
        lgcli.load_model(path)
    model, spec = lgcli.load_model(path, heads=3)
    assert (spec.heads, spec.head_dim) == (3, 32)
    torch.testing.assert_close(vit_logits(model, source), vit_logits(source, source), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case, true_heads", [("llama", 4), ("dino", 3)])
def test_inspect_prints_no_guessed_load_line_but_the_command_that_prints_the_right_one(case, true_heads, request,
                                                                                      monkeypatch):
    """Without --heads: no line that builds a model (and load_call is null in
    --json), but the lg inspect command that prints it, --heads N last. That
    command, with the model's own heads for N, run as printed, prints a line
    that runs as printed and loads the model the file is."""
    source, path = request.getfixturevalue(case)
    _, said = inspected(path, monkeypatch=monkeypatch)
    assert "model =" not in said and "load_model(" not in said and "create_model(" not in said, said
    command = said.strip().rsplit(": ", 1)[1]
    assert command.startswith("lg inspect ") and command.endswith(" --heads N"), said
    report = json.loads(run_lg_inproc("inspect", path, "--json").stdout)
    assert report["heads_assumed"] is True and report["load_call"] is None

    done = run_printed(command.removesuffix("N") + str(true_heads))
    assert done.code == 0, done.stderr
    line = done.stdout.decode().split("load with:\n", 1)[1]
    scope: dict = {}
    exec(textwrap.dedent(line), scope)  # noqa: S102 - the lines lg printed for the user to run
    given = json.loads(run_lg_inproc("inspect", path, "--heads", str(true_heads), "--json").stdout)
    assert given["load_call"] in line and given["heads"] == true_heads  # --json says the same as the table
    if case == "llama":
        assert f"heads={true_heads}" in given["load_call"]
        torch.testing.assert_close(llama_logits(scope["model"].eval()), llama_logits(source), rtol=1e-5, atol=1e-5)
    else:
        assert f"num_heads={true_heads}" in given["load_call"]
        torch.testing.assert_close(vit_logits(scope["model"], source), vit_logits(source, source),
                                   rtol=1e-5, atol=1e-5)
