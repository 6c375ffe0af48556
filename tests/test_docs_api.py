"""docs/api.md runs as written: its ```python blocks, in the page's order, in
one namespace (each may use what an earlier one made), in a fresh working
directory holding the files the page names as the reader's own.

Those files are lg's example models under the page's names, and what lg
makes of them; nothing of the page is rewritten or skipped, so a renamed
function, a moved import, a name used before it is bound or rebound to
something a later block cannot use fails this test (and a step count grown
large shows in its run time)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import timm
import torch

import lgcli

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "api.md"
EXAMPLES = REPO / "examples"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Each ```python block of a Markdown page: (its first line's number, its code)."""
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1))
            for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M)]


def the_readers_files(folder: Path) -> None:
    """The files docs/api.md reads without making them: the example image
    model as vit.safetensors, the example text model (a Hugging Face Llama
    folder with its tokenizer) as llama-weights/ and ./gpt2, a 6-layer
    model grown from it as ./gpt2-6L, timm's Swin-T (random weights) as
    swin_t.safetensors, and a WAVE learngene condensed from the example
    model (2 steps, scored on 100 images: only its form matters here) as
    wave.lg.safetensors."""
    from lgcli.condense import CondenseSettings, condense_file
    from lgcli.resize import resize_file

    shutil.copy(EXAMPLES / "fmnist_vit.safetensors", folder / "vit.safetensors")
    for name in ("llama-weights", "gpt2"):
        shutil.copytree(EXAMPLES / "kjv_llama", folder / name)
    resize_file(folder / "gpt2", folder / "gpt2-6L", direction="grow", depth=6, notify=lambda message: None)
    torch.manual_seed(0)
    lgcli.save_model(timm.create_model("swin_tiny_patch4_window7_224", pretrained=False),
                     folder / "swin_t.safetensors")
    condense_file(folder / "vit.safetensors", folder / "wave.lg.safetensors", method="wave",
                  data="fashion-mnist-mini", settings=CondenseSettings(steps=2), test_subset="100")


def test_the_page_has_the_blocks_this_test_runs():
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) >= 9
    assert all(code.strip() for _, code in blocks)
    # A block the pattern missed (a fence with trailing text) would go unrun.
    assert PAGE.read_text().count("```python") == len(blocks)


@pytest.fixture
def one_thread():
    """The page's models are tiny: torch's one thread runs them about as fast
    as two on an idle machine, and several times faster on cores shared with
    other jobs (this test on the 2-core development machine beside a
    benchmark: 49 s instead of 163 s). Only the speed changes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_every_python_block_of_the_api_page_runs_in_order(tmp_path, monkeypatch, one_thread):
    the_readers_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_api"}
    for line, code in python_blocks(PAGE.read_text()):
        # A failure's traceback names the page and the line of the block.
        exec(compile("\n" * (line - 1) + code, str(PAGE), "exec"), namespace)
    # What the page says it writes, it wrote.
    for name in ("copy.safetensors", "trained.safetensors", "small.safetensors", "selected.safetensors",
                 "calibrated.safetensors", "tleg.lg.safetensors", "d.safetensors", "healed.safetensors"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "results" / "bench.json").is_file()
