"""lgcli.text's data side: reading text (built-ins, files, folders, bad
input), tokenizers (bytes, a folder's tokenizer.json), windows and the
held-out split, causal targets, and BERT's seeded masking."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import torch

from lgcli.arch.base import CAUSAL_LM, MASKED_LM
from lgcli.checkpoint import folder_companions
from lgcli.errors import LgError
from lgcli.losses import IGNORE
from lgcli.text import (EMBEDDED_TEXT, KJV_MINI_BOOKS, Masking, bible_text, causal_targets, cut_windows, load_text,
                        normalise_bible, read_text)
from lgcli.tokenizing import ByteTokenizer, FileTokenizer, folder_tokenizer, shared_tokenizer


# ---- reading text ----

def test_normalise_bible_keeps_verse_text_one_per_line():
    listing = ("\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n"
               "  2 And the earth was without form, and void.\n\nGenesis 2\n\n  1 Thus the heavens  \n")
    assert normalise_bible(listing) == ("In the beginning God created the heaven and the earth.\n"
                                        "And the earth was without form, and void.\nThus the heavens\n")


def test_kjv_mini_is_embedded_and_is_what_its_script_makes():
    name, text = read_text("kjv-mini")
    assert name == "kjv-mini"
    lines = text.splitlines()
    # Genesis 1,533 + Mark 678 + John 879 verses.
    assert len(lines) == 3090 and 300_000 < len(text.encode()) < 400_000
    assert lines[0] == "In the beginning God created the heaven and the earth."
    assert lines[-1].endswith("could not contain the books that should be written. Amen.")
    assert not any(ch.isdigit() for ch in lines[0] + lines[1533])  # no verse numbers
    if shutil.which("bible") is None:
        pytest.skip("bible-kjv-text not installed: cannot rebuild kjv-mini to compare")
    assert bible_text(KJV_MINI_BOOKS) == text
    with gzip.open(EMBEDDED_TEXT, "rb") as handle:
        assert handle.read() == text.encode()


@pytest.mark.skipif(shutil.which("bible") is None, reason="bible-kjv-text not installed")
def test_bible_kjv_is_the_whole_bible():
    name, text = read_text("bible-kjv")
    lines = text.splitlines()
    assert name == "bible-kjv" and len(lines) == 31102  # the verses of the KJV
    assert lines[-1] == "The grace of our Lord Jesus Christ be with you all. Amen."


def test_bible_kjv_missing_says_how_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(LgError, match=r"apt-get install bible-kjv-text.*--data kjv-mini"):
        read_text("bible-kjv")


def test_a_folder_of_text_files_is_read_in_order_hidden_skipped(tmp_path):
    (tmp_path / "b.txt").write_text("second\r\nline two")  # Windows line ends, no final newline
    (tmp_path / "a.txt").write_bytes("\ufefffirst\n".encode())  # a byte-order mark
    (tmp_path / ".hidden.txt").write_text("never")
    (tmp_path / "notes.md").write_text("not text input")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("third\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "d.txt").write_text("never either\n")
    name, text = read_text(tmp_path)
    assert name == tmp_path.name
    assert text == "first\nsecond\nline two\nthird\n"


@pytest.mark.parametrize("content, message", [
    (b"", "holds no text (empty)"),
    (b"  \n\t\n", "holds no text (only white space)"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8 text (byte 0 is 0x89)"),
    (b"abc\x00def", "binary, not text (it holds NUL bytes)"),
])
def test_bad_text_files_are_one_clear_line(tmp_path, content, message):
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    with pytest.raises(LgError) as caught:
        read_text(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_unknown_names_and_folders_without_text_are_refused(tmp_path):
    with pytest.raises(LgError, match="no such file or folder, and not a built-in text \\(kjv-mini, bible-kjv\\)"):
        read_text("no-such-corpus")
    with pytest.raises(LgError, match="is an image dataset"):
        read_text("fashion-mnist-mini")
    (tmp_path / "x.png").write_bytes(b"\x89PNG")
    with pytest.raises(LgError, match="no .txt files in the folder"):
        read_text(tmp_path)


# ---- tokenizers ----

def test_byte_tokenizer_round_trips_any_text():
    tokenizer = ByteTokenizer()
    text = "In the beginning — Ægypt, naïve ✓ 𝄞\n"
    ids = tokenizer.encode(text)
    assert ids.dtype == torch.long and ids.tolist() == list(text.encode("utf-8"))
    assert int(ids.max()) < 256 and tokenizer.decode(ids) == text
    assert tokenizer.size(CAUSAL_LM) == 256 and tokenizer.size(MASKED_LM) == 257 and tokenizer.mask_id == 256


def write_wordpiece_tokenizer(folder, *, truncate: int | None = None, mask_in_config: bool = True):
    """A BERT-like tokenizer.json ([CLS] text [SEP], a [MASK] token) made by the tokenizers library."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials)
    tokenizer.train_from_iterator([read_text("kjv-mini")[1][:20_000]], trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    if truncate:
        tokenizer.enable_truncation(truncate)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    if mask_in_config:
        (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": {"content": "[MASK]"}}))
    return tokenizer


def test_a_folders_tokenizer_json_is_used_whole(tmp_path):
    reference = write_wordpiece_tokenizer(tmp_path, truncate=4)  # a saved truncation must not cut lg's text
    tokenizer = folder_tokenizer(tmp_path)
    assert isinstance(tokenizer, FileTokenizer) and "tokenizer.json" in tokenizer.name
    assert tokenizer.prefix == (2,) and tokenizer.suffix == (3,) and tokenizer.mask_id == 4
    text = "And God said, Let there be light: and there was light.\nAnd God saw the light.\n"
    reference.no_truncation()
    expected = reference.encode(text, add_special_tokens=False).ids
    assert tokenizer.encode(text).tolist() == expected and len(expected) > 4
    assert tokenizer.size(CAUSAL_LM) == reference.get_vocab_size(with_added_tokens=True)


def test_mask_token_falls_back_to_the_conventional_names(tmp_path):
    write_wordpiece_tokenizer(tmp_path, mask_in_config=False)
    assert folder_tokenizer(tmp_path).mask_id == 4


def test_folders_without_a_tokenizer_use_bytes_and_unreadable_forms_are_refused(tmp_path):
    assert isinstance(folder_tokenizer(None), ByteTokenizer)
    assert isinstance(folder_tokenizer(tmp_path), ByteTokenizer)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    with pytest.raises(LgError, match=r"has a tokenizer \(vocab.txt\) but no tokenizer.json.*save_pretrained"):
        folder_tokenizer(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(LgError, match="not a tokenizer the tokenizers library reads"):
        folder_tokenizer(broken)


def test_checkpoints_must_share_one_tokenizer(tmp_path):
    write_wordpiece_tokenizer(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "a-copy")
    assert shared_tokenizer([("a", folder_companions(tmp_path / "a"), "a"),
                             ("copy", folder_companions(tmp_path / "a-copy"), "a-copy")]).mask_id == 4
    with pytest.raises(LgError, match=r"do not share a tokenizer \(a: tokenizer.json of .*; bytes: UTF-8 bytes\)"):
        shared_tokenizer([("a", folder_companions(tmp_path / "a"), "a"), ("bytes", {}, "-")])


# ---- windows, split, targets ----

def test_windows_are_consecutive_text_between_the_tokenizers_special_tokens():
    tokenizer = ByteTokenizer()
    ids = torch.arange(25)
    windows = cut_windows(ids, 8, tokenizer)
    assert windows.tolist() == [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))]  # tail of 1 dropped

    class Bracketing(ByteTokenizer):
        prefix, suffix = (300,), (301,)

    bracketed = cut_windows(ids, 8, Bracketing())
    assert bracketed[:, 0].eq(300).all() and bracketed[:, -1].eq(301).all()
    assert bracketed[:, 1:-1].flatten().tolist() == list(range(24))
    with pytest.raises(LgError, match="--seq-len 3 leaves 1 tokens of text per window"):
        cut_windows(ids, 3, Bracketing())


def test_causal_targets_are_the_next_text_token():
    windows = torch.tensor([[300, 10, 11, 12, 301]])
    assert causal_targets(windows, 1, 4).tolist() == [[10, 11, 12, IGNORE, IGNORE]]  # from the prefix on, no special
    plain = torch.tensor([[5, 6, 7]])
    assert causal_targets(plain, 0, 3).tolist() == [[6, 7, IGNORE]]


def test_the_test_split_is_the_last_tenth_of_the_windows(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("".join(chr(ord("a") + i % 26) for i in range(1000)))
    data = load_text(path, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=10)
    assert len(data.train) == 90 and len(data.test) == 10
    text = torch.cat([data.train.inputs.flatten(), data.test.inputs.flatten()])
    assert text.tolist() == list(path.read_bytes())  # train then test: the whole text, once, in order
    assert data.describe()["test_tokens_scored"] == 10 * 9
    # --test-fraction 1: every window is the test split, in order; 0 holds out nothing to score.
    whole = load_text(path, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=10, test_fraction=1)
    assert len(whole.train) == 0 and whole.test.inputs.flatten().tolist() == list(path.read_bytes())
    with pytest.raises(LgError, match="--test-fraction 0 holds out none of its 100 windows of 10 tokens"):
        load_text(path, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=10, test_fraction=0)
    small = tmp_path / "small.txt"
    small.write_text("tiny")
    for fraction in (0.1, 1):  # "tiny" and the newline it gets: no window, whatever is held out
        with pytest.raises(LgError, match="5 tokens make 0 windows of 10 tokens"):
            load_text(small, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=10, test_fraction=fraction)


def test_subsets_are_seeded_and_counted_in_windows(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("x" * 2000)
    make = lambda **kw: load_text(path, tokenizer=ByteTokenizer(), task=CAUSAL_LM, seq_len=10, **kw)
    assert len(make(subset=17).train) == 17 and len(make(test_subset=0.5).test) == 10
    with pytest.raises(LgError, match="--subset must be a window count or a fraction"):
        make(subset="lots")


# ---- masking ----

def masking_case(rows: int = 400, length: int = 66):
    generator = torch.Generator().manual_seed(5)
    windows = torch.randint(0, 256, (rows, length), generator=generator)
    return windows, Masking(mask_id=256, random_ids=256, start=1, end=length - 1)


def test_masking_is_seeded_fifteen_percent_of_the_text_and_follows_80_10_10():
    windows, masking = masking_case()
    inputs, labels = masking.apply(windows, torch.Generator().manual_seed(0))
    again = masking.apply(windows, torch.Generator().manual_seed(0))
    other = masking.apply(windows, torch.Generator().manual_seed(1))
    assert inputs.equal(again[0]) and labels.equal(again[1])  # the same seed, the same masks
    assert not labels.equal(other[1])
    chosen = labels != IGNORE
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # never a special position
    assert labels[chosen].equal(windows[chosen])  # labels are the original tokens
    assert inputs[~chosen].equal(windows[~chosen])  # nothing unchosen changes
    assert chosen.sum(dim=1).eq(10).all()  # 15 % of the 64 text tokens of every window: 9.6, rounded
    # Uniform over the text positions: each is chosen about 400 * 10 / 64 = 62.5 times.
    per_position = chosen[:, 1:-1].sum(dim=0).float()
    assert per_position.min() > 35 and per_position.max() < 95
    masked = (inputs == 256) & chosen
    kept = (inputs == windows) & chosen
    random = chosen & ~masked & ~kept
    total = chosen.sum().item()
    assert masked.sum().item() / total == pytest.approx(0.8, abs=0.03)
    # A random replacement equals the original 1 time in 256: "kept" holds those few too.
    assert kept.sum().item() / total == pytest.approx(0.1 + 0.1 / 256, abs=0.02)
    assert random.sum().item() / total == pytest.approx(0.1 - 0.1 / 256, abs=0.02)
    assert inputs[random].lt(256).all()


def test_every_window_gets_a_mask_even_a_short_one():
    windows = torch.randint(0, 256, (500, 3))
    _, labels = Masking(256, 256, 0, 3).apply(windows, torch.Generator().manual_seed(0))
    assert (labels != IGNORE).sum(dim=1).eq(1).all()
    assert (labels != IGNORE).sum(dim=0).min() > 100  # each of the 3 positions is chosen about 167 times


def test_masking_under_ddp_matches_one_process():
    windows, masking = masking_case(rows=8)
    single = masking.apply(windows, torch.Generator().manual_seed(3))
    for rank in range(2):  # rank r's batch holds the global batch's rows r, r + 2, ...
        part = masking.apply(windows[rank::2], torch.Generator().manual_seed(3), rank=rank, world_size=2)
        assert part[0].equal(single[0][rank::2]) and part[1].equal(single[1][rank::2])


def test_masked_test_split_has_the_same_masks_on_every_load(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(read_text("kjv-mini")[1][:5000])
    first = load_text(path, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=32, seed=7)
    second = load_text(path, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=32, seed=7)
    other = load_text(path, tokenizer=ByteTokenizer(), task=MASKED_LM, seq_len=32, seed=8)
    assert first.test.inputs.equal(second.test.inputs) and first.test.targets.equal(second.test.targets)
    assert not first.test.targets.equal(other.test.targets)
    assert (first.test.inputs == 256).any() and first.test.masking is None  # drawn once, not per use
    assert first.train.masking is not None  # the train split is masked anew each step


def test_a_masked_lm_needs_a_mask_token(tmp_path):
    write_wordpiece_tokenizer(tmp_path, mask_in_config=False)
    data = json.loads((tmp_path / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "[MASK]"]
    data["model"]["vocab"].pop("[MASK]")
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    tokenizer = folder_tokenizer(tmp_path)
    text = tmp_path / "t.txt"
    text.write_text(read_text("kjv-mini")[1][:3000])
    with pytest.raises(LgError, match="has no mask token"):
        load_text(text, tokenizer=tokenizer, task=MASKED_LM, seq_len=16)


def test_live_models_read_text_as_bytes_and_say_how_to_read_it_with_a_tokenizer():
    """A live model states no tokenizer (no folder beside it): bytes, said with the way to a tokenizer."""
    import transformers

    from lgcli.text import text_data_for

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=300))
    said: list[str] = []
    data = text_data_for([("the student", model, None, "")], "causal-lm", "kjv-mini", seq_len=16, subset=8,
                         test_subset=4, notify=said.append)
    assert data.tokenizer == "UTF-8 bytes"
    assert said == ["live models name no tokenizer: tokens are UTF-8 bytes (give one of the models as its folder's "
                    "path to read the text with the tokenizer beside it)"]
