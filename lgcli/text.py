"""Text for `lg eval` on language models: the data, the tokenizer, token
windows the training loop takes, and the loss on held-out windows.

Data (`--data`): a UTF-8 text file, a folder of ``.txt`` files (read in
sorted path order, hidden files and folders skipped, joined by newlines), or
a built-in name:

- ``kjv-mini``: Genesis, Mark and John of the King James Bible (about 370 KB),
  shipped inside the package so demos and tests need nothing installed. The
  default for text models.
- ``bible-kjv``: the whole King James Bible (about 4.1 MB), from Debian's
  ``bible-kjv-text`` (the ``bible`` program prints it).

Both built-ins are one verse per line, without chapter headings or verse
numbers (`normalise_bible`): references are not language, and a model
would spend its capacity predicting them. A user's text is used as it is,
except that a byte-order mark is dropped and line ends become ``\\n``.

Tokenizer: the model folder's own ``tokenizer.json`` (read by the
`tokenizers` library, offline), else UTF-8 bytes as token ids 0-255 (a
masked LM's mask is id 256). Every checkpoint of one evaluation must share
it: a loss per token compares models only under one tokenizer.

Split: the text is tokenised as one stream and cut into consecutive windows
of ``--seq-len`` tokens (the tokenizer's own special tokens, such as BERT's
[CLS] ... [SEP], around each window's content; the tail that does not fill a
window dropped). The last 10 % of the windows (``--test-fraction``; at
least one) are the test split, the rest train: the test text follows the
train text and never overlaps it.

Scores: a causal LM's mean next-token cross-entropy over the test windows
(each window's first content token is predicted from the tokenizer's prefix
only, if any); a masked LM's cross-entropy on 15 % of each window's content
tokens, masked by BERT's rule (80 % [MASK], 10 % a random token, 10 %
unchanged), drawn once from ``--seed`` so every checkpoint is scored on the
same masks. Perplexity is exp(loss).
"""

from __future__ import annotations

import gzip
import math
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from lgcli.arch.base import CAUSAL_LM, MASKED_LM
from lgcli.checks import WHOLE_TEST_FRACTION, apt_get_install, check_seed, check_test_fraction
from lgcli.data import parse_subset, subset_count
from lgcli.errors import LgError, notify_stderr, one_line, os_reason, shown
from lgcli.lazy import F, no_grad, torch
from lgcli.pace import PassPace
from lgcli.tokenizing import SEPARATELY, ByteTokenizer, Tokenizer, shared_tokenizer
from lgcli.devices import autocast, distributed_setup, resolve_device
from lgcli.losses import IGNORE

KJV_MINI, BIBLE_KJV = "kjv-mini", "bible-kjv"
DEFAULT_TEXT = KJV_MINI
EMBEDDED_TEXT = Path(__file__).parent / "datasets" / "kjv-mini" / "kjv-mini.txt.gz"
# The books kjv-mini holds, as `bible` names their ranges: narrative prose
# from both testaments, about 370 KB.
KJV_MINI_BOOKS = ("Gen1:1-Gen50:26", "Mark1:1-Mark16:20", "John1:1-John21:25")
BIBLE_WHOLE = "Gen1:1-Rev22:21"
BIBLE_INSTALL = apt_get_install("bible-kjv-text")
# Windows of this many tokens unless --seq-len says otherwise (or the model
# has fewer positions): long enough for sentence-level context, short enough
# that a probe step on CPU takes a fraction of a second for a small model.
DEFAULT_SEQ_LEN = 128
DEFAULT_TEST_FRACTION = 0.1
# BERT's masking (Devlin et al. 2019, section 3.1): 15 % of the tokens are
# chosen; of those 80 % become the mask, 10 % a random token, 10 % stay.
MASK_PROBABILITY = 0.15
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1
# The most text lg reads from --data (the whole KJV is 4.3 MB).
MAX_TEXT_BYTES = 2**30
# Scoring holds a batch's logits (batch x seq_len x vocabulary floats): at
# most this many, so a 50k-token vocabulary does not take gigabytes.
MAX_LOGIT_ELEMENTS = 1 << 26


def builtin_texts() -> list[str]:
    return [KJV_MINI, BIBLE_KJV]


def check_data_source(source: object, flag: str = "--data") -> None:
    """Refuse a --data (or the `flag` given) that names nothing (neither a
    built-in data set or text nor an existing path) before a command loads
    a model or pays for torch: which kind of data a model takes is known
    only once it is read, so the message names both kinds of built-in."""
    from lgcli.data import builtin_names, stat_data_path

    if not isinstance(source, (str, os.PathLike)):
        return  # data already read (an ImageData, a TextData), or none given
    text = os.fspath(source)
    if text in builtin_names() or text in builtin_texts():
        return
    stat_data_path(text, f"no such file or folder, and not a built-in text ({', '.join(builtin_texts())}) "
                         f"or image dataset ({', '.join(builtin_names())})", flag)


# ---- reading text ----

_VERSE = re.compile(r"^\s+\d+ (.*\S)\s*$")


def normalise_bible(listing: str) -> str:
    """`bible -l0` output as one verse per line: chapter headings ("Genesis
    1"), blank lines and verse numbers dropped."""
    verses = [match[1] for line in listing.splitlines() if (match := _VERSE.match(line))]
    return "\n".join(verses) + "\n"


def bible_text(ranges: Sequence[str] = (BIBLE_WHOLE,), *, flag: str = "--data") -> str:
    """The King James text of `ranges` from Debian's `bible` program,
    normalised. Its hint names `flag`, the option the text was asked for by."""
    program = shutil.which("bible")
    if program is None:
        raise LgError(f"{BIBLE_KJV} is not installed (no `bible` program): run `{BIBLE_INSTALL}`, "
                      f"or use {flag} {KJV_MINI} (embedded)")
    parts = []
    for verses in ranges:
        try:
            done = subprocess.run([program, "-l0", verses], capture_output=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise LgError(f"{BIBLE_KJV}: `bible` did not run ({one_line(str(error))})") from None
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise LgError(f"{BIBLE_KJV}: `bible -l0 {verses}` failed"
                          + (f" ({one_line(said[0])})" if said else f" (exit status {done.returncode})"))
        parts.append(normalise_bible(done.stdout.decode("utf-8", "replace")))
    text = "".join(parts)
    if not text.strip():
        raise LgError(f"{BIBLE_KJV}: `bible` printed no verses (is {BIBLE_INSTALL} complete?)")
    return text


def read_text(source: str | os.PathLike, *, flag: str = "--data") -> tuple[str, str]:
    """(name, text) of --data: a built-in name, a UTF-8 file, or a folder of
    .txt files. An unreadable, empty, binary or non-UTF-8 input is an
    `LgError` naming it by `flag`, the option the user gave it with (`lg
    shrink --calibrate` reads its text here too)."""
    text = os.fspath(source)
    if text == KJV_MINI:
        with gzip.open(EMBEDDED_TEXT, "rb") as handle:
            return KJV_MINI, handle.read().decode("utf-8")
    if text == BIBLE_KJV:
        return BIBLE_KJV, bible_text(flag=flag)
    from lgcli.data import builtin_names, stat_data_path

    where = shown(text)
    if text in builtin_names():
        raise LgError(f"{flag} {where} is an image dataset; a text model takes a UTF-8 text file, a folder of "
                      f".txt files, or {' or '.join(builtin_texts())}")
    path, info = stat_data_path(text, f"no such file or folder, and not a built-in text "
                                      f"({', '.join(builtin_texts())})", flag)
    if stat.S_ISDIR(info.st_mode):
        files = _text_files(path)
        if not files:
            raise LgError(f"{flag} {where}: no .txt files in the folder")
    elif stat.S_ISREG(info.st_mode):
        files = [path]
    else:
        raise LgError(f"{flag} {where}: not a regular file or a folder")
    parts, total = [], 0
    for file in files:
        part = _read_utf8(file, MAX_TEXT_BYTES - total, flag)
        total += len(part)
        parts.append(part if part.endswith("\n") or not part else part + "\n")
    joined = "".join(parts)
    if not joined.strip():
        raise LgError(f"{flag} {where}: holds no text" + (" (empty)" if not joined else " (only white space)"))
    return path.name or text, joined


def _text_files(folder: Path) -> list[Path]:
    """The .txt files under `folder`, sorted by path; hidden files and
    folders skipped, symbolic links to folders not followed."""
    def refuse(error: OSError) -> None:
        raise LgError(f"cannot list folder {shown(error.filename or folder)}: {os_reason(error)}")

    found = []
    for top, folders, names in os.walk(folder, onerror=refuse, followlinks=False):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        found += [Path(top, name) for name in names if not name.startswith(".") and name.lower().endswith(".txt")]
    return sorted(found)


def _read_utf8(path: Path, budget: int, flag: str = "--data") -> str:
    """`path`'s text, of at most `budget` bytes; its errors name `flag`."""
    where = shown(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(budget + 1)
    except OSError as error:
        raise LgError(f"{flag} {where}: {os_reason(error)}") from None
    if len(data) > budget:
        raise LgError(f"{flag} {where}: more than {MAX_TEXT_BYTES:,} bytes of text, lg's limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LgError(f"{flag} {where}: not UTF-8 text (byte {error.start} is {data[error.start]:#04x})") from None
    if "\x00" in text:
        raise LgError(f"{flag} {where}: binary, not text (it holds NUL bytes)")
    # A byte-order mark is not text; Windows and old Mac line ends are one newline.
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


# ---- windows ----

def content_span(tokenizer: Tokenizer, seq_len: int, seq_len_flag: str = "--seq-len") -> tuple[int, int]:
    """Where a window's text lies: positions [start, end) of `seq_len`, the
    rest being the tokenizer's special tokens. A refusal names `seq_len` by
    `seq_len_flag`, the option the user gave it with."""
    start, end = len(tokenizer.prefix), seq_len - len(tokenizer.suffix)
    if end - start < 2:
        special = len(tokenizer.prefix) + len(tokenizer.suffix)
        raise LgError(f"{seq_len_flag} {seq_len} leaves {max(end - start, 0)} tokens of text per window beside the "
                      f"tokenizer's {special} special tokens: give at least {special + 2}")
    return start, end


def cut_windows(ids: torch.Tensor, seq_len: int, tokenizer: Tokenizer) -> torch.Tensor:
    """(N, seq_len) windows: consecutive runs of `ids`, each between the
    tokenizer's prefix and suffix; the tail that fills no window is dropped."""
    start, end = content_span(tokenizer, seq_len)
    length = end - start
    count = len(ids) // length
    body = ids[:count * length].view(count, length)
    prefix = torch.tensor(tokenizer.prefix, dtype=torch.long).expand(count, -1)
    suffix = torch.tensor(tokenizer.suffix, dtype=torch.long).expand(count, -1)
    return torch.cat([prefix, body, suffix], dim=1)


def causal_targets(windows: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Each position's next token, where that token is text: the model
    predicts every content token from the ones before it (and the prefix),
    never a special token; IGNORE elsewhere."""
    targets = torch.full_like(windows, IGNORE)
    first = max(start, 1)  # a window's very first token has nothing before it to predict it from
    targets[:, first - 1:end - 1] = windows[:, first:end]
    return targets


@dataclass(frozen=True)
class Masking:
    """BERT's masking of a window's content positions [start, end)."""

    mask_id: int
    random_ids: int  # random replacements are drawn from [0, random_ids)
    start: int
    end: int

    def count(self) -> int:
        """Tokens chosen per window: MASK_PROBABILITY of its text, rounded,
        at least one. A fixed number per window, as BERT's own data pipeline
        chooses them (create_pretraining_data.py), so every batch's loss is a
        mean over the same number of tokens: under DDP the mean of the
        ranks' losses is then the global batch's, as in one process."""
        return max(1, round(MASK_PROBABILITY * (self.end - self.start)))

    def apply(self, windows: torch.Tensor, generator: torch.Generator, rank: int = 0,
              world_size: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels): `count()` content positions of each window
        chosen uniformly, 80 % of them replaced by the mask, 10 % by a random
        token, 10 % kept; labels are the original tokens where chosen,
        IGNORE elsewhere. Every draw is made for the whole global batch
        (`world_size` times this rank's) and this rank keeps every
        `world_size`-th row, as `augment_batch` does, so DDP masks as one
        process would."""
        batch, length = windows.shape
        rows = batch * world_size

        def draw(values: torch.Tensor) -> torch.Tensor:
            return values[rank::world_size]

        order = draw(torch.rand(rows, length, generator=generator))
        kind = draw(torch.rand(rows, length, generator=generator))
        replacement = draw(torch.randint(0, self.random_ids, (rows, length), generator=generator))
        # Uniform draws are below 1: special positions (set to 2) are never among the smallest.
        order[:, :self.start] = 2.0
        order[:, self.end:] = 2.0
        picked = order.topk(self.count(), dim=1, largest=False).indices
        chosen = torch.zeros(windows.shape, dtype=torch.bool).scatter_(1, picked, True)
        inputs = windows.clone()
        masked = chosen & (kind < MASK_SHARE)
        randomised = chosen & (kind >= MASK_SHARE) & (kind < MASK_SHARE + RANDOM_SHARE)
        inputs[masked] = self.mask_id
        inputs[randomised] = replacement[randomised]
        labels = torch.where(chosen, windows, torch.full_like(windows, IGNORE))
        return inputs, labels


def text_logits(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """A Hugging Face language model's (batch, tokens, vocabulary) logits.
    Windows are never padded, so every position attends to all it may."""
    return model(input_ids=inputs).logits


class TokenWindows:
    """Token windows as `lgcli.train.Batches`: inputs and their targets,
    and for a masked LM's train split the masking drawn anew every step
    (from the step's generator, so a run is reproducible and resumable)."""

    unit = "windows"

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, masking: Masking | None = None):
        self.inputs, self.targets, self.masking = inputs, targets, masking

    def __len__(self) -> int:
        return len(self.inputs)

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        chosen = torch.as_tensor(list(indices), dtype=torch.long)
        return self.inputs[chosen], self.targets[chosen]

    def vary(self, inputs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator, rank: int,
             world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.masking is None:
            return inputs, targets
        return self.masking.apply(inputs, generator, rank, world_size)

    def logits(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        return text_logits(model, inputs)

    def subset(self, indices: Sequence[int]) -> "TokenWindows":
        chosen = torch.as_tensor(list(indices), dtype=torch.long)
        return TokenWindows(self.inputs[chosen], self.targets[chosen], self.masking)

    def scored_tokens(self) -> int:
        """How many targets the loss is over (a masked train split's change every step: 0)."""
        return 0 if self.masking is not None else int((self.targets != IGNORE).sum())


@dataclass
class TextData:
    """A text's train and test windows for one task and tokenizer, and what they are."""

    name: str
    task: str
    train: TokenWindows
    test: TokenWindows
    seq_len: int
    tokenizer: str
    tokens: int  # the whole text's, before windows were cut
    test_split: str

    def describe(self) -> dict:
        return {"name": self.name, "task": self.task, "train": len(self.train), "test": len(self.test),
                "seq_len": self.seq_len, "tokens": self.tokens, "test_tokens_scored": self.test.scored_tokens(),
                "tokenizer": self.tokenizer, "test_split": self.test_split}


def load_text(source: str | os.PathLike = DEFAULT_TEXT, *, tokenizer: Tokenizer, task: str, seq_len: int,
              test_fraction: float = DEFAULT_TEST_FRACTION, subset: int | float | str | None = None,
              test_subset: int | float | str | None = None, seed: int = 0, flag: str = "--data",
              seq_len_flag: str = "--seq-len") -> TextData:
    """`source` read, tokenised and cut into windows of `seq_len` tokens for
    `task` (causal-lm or masked-lm): the last `test_fraction` of the windows
    (at least one) held out, and optionally a seeded `subset` of the train
    windows and `test_subset` of the test windows (a count or a fraction).
    A masked LM's test masks are drawn here, once, from `seed`. Errors
    about `source` name it by `flag`, and about `seq_len` by `seq_len_flag`:
    the options the user gave them with."""
    if task not in (CAUSAL_LM, MASKED_LM):
        raise ValueError(f"load_text scores causal or masked LMs, not {task!r}")
    seed = check_seed(seed)
    test_fraction = check_test_fraction(test_fraction)
    subset = parse_subset(subset, "--subset", unit="window")
    test_subset = parse_subset(test_subset, "--test-subset", unit="window")
    name, text = read_text(source, flag=flag)
    ids = tokenizer.encode(text)
    start, end = content_span(tokenizer, seq_len, seq_len_flag)
    windows = cut_windows(ids, seq_len, tokenizer)
    held_out = max(1, round(len(windows) * test_fraction))
    if test_fraction == 0:
        raise LgError(f"{flag} {shown(name)}: --test-fraction 0 holds out none of its {len(windows)} windows of "
                      f"{seq_len} tokens, so nothing would be scored (give a --test-fraction above 0; 1, with "
                      f"--steps 0, scores all of them)")
    if not len(windows) or (len(windows) - held_out < 1 and test_fraction != WHOLE_TEST_FRACTION):
        # Only the remedy that applies (lg shrink --calibrate has no --test-fraction).
        # Calibration draws from the train split too: the test split stays unseen by what lg eval then scores.
        drawn = "; calibration draws from the train split" if flag == "--calibrate" else ""
        raise LgError(f"{flag} {shown(name)}: its {len(ids):,} tokens make {len(windows)} windows of {seq_len} "
                      f"tokens, too few for a train and a test split{drawn} (give more text or a smaller "
                      f"{seq_len_flag})")
    train_windows = windows[:len(windows) - held_out]
    test_windows = windows[len(windows) - held_out:]
    train_windows = _take(train_windows, subset, seed, "--subset")
    test_windows = _take(test_windows, test_subset, seed, "--test-subset")
    if task == CAUSAL_LM:
        train = TokenWindows(train_windows, causal_targets(train_windows, start, end))
        test = TokenWindows(test_windows, causal_targets(test_windows, start, end))
    else:
        if tokenizer.mask_id is None:
            raise LgError(f"the {tokenizer.name} has no mask token (mask_token in tokenizer_config.json): a masked "
                          f"LM cannot be scored with it")
        masking = Masking(tokenizer.mask_id, tokenizer.random_ids, start, end)
        train = TokenWindows(train_windows, train_windows.clone(), masking)
        # One draw for the test split, from the seed alone: every checkpoint
        # (and every point of every curve) is scored on the same masks.
        test = TokenWindows(*masking.apply(test_windows, torch.Generator().manual_seed(seed)))
    split = (f"the last {test_fraction * 100:g} % of the windows ({held_out}; the text after the train split's)"
             + (f", {len(test_windows)} of them kept" if test_subset is not None else ""))
    return TextData(name=name, task=task, train=train, test=test, seq_len=seq_len, tokenizer=tokenizer.name,
                    tokens=len(ids), test_split=split)


def _take(windows: torch.Tensor, amount: int | float | None, seed: int, option: str) -> torch.Tensor:
    """`amount` (a count or a fraction) of `windows`, chosen by `seed`, in text order."""
    if amount is None:
        return windows
    count = subset_count(amount, len(windows), option, "windows")
    chosen = torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed))[:count].sort().values
    return windows[chosen]


# ---- language models ----

def text_data_for(models: Sequence[tuple[str, torch.nn.Module, Mapping[str, Path | bytes] | None, str]], task: str,
                  data: "TextData | str | os.PathLike | None", *, seq_len: int | None = None,
                  subset: int | float | str | None = None, test_subset: int | float | str | None = None,
                  test_fraction: float | None = None, seed: int = 0,
                  notify: Callable[[str], None] = notify_stderr, flag: str = "--data",
                  seq_len_flag: str = "--seq-len", tokenizer_advice: str = SEPARATELY) -> TextData:
    """Text for language models of `task` (one row each: name, live model,
    the files beside its weights, where they are): `data` as given, or
    read (default kjv-mini) and cut into windows of `seq_len` tokens
    (default min(128, the models' positions)) with the models' shared
    tokenizer, checked against every model's vocabulary and positions. A
    row's files None (a live model handed to the API, a resize the bench
    made) states no tokenizer: it takes the others' (bytes when none says).
    Errors about `data` name it by `flag`, and about `seq_len` by
    `seq_len_flag`: the options the user gave them with; tokenizers that
    differ are refused saying `tokenizer_advice`."""
    stated = [(name, files, where) for name, _, files, where in models if files is not None]
    tokenizer = shared_tokenizer(stated, tokenizer_advice) if stated else ByteTokenizer()
    needed = tokenizer.size(task)
    positions: list[tuple[int, str]] = []
    for name, model, _, _ in models:
        vocabulary, most = text_sizes(model)
        if vocabulary is not None and vocabulary < needed:
            ids = "256 byte ids and the mask id 256" if isinstance(tokenizer, ByteTokenizer) and needed > 256 else \
                f"{needed} ids"
            raise LgError(f"{name}'s vocabulary has {vocabulary} tokens; the {tokenizer.name} needs {ids}")
        if most is not None:
            positions.append((most, name))
    shortest = min(positions, default=None)
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, shortest[0]) if shortest else DEFAULT_SEQ_LEN
    elif shortest is not None and seq_len > shortest[0]:
        raise LgError(f"{seq_len_flag} {seq_len} is longer than {shortest[1]} can read: it has {shortest[0]} positions")
    if isinstance(data, TextData):
        if data.task != task or data.tokenizer != tokenizer.name or (shortest and data.seq_len > shortest[0]):
            raise LgError(f"{data.name}'s windows were made for a {data.task} with the {data.tokenizer} and "
                          f"{data.seq_len} tokens: they do not fit these models")
    else:
        source = DEFAULT_TEXT if data is None else os.fspath(data)
        data = load_text(source, tokenizer=tokenizer, task=task, seq_len=seq_len, seed=seed, subset=subset,
                         test_subset=test_subset, flag=flag, seq_len_flag=seq_len_flag,
                         test_fraction=DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction)
    if isinstance(tokenizer, ByteTokenizer):
        # Said once the data are read, so that bad input is still a single line.
        notify("no tokenizer.json beside the models' weights: tokens are UTF-8 bytes" if stated else
               "live models name no tokenizer: tokens are UTF-8 bytes (give one of the models as its folder's "
               "path to read the text with the tokenizer beside it)")
    return data


def text_sizes(model: torch.nn.Module) -> tuple[int | None, int | None]:
    """(vocabulary, positions) of a Hugging Face language model, under
    transformers' common config names (each config class maps its own
    fields to them: GPT-2's n_positions answers max_position_embeddings);
    None where the model does not say."""
    config = getattr(model, "config", None)
    vocabulary = getattr(config, "vocab_size", None)
    positions = getattr(config, "max_position_embeddings", None)
    return (vocabulary if isinstance(vocabulary, int) else None,
            positions if isinstance(positions, int) else None)


@no_grad
def evaluate_text(model: torch.nn.Module, data: TokenWindows, *, batch_size: int = 256,
                  device: str = "cpu", examples: list | None = None,
                  pace: PassPace | None = None) -> dict[str, float]:
    """Mean cross-entropy per scored token over all of `data` (a causal
    LM's next tokens, a masked LM's masked tokens), and perplexity, its
    exponential. Under DDP each process scores a share and the totals are
    summed, so every process returns the same figures. `examples`, a list,
    gets each window's [loss sum, scored tokens] of this process's share:
    what a bootstrap over test windows resamples (`lgcli.intervals`).
    `pace` says how long the pass takes when that is long."""
    distributed = distributed_setup(device)
    target = resolve_device(device, distributed)
    batch_size = scoring_batch_size(model, data, batch_size)
    was_training = model.training
    model.to(target).eval()
    totals = torch.zeros(2, dtype=torch.float64)  # loss sum, scored tokens
    indices = list(range(distributed.rank, len(data), distributed.world_size))
    if pace is not None:
        pace.begin(len(indices), batch_size, "test windows")
    for first in range(0, len(indices), batch_size):
        inputs, targets = data.batch(indices[first:first + batch_size])
        inputs, targets = inputs.to(target), targets.to(target)
        with autocast(target):
            logits = text_logits(model, inputs).float()
        if examples is not None:
            per_token = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE,
                                        reduction="none").view(targets.shape).double()
            examples.extend([float(l), int(n)] for l, n in zip(per_token.sum(-1).tolist(),
                                                                 (targets != IGNORE).sum(-1).tolist()))
        totals += torch.tensor([loss_sum(logits, targets), (targets != IGNORE).sum().item()], dtype=torch.float64)
        if pace is not None:
            pace.batch_done()
    totals = distributed.sum(totals)
    model.train(was_training)
    loss = totals[0].item() / max(totals[1].item(), 1.0)
    return {"loss": loss, "perplexity": perplexity_of(loss), "tokens": int(totals[1].item())}


def scoring_batch_size(model: torch.nn.Module, data: TokenWindows, batch_size: int) -> int:
    """Windows scored at once: at most `batch_size`, and at most
    MAX_LOGIT_ELEMENTS logits (a 50k-token vocabulary's take gigabytes)."""
    length = data.inputs.shape[1] if len(data) else 1
    return max(1, min(batch_size, MAX_LOGIT_ELEMENTS // (length * (text_sizes(model)[0] or 1))))


def loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """A batch's summed cross-entropy over its scored targets (IGNORE left out)."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE, reduction="sum").item()


def perplexity_of(loss: float) -> float:
    """exp(mean cross-entropy per token); inf past a float's range."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf
