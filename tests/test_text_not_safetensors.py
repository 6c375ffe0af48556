"""A text file given where a safetensors file is expected is said to be text,
shown readably on one line (its newlines escaped, no UTF-8 character cut in
half), not read as an absurd header length; a model folder's config.json
(or other JSON beside its weights) is answered with the folder to give, as
a command that runs as printed."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from text_models import make_model


def error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.code != 0 and len(lines) == 1 and lines[0].startswith("lg: error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """A tiny Llama's folder whose config.json is pretty-printed JSON that
    starts with its "architectures" (as transformers writes it)."""
    folder = tmp_path_factory.mktemp("text") / "tiny-llama"
    make_model("llama-mha").save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"architectures": config.pop("architectures"), **config},
                                                   indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}, indent=2))
    assert (folder / "model.safetensors").is_file()
    return folder


def run_hint(line: str, lg) -> None:
    """The folder command the refusal suggests, run as printed: it reads the model."""
    command = re.search(r": (lg inspect .*)\)$", line).group(1)
    args = shlex.split(command)
    assert args[:2] == ["lg", "inspect"]
    result = lg(*args[1:])
    assert result.code == 0, result.stderr
    assert b"llama" in result.stdout


@pytest.mark.parametrize("name, begins, what", [
    ("config.json", "arc", "a model's config.json, not its weights"),
    ("tokenizer_config.json", "mod", "JSON beside a model's weights, not the weights"),
])
def test_json_of_a_model_folder_is_answered_with_its_folder(model_folder, lg, name, begins, what):
    given = model_folder / name
    line = error_line(lg("inspect", given))
    assert line == (f"lg: error: {given}: not a safetensors file (it begins with the text '{{\\n  \"{begins}': "
                    f"{what}; give the folder that holds it: lg inspect {shlex.quote(str(model_folder))})")
    run_hint(line, lg)


def test_a_config_json_read_from_a_stream_is_said_to_be_text_only(model_folder, lg):
    # A stream has no path: no folder to name.
    line = error_line(lg("inspect", "-", stdin=(model_folder / "config.json").read_bytes()))
    assert line == "lg: error: <stdin>: not a safetensors file (it begins with the text '{\\n  \"arc')"


def test_a_config_json_in_the_working_folder_names_it(model_folder, lg, monkeypatch):
    monkeypatch.chdir(model_folder)
    line = error_line(lg("inspect", "config.json"))
    assert line.endswith("a model's config.json, not its weights; give the folder that holds it: lg inspect .)")


def test_text_with_a_newline_in_its_first_bytes_is_said_to_be_text(tmp_path, lg):
    hello = tmp_path / "hello.txt"
    hello.write_bytes(b"hello\nworld")
    line = error_line(lg("inspect", hello))
    assert line == f"lg: error: {hello}: not a safetensors file (it begins with the text 'hello\\nwo')"


def test_utf8_text_is_shown_whole_characters(tmp_path, lg):
    cafe = tmp_path / "cafe.txt"
    cafe.write_text("café au lait\n", encoding="utf-8")
    line = error_line(lg("inspect", cafe))
    assert line == f"lg: error: {cafe}: not a safetensors file (it begins with the text 'café au')"
    assert "\ufffd" not in line


def test_a_character_cut_by_the_eighth_byte_is_left_out(tmp_path, lg):
    # 'naïve ' is 7 bytes; the eighth is the first of the three bytes of '—'.
    cut = tmp_path / "naive.md"
    cut.write_text("naïve — or not\n", encoding="utf-8")
    line = error_line(lg("inspect", cut))
    assert line == f"lg: error: {cut}: not a safetensors file (it begins with the text 'naïve ')"


def test_binary_bytes_are_not_taken_for_text(tmp_path, lg):
    image = tmp_path / "image.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    line = error_line(lg("inspect", image))
    assert "its first 8 bytes are no header length: they would claim" in line and "text" not in line
