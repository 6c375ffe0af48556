"""Tokenizers for lg's text data: a model folder's own tokenizer.json (read by
the tokenizers library, chunks encoded in parallel), or bytes (256 ids) for
a model without one; and the one tokenizer every model of a run shares."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Mapping, Sequence

from lgcli.arch.base import MASKED_LM
from lgcli.checkpoint.companions import companion_bytes, folder_companions
from lgcli.errors import LgError, one_line, shown
from lgcli.lazy import torch


# Tokens per encode call: chunks end at a line break and are encoded in
# parallel by the tokenizers library.
ENCODE_CHUNK_CHARS = 1 << 16


# Files a tokenizer can be saved as besides tokenizer.json, which lg cannot
# read without transformers' converters.
OTHER_TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "tokenizer.model", "spiece.model",
                         "sentencepiece.bpe.model")
# Mask-token names, when a folder's tokenizer_config.json does not name one:
# BERT's and RoBERTa's conventions.
MASK_TOKEN_NAMES = ("[MASK]", "<mask>")
# The parts of a tokenizer.json that decide the ids of text encoded without
# special tokens, as lg encodes it, and their names in a refusal. The
# post_processor acts only through the special tokens around a window
# (`prefix`, `suffix`), which are compared as ids instead: a re-save may add
# one that does nothing. The decoder, padding, truncation and version change
# no id.
ID_PARTS = {"model": "model", "normalizer": "normalizer", "pre_tokenizer": "pre-tokenizer",
            "added_tokens": "added tokens"}
# What a refusal of checkpoints that do not share a tokenizer advises
# (`shared_tokenizer`'s `advice`): lg eval's, and lg distill's, whose loss
# compares the teacher's and the student's distributions id by id.
SEPARATELY = "a loss per token compares models only under one tokenizer: evaluate them separately"
ANOTHER_TEACHER = ("distilling compares the two models' probabilities id by id: distil from a teacher with the "
                   "student's tokenizer")


# ---- tokenizers ----

class ByteTokenizer:
    """UTF-8 bytes as token ids 0-255; a masked LM's mask is id 256. Any
    model whose vocabulary has room (256 ids, 257 with the mask) can be
    scored and fine-tuned with it, whatever tokenizer it was trained with."""

    name = "UTF-8 bytes"
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    mask_id = 256
    random_ids = 256  # a masked LM's random replacements are bytes
    key = identity = "utf-8 bytes"
    canonical = None

    def size(self, task: str) -> int:
        """How many ids the model's vocabulary must hold for `task`."""
        return 257 if task == MASKED_LM else 256

    def encode(self, text: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class FileTokenizer:
    """A model folder's tokenizer.json, read by the `tokenizers` library.
    Text is encoded without special tokens (it is one stream cut into
    windows); `prefix` and `suffix` are the special tokens the tokenizer puts
    around one sequence ([CLS] and [SEP], or <s>), added to every window."""

    def __init__(self, files: Mapping[str, Path | bytes], where: str):
        from tokenizers import Tokenizer

        data = companion_bytes(files, "tokenizer.json")
        try:
            self.tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as error:  # the tokenizers library raises its own exception types
            raise LgError(f"{where}/tokenizer.json: not a tokenizer the tokenizers library reads "
                          f"({one_line(str(error).splitlines()[0] if str(error) else type(error).__name__)})") from None
        # A saved truncation or padding setting would cut or pad lg's chunks.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.name = f"tokenizer.json of {where}"
        vocabulary = self.tokenizer.get_vocab(with_added_tokens=True)
        self.ids = max(vocabulary.values(), default=-1) + 1
        self.random_ids = self.ids
        mask = _configured_token(files, "mask_token")
        names = (mask,) if mask is not None else MASK_TOKEN_NAMES
        self.mask_id = next((vocabulary[name] for name in names if name in vocabulary), None)
        bare = self.tokenizer.encode("a", add_special_tokens=False).ids
        full = self.tokenizer.encode("a", add_special_tokens=True).ids
        at = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), None)
        self.prefix = tuple(full[:at]) if at is not None else ()
        self.suffix = tuple(full[at + len(bare):]) if at is not None else ()
        # The bytes identify the tokenizer when they are the same: the usual
        # case, and no re-serializing; `identity` decides when they differ.
        self.key = hashlib.sha256(data).hexdigest() + f":{self.mask_id}"

    @cached_property
    def canonical(self) -> dict:
        """What decides the ids lg encodes and the special tokens it uses:
        the `ID_PARTS` as the tokenizers library writes them back (so that
        formatting, key order, a field's default left out and the older
        "a b" merges all read alike), the window's special tokens and the
        mask id."""
        saved = json.loads(self.tokenizer.to_str())
        return {**{part: saved.get(part) for part in ID_PARTS}, "prefix": list(self.prefix),
                "suffix": list(self.suffix), "mask_id": self.mask_id}

    @cached_property
    def identity(self) -> str:
        """Equal for tokenizers that give any text the same ids."""
        text = json.dumps(self.canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "tokenizer.json " + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def size(self, task: str) -> int:
        return self.ids

    def encode(self, text: str) -> torch.Tensor:
        chunks, start = [], 0
        while start < len(text):
            end = text.find("\n", start + ENCODE_CHUNK_CHARS)
            end = len(text) if end < 0 else end + 1
            chunks.append(text[start:end])
            start = end
        ids = [encoding.ids for encoding in self.tokenizer.encode_batch(chunks, add_special_tokens=False)]
        return torch.tensor([i for part in ids for i in part], dtype=torch.long)

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


Tokenizer = ByteTokenizer | FileTokenizer


def _configured_token(files: Mapping[str, Path | bytes], field: str) -> str | None:
    """A special token the tokenizer_config.json (or special_tokens_map.json)
    beside a model names: a string, or {"content": ...}."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if name not in files:
            continue
        try:
            config = json.loads(companion_bytes(files, name).decode("utf-8"))
        except (LgError, ValueError):
            continue
        value = config.get(field) if isinstance(config, dict) else None
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            return value
    return None


def model_tokenizer(files: Mapping[str, Path | bytes], where: str) -> Tokenizer:
    """The tokenizer beside a model (`Checkpoint.companions`: a model
    folder's files, or those a single file carries), bytes when it has
    none; a tokenizer saved in a form lg cannot read is an `LgError` saying
    how to write a tokenizer.json."""
    if "tokenizer.json" in files:
        return FileTokenizer(files, where)
    others = [name for name in OTHER_TOKENIZER_FILES if name in files]
    if others:
        raise LgError(f"{where} has a tokenizer ({', '.join(others)}) but no tokenizer.json, the form lg "
                      f"reads: write one with transformers' AutoTokenizer.from_pretrained(folder)"
                      f".save_pretrained(folder)")
    return ByteTokenizer()


def folder_tokenizer(folder: Path | None) -> Tokenizer:
    """The tokenizer of a model folder (bytes for None, or a folder without one)."""
    if folder is None:
        return ByteTokenizer()
    return model_tokenizer(folder_companions(folder), shown(folder))


def shared_tokenizer(sources: Sequence[tuple[str, Mapping[str, Path | bytes], str]],
                     advice: str = SEPARATELY) -> Tokenizer:
    """The one tokenizer of (row name, companion files, where they are)
    triples; checkpoints with different tokenizers are refused (their
    losses per token measure different things), saying `advice`. Tokenizers are the same
    when they give the same ids (`FileTokenizer.identity`), whatever their
    files' bytes: another transformers version re-saves one differently."""
    found: dict[str, tuple[Tokenizer, list[str]]] = {}
    for name, files, where in sources:
        tokenizer = model_tokenizer(files, where)
        found.setdefault(tokenizer.key, (tokenizer, []))[1].append(name)
    if len(found) > 1:
        same: dict[str, tuple[Tokenizer, list[str]]] = {}
        for tokenizer, names in found.values():
            same.setdefault(tokenizer.identity, (tokenizer, []))[1].extend(names)
        found = same
    if len(found) > 1:
        groups = list(found.values())
        first = groups[0][0]
        described = "; ".join(f"{', '.join(names)}: {tokenizer.name}" + _differing(first, tokenizer, index)
                              for index, (tokenizer, names) in enumerate(groups))
        raise LgError(f"the checkpoints do not share a tokenizer ({described}); {advice}")
    return next(iter(found.values()))[0]


def _differing(first: Tokenizer, other: Tokenizer, index: int) -> str:
    """', differing in ...' naming what sets `other` apart from `first`;
    empty for the first row, and where one of them is bytes (the names say)."""
    if index == 0 or first.canonical is None or other.canonical is None:
        return ""
    a, b = first.canonical, other.canonical
    differences = _model_differences(a["model"] or {}, b["model"] or {})
    differences += [ID_PARTS[part] for part in ("normalizer", "pre_tokenizer") if a[part] != b[part]]
    if a["added_tokens"] != b["added_tokens"]:
        counts = len(a["added_tokens"] or []), len(b["added_tokens"] or [])
        differences.append("added tokens" + (f" ({counts[0]} against {counts[1]})" if counts[0] != counts[1] else ""))
    if (a["prefix"], a["suffix"]) != (b["prefix"], b["suffix"]):
        differences.append(f"special tokens around a window ({_around(a)} against {_around(b)})")
    if a["mask_id"] != b["mask_id"]:
        differences.append(f"mask id ({a['mask_id']} against {b['mask_id']})")
    return f", differing in {', '.join(differences)}" if differences else ""


def _model_differences(a: dict, b: dict) -> list[str]:
    """The model parts two tokenizer.json files differ in: its type, the
    vocabulary (sizes, or how many ids name another token), the merges (BPE)
    and the model's other settings (by name)."""
    if a.get("type") != b.get("type"):
        return [f"model ({a.get('type')} against {b.get('type')})"]
    differences = []
    if a.get("vocab") != b.get("vocab"):
        ours, theirs = _entries(a.get("vocab")), _entries(b.get("vocab"))
        if len(ours) != len(theirs):
            differences.append(f"vocabulary size ({len(ours)} against {len(theirs)})")
        else:
            changed = sum(ours.get(i) != theirs.get(i) for i in ours.keys() | theirs.keys())
            differences.append(f"vocabulary ({changed} of {len(ours)} entries)")
    if a.get("merges") != b.get("merges"):
        ours, theirs = a.get("merges") or [], b.get("merges") or []
        differences.append(f"merges ({len(ours)} against {len(theirs)})" if len(ours) != len(theirs) else
                           f"merges ({sum(x != y for x, y in zip(ours, theirs))} of {len(ours)})")
    settings = sorted(key for key in a.keys() | b.keys() if key not in ("type", "vocab", "merges")
                      and a.get(key) != b.get(key))
    if settings:
        differences.append(f"model settings ({', '.join(settings)})")
    return differences


def _entries(vocab) -> dict:
    """A vocabulary as {id: entry}: a dict of token: id (BPE, WordPiece,
    WordLevel) or a list of [token, score] (Unigram, its position the id)."""
    if isinstance(vocab, dict):
        return {id_: token for token, id_ in vocab.items()}
    return {i: json.dumps(entry) for i, entry in enumerate(vocab or [])}


def _around(canonical: dict) -> str:
    """A window's special token ids, as 'prefix ... suffix'."""
    return " ".join([*map(str, canonical["prefix"]), "...", *map(str, canonical["suffix"])])
