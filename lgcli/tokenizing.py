"""Tokenizers for lg's text data: a model folder's own tokenizer.json (read by
the tokenizers library, chunks encoded in parallel), or bytes (256 ids) for
a model without one; and the one tokenizer every model of a run shares."""

from __future__ import annotations

import hashlib
import json
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
    key = "utf-8 bytes"

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
        self.key = hashlib.sha256(data).hexdigest() + f":{self.mask_id}"

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


def shared_tokenizer(sources: Sequence[tuple[str, Mapping[str, Path | bytes], str]]) -> Tokenizer:
    """The one tokenizer of (row name, companion files, where they are)
    triples; checkpoints with different tokenizers are refused (their
    losses per token measure different things)."""
    found: dict[str, tuple[Tokenizer, list[str]]] = {}
    for name, files, where in sources:
        tokenizer = model_tokenizer(files, where)
        found.setdefault(tokenizer.key, (tokenizer, []))[1].append(name)
    if len(found) > 1:
        described = "; ".join(f"{', '.join(names)}: {tokenizer.name}" for tokenizer, names in found.values())
        raise LgError(f"the checkpoints do not share a tokenizer ({described}); a loss per token compares "
                      f"models only under one tokenizer: evaluate them separately")
    return next(iter(found.values()))[0]
