"""Checkpoints share a tokenizer when their tokenizer.json files give the same
token ids, whatever their bytes: a tokenizer re-saved by another
transformers version (other formatting, a no-op post-processor) is the
same tokenizer, one with a changed vocabulary entry, merge or normalizer is
not, and its refusal names what differs in one line that fits the command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lgcli.arch.base import CAUSAL_LM
from lgcli.checkpoint.companions import folder_companions
from lgcli.errors import LgError
from lgcli.resize import resize_file
from lgcli.tokenizing import ANOTHER_TEACHER, folder_tokenizer, shared_tokenizer

from conftest import run_lg_inproc
from text_models import Sources

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kjv_llama"
SAMPLE = "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void!\n"
LLAMA = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=44)


def example_json() -> dict:
    return json.loads((EXAMPLE / "tokenizer.json").read_text(encoding="utf-8"))


def folder_with(root: Path, name: str, tokenizer: dict | str, config: dict | None = None) -> Path:
    """A folder holding `tokenizer` as its tokenizer.json (a dict written compactly, a str as it is)."""
    folder = root / name
    folder.mkdir()
    text = tokenizer if isinstance(tokenizer, str) else json.dumps(tokenizer, ensure_ascii=False)
    (folder / "tokenizer.json").write_text(text, encoding="utf-8")
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def shared(*folders: Path, names: tuple[str, ...] | None = None):
    """As lg eval reads them; as lg distill does (its advice) when the rows are its student and teacher."""
    names = names or tuple(folder.name for folder in folders)
    advice = {"advice": ANOTHER_TEACHER} if names == ("the student", "the teacher") else {}
    return shared_tokenizer([(name, folder_companions(folder), folder.name) for name, folder in zip(names, folders)],
                            **advice)


def reversed_keys(value):
    """`value` with every object's keys in the opposite order (lists kept: their order can mean something)."""
    if isinstance(value, dict):
        return {key: reversed_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(item) for item in value]
    return value


def resave_with_transformers(source: Path, target: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(target))


# ---- the same ids: accepted ----

def test_a_tokenizer_re_saved_by_transformers_is_shared_and_encodes_alike(tmp_path):
    resave_with_transformers(EXAMPLE, tmp_path / "resaved")
    resaved = json.loads((tmp_path / "resaved" / "tokenizer.json").read_text(encoding="utf-8"))
    assert (tmp_path / "resaved" / "tokenizer.json").read_bytes() != (EXAMPLE / "tokenizer.json").read_bytes(), \
        "precondition: the re-save writes other bytes (else the byte hash alone decides)"
    assert resaved["post_processor"] != example_json()["post_processor"]
    original, again = folder_tokenizer(EXAMPLE), folder_tokenizer(tmp_path / "resaved")
    assert original.key != again.key and original.identity == again.identity
    assert shared(EXAMPLE, tmp_path / "resaved") is not None
    assert again.encode(SAMPLE).tolist() == original.encode(SAMPLE).tolist() and len(original.encode(SAMPLE)) > 10
    assert (again.prefix, again.suffix, again.size(CAUSAL_LM), again.mask_id) == \
        (original.prefix, original.suffix, original.size(CAUSAL_LM), original.mask_id)


def test_key_order_whitespace_old_merges_and_fields_that_change_no_id_are_accepted(tmp_path):
    saved = example_json()
    assert saved["model"]["merges"] and isinstance(saved["model"]["merges"][0], list)
    spaced = [" ".join(merge) for merge in saved["model"]["merges"]]  # how tokenizers before 0.20 wrote merges
    older = {**saved, "model": {**saved["model"], "merges": spaced}}
    older.pop("padding")  # a field left out reads as its default
    other_decoder = {**saved, "decoder": None, "truncation": {"direction": "Right", "max_length": 4, "strategy":
                                                              "LongestFirst", "stride": 0}}
    variants = {"reordered": json.dumps(reversed_keys(saved), indent=4, ensure_ascii=True),
                "compact": json.dumps(saved, separators=(",", ":")), "older": older, "other-decoder": other_decoder}
    folders = [folder_with(tmp_path, name, tokenizer) for name, tokenizer in variants.items()]
    assert len({(folder / "tokenizer.json").read_bytes() for folder in [EXAMPLE, *folders]}) == 5
    assert shared(EXAMPLE, *folders) is not None
    reference = folder_tokenizer(EXAMPLE).encode(SAMPLE).tolist()
    assert all(folder_tokenizer(folder).encode(SAMPLE).tolist() == reference for folder in folders)


# ---- other ids: refused, naming what differs ----

def one_entry_renamed() -> dict:
    """The example's tokenizer with '!' (a byte no merge uses) named 'zzz': the id of '!' now means another token."""
    saved = example_json()
    vocab = saved["model"]["vocab"]
    assert not any("!" in part for merge in saved["model"]["merges"] for part in merge)
    saved["model"]["vocab"] = {("zzz" if token == "!" else token): id_ for token, id_ in vocab.items()}
    return saved


def refusal(*folders: Path, names: tuple[str, ...]) -> str:
    with pytest.raises(LgError) as caught:
        shared(*folders, names=names)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("the checkpoints do not share a tokenizer"), message
    return message


def test_one_changed_vocabulary_entry_is_refused_in_one_line_naming_it_with_the_commands_advice(tmp_path):
    changed = folder_with(tmp_path, "changed", one_entry_renamed())
    assert folder_tokenizer(changed).encode(SAMPLE).tolist() != folder_tokenizer(EXAMPLE).encode(SAMPLE).tolist()
    distilling = refusal(EXAMPLE, changed, names=("the student", "the teacher"))
    assert "the teacher: tokenizer.json of changed, differing in vocabulary (1 of 1024 entries)" in distilling
    assert "distil from a teacher with the student's tokenizer" in distilling and "evaluate" not in distilling
    evaluating = refusal(EXAMPLE, changed, names=("kjv", "changed"))
    assert "differing in vocabulary (1 of 1024 entries)" in evaluating and "evaluate them separately" in evaluating
    assert "distil" not in evaluating


@pytest.mark.parametrize("part, edit, named", [
    ("merges", lambda saved: saved["model"]["merges"].__setitem__(slice(0, 2), saved["model"]["merges"][1::-1]),
     "merges (2 of 768)"),
    ("fewer merges", lambda saved: saved["model"]["merges"].pop(), "merges (768 against 767)"),
    ("normalizer", lambda saved: saved.__setitem__("normalizer", {"type": "Lowercase"}), "normalizer"),
    ("added token", lambda saved: saved["added_tokens"].append(
        {"id": 1024, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}), "added tokens (0 against 1)"),
    ("post-processor", lambda saved: saved.update(
        post_processor={"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "!", "type_id": 0}},
                                                                 {"Sequence": {"id": "A", "type_id": 0}}],
                        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                        "special_tokens": {"!": {"id": "!", "ids": [0], "tokens": ["!"]}}}),
     "special tokens around a window (... against 0 ...)"),
])
def test_a_tokenizer_that_encodes_otherwise_is_refused_naming_the_part(part, edit, named, tmp_path):
    saved = example_json()
    edit(saved)
    other = folder_with(tmp_path, "other", saved)
    assert named in refusal(EXAMPLE, other, names=("a", "b"))


def test_another_mask_token_is_refused_naming_the_mask_id(tmp_path):
    saved = example_json()
    one, two = (folder_with(tmp_path, name, saved, {"mask_token": token}) for name, token in (("one", "!"),
                                                                                             ("two", '"')))
    assert "mask id (0 against 1)" in refusal(one, two, names=("one", "two"))


# ---- lg distill ----

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A tiny Llama with the example's tokenizer, its shrink (the student), and the
    teacher folder, whose tokenizer files are re-saved by transformers."""
    teacher, _ = Sources(tmp_path_factory)("llama-gqa", vocab_size=1024, **LLAMA)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(EXAMPLE / name, teacher / name)
    (teacher / "special_tokens_map.json").unlink()
    student = tmp_path_factory.mktemp("student") / "student"
    resize_file(teacher, student, direction="shrink", depth=2, notify=lambda message: None)
    resaved = tmp_path_factory.mktemp("resaved") / "tokenizer"
    resave_with_transformers(teacher, resaved)
    for path in resaved.iterdir():
        shutil.copyfile(path, teacher / path.name)
    assert (teacher / "tokenizer.json").read_bytes() != (student / "tokenizer.json").read_bytes()
    return student, teacher


DISTILL = ["--data", "kjv-mini", "--subset", "16", "--test-subset", "4", "--seq-len", "12", "--batch-size", "4",
           "--steps", "1", "--device", "cpu"]


def test_lg_distill_runs_with_a_teacher_whose_tokenizer_was_re_saved(pair, tmp_path):
    student, teacher = pair
    result = run_lg_inproc("distill", student, "--teacher", teacher, *DISTILL, "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert "distilled" in result.stderr and (tmp_path / "out" / "model.safetensors").exists()


def test_lg_distill_refuses_a_teacher_with_another_vocabulary_entry_in_one_line(pair, tmp_path):
    student, teacher = pair
    other = tmp_path / "other"
    shutil.copytree(teacher, other)
    (other / "tokenizer.json").write_text(json.dumps(one_entry_renamed()), encoding="utf-8")
    result = run_lg_inproc("distill", student, "--teacher", other, *DISTILL, "-o", tmp_path / "out")
    assert result.code != 0 and result.stderr.count("\n") == 1 and result.stderr.startswith("lg: error: ")
    assert "vocabulary (1 of 1024 entries)" in result.stderr and "distil from a teacher" in result.stderr
    assert not (tmp_path / "out").exists()
