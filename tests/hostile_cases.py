"""Seeded, generated hostile inputs for `lg`, and a fast runner for them.

Every case is one `lg` command line with what it expects: "ok" (exit 0 with a
valid output), "error" (a proper error: exit 1, or 2 for usage errors) or
"either". Whatever the expectation, `lg` must keep the contract:

- exit 0 with a valid output (an `-o` file that safetensors reads in full, a
  non-empty stdout for `inspect` and `eval`, a readable checkpoint for
  `-o -`), or a non-zero exit (1; 2 for usage errors) with exactly one line
  ``lg: error: <text>`` on stderr, the last (lg's own progress notes may
  precede it, a warning or traceback may not), where <text> does not start with a Python
  exception class name nor is an unforeseen exception reworded ("internal
  error ... (ValueError: ...)"), and no "Traceback" anywhere;
- after a failure nothing new in the case's folders (no output, no
  ``.NAME.*.tmp*``), after a success nothing new but the output;
- every input (and a pre-existing output) byte-identical afterwards;
- no pickle payload ran (its marker file is absent);
- bounded time (TIMEOUT s) and memory (the child's address space is capped at
  its size at fork + MEMORY_HEADROOM; a MemoryError, a failed allocation
  reported as "out of memory", or a kill is a failure).

Cases run in `os.fork()`ed children of this process (torch, timm and
lgcli.cli imported once, and lg's lazy imports warmed up by `warm_up`), two at
a time, each with its own stdin/stdout/stderr file descriptors, working
folder, resource limits and a wall-clock kill. Knobs (environment):
HOSTILE_SEED, HOSTILE_TIMEOUT (s per case), HOSTILE_MEMORY_MB (headroom),
HOSTILE_JOBS.

Families (see the generators below): mutations, headers, pickles, paths,
requests, images.

    .venv/bin/python tests/hostile_cases.py --report [--family NAME ...] [--seed N]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import re
import resource
import shutil
import signal
import stat
import struct
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(HERE), str(REPO)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402

SEED = int(os.environ.get("HOSTILE_SEED", "20240917"))
TIMEOUT = float(os.environ.get("HOSTILE_TIMEOUT", "8"))
MEMORY_HEADROOM = int(os.environ.get("HOSTILE_MEMORY_MB", "2048")) * 2**20
JOBS = int(os.environ.get("HOSTILE_JOBS", "2"))
FAMILIES = ("mutations", "headers", "pickles", "paths", "requests", "images")
IS_ROOT = os.geteuid() == 0

EXC_NAME = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Warning|Interrupt|Exit|Bomb\w*|Parameter|Option|Usage\w*)\b:?")
CAMEL_NAME = re.compile(r"^[A-Z][a-z]+[A-Z]\w*:")
# An unforeseen exception dressed up as a message: "internal error ... (ValueError: ...)".
HIDDEN_CRASH_NAMES = re.compile(r"\b[A-Z]\w*(Error|Exception)\b: ")
MEMORY = re.compile(r"MemoryError|can't allocate memory|Cannot allocate memory|std::bad_alloc|\bout of memory\b")
PREFIX = "lg: error: "

# Filled by generate(): cases per family (python tests/hostile_cases.py --report prints them).
CASE_COUNTS: dict[str, int] = {}


# ====================================================================== cases

@dataclass
class Case:
    family: str
    name: str
    argv: list[str]
    expect: str  # "ok" | "error" | "either"
    dir: Path  # the case's own folder (cwd; holds in/ and out/)
    codes: tuple[int, ...] = (1,)  # accepted non-zero exit codes
    stdin: Any = "null"  # "null" | "zero" | "closed" | ("file", path) | ("bytes", data)
    stdout: str = "capture"  # "capture" | "full" (/dev/full)
    output: str | None = None  # the -o path (absolute) or "-" (checkpoint on stdout)
    check: str = "none"  # on exit 0: "file" | "stdout" (non-empty) | "stdout-st" | "none"
    marker: Path | None = None  # must not exist afterwards (pickle payloads)
    fifo_writers: list[tuple[Path, bytes]] = field(default_factory=list)
    pipe_data: bytes | None = None  # "{PIPE}" in argv becomes /dev/fd/N of a pipe fed with this
    may_change: tuple[Path, ...] = ()  # pre-existing files allowed to change on exit 0 (--force)
    may_create: tuple[Path, ...] = ()  # extra files allowed to appear on exit 0 (--plot)
    timeout: float = 0.0  # 0: TIMEOUT

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}"

    def describe_argv(self) -> str:
        root = str(self.dir.parent.parent.parent)
        parts = []
        for arg in self.argv:
            arg = arg.replace(str(self.dir) + "/", "").replace(root + "/", "$ROOT/")
            if len(arg) > 60:
                arg = arg[:28] + "..." + arg[-20:]
            parts.append(repr(arg) if (not arg or any(c in arg for c in " \n\r\t'\"\\") or not arg.isprintable()) else arg)
        text = "lg " + " ".join(parts)
        if isinstance(self.stdin, tuple):
            text += " <" + ("file" if self.stdin[0] == "file" else f"pipe({len(self.stdin[1])}B)")
        elif self.stdin != "null":
            text += f" <{self.stdin}"
        return text


@dataclass
class Outcome:
    case: Case
    code: int | None  # exit status, None when killed by a signal
    signal: int | None
    killed: bool  # by the timeout
    seconds: float
    stdout: bytes
    stderr: str
    failures: list[tuple[str, str]] = field(default_factory=list)  # (clause, detail)

    @property
    def passed(self) -> bool:
        return not self.failures

    def line(self) -> str:
        first = self.stderr.strip().splitlines()[0] if self.stderr.strip() else ""
        if len(first) > 160:
            first = first[:157] + "..."
        code = f"killed(timeout {self.seconds:.0f}s)" if self.killed else (
            f"signal {self.signal}" if self.signal else f"exit {self.code}")
        clauses = "; ".join(f"{c}: {d}" for c, d in self.failures)
        return (f"{self.case.id} [expect {self.case.expect}{'' if self.case.codes == (1,) else ' ' + str(self.case.codes)}] "
                f"{code} -- {clauses} | {self.case.describe_argv()} | stderr: {first!r}")


# ====================================================================== safetensors helpers

def split_st(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def build_st(header: Any, payload: bytes, *, length: int | None = None, pad: bool = True) -> bytes:
    if isinstance(header, (dict, list)):
        raw = json.dumps(header, separators=(",", ":")).encode()
    elif isinstance(header, str):
        raw = header.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(header)
    if pad and isinstance(header, dict):
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if length is None else length % 2**64) + raw + payload


def st_rejects(data: bytes) -> bool:
    """Whether the safetensors library itself refuses these bytes."""
    try:
        safetensors.deserialize(data)
        safetensors.torch.load(data)
    except Exception:
        return True
    return False


def st_save(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    return safetensors.torch.save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata)


def tensor_entries(header: dict) -> list[str]:
    return [k for k in header if k != "__metadata__"]


# ====================================================================== fixtures

@dataclass
class Fixtures:
    root: Path
    plain: Path  # a foreign timm ViT (grayscale 28 px, 10 classes: Fashion-MNIST's shape), depth 3
    rgb: Path  # conftest's cls-token variant at width 32 (RGB 32 px, 5 classes), depth 2
    lgmade: Path  # `lg shrink plain --depth 2` output: carries lg metadata
    gene: Path | None  # a TLEG learngene condensed by `lg condense` (None if that failed)
    notes: list[str] = field(default_factory=list)

    def bytes(self, name: str) -> bytes:
        return getattr(self, name).read_bytes()

    def bases(self) -> dict[str, bytes]:
        out = {"plain": self.bytes("plain"), "rgb": self.bytes("rgb"), "lgmade": self.bytes("lgmade")}
        if self.gene is not None:
            out["gene"] = self.gene.read_bytes()
        return out


def _timm_vit(seed: int, **overrides) -> torch.nn.Module:
    from conftest import make_vit  # tests/conftest.py

    return make_vit("cls-token", seed=seed, **overrides)


def build_fixtures(root: Path) -> Fixtures:
    """Valid source files: two foreign ViTs, one file lg wrote, one learngene."""
    from conftest import write_plain

    root = Path(root)
    fx = root / "fx"
    fx.mkdir(parents=True, exist_ok=True)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # no OpenMP pool in the parent before forking
    try:
        # Foreign (no lg metadata), with q/k norm: its heads are read from the
        # weights, so eval and condense (which refuse assumed heads) take it.
        plain = write_plain(_timm_vit(1, depth=3, embed_dim=32, num_heads=2, patch_size=7, img_size=28,
                                      in_chans=1, num_classes=10, qk_norm=True), fx / "plain.safetensors")
        rgb = write_plain(_timm_vit(2, embed_dim=32), fx / "rgb.safetensors")
    finally:
        torch.set_num_threads(previous)
    fixtures = Fixtures(root=root, plain=plain, rgb=rgb, lgmade=fx / "lgmade.safetensors", gene=None)
    # lg's own output and a learngene, made by lg in forked children (lg's
    # background threads must never start in this process).
    work = root / "fixture-runs"
    made = _fixture_run(work, "lgmade", ["shrink", str(plain), "--depth", "2", "--force", "-o", str(fixtures.lgmade)], 60)
    if made.code != 0 or not fixtures.lgmade.exists():
        raise RuntimeError(f"fixture: `lg shrink` of a valid ViT failed: exit {made.code}, {made.stderr.strip()[:500]}")
    gene = fx / "gene.lg.safetensors"
    made = _fixture_run(work, "gene", ["condense", str(plain), "--method", "tleg", "--data", "fashion-mnist-mini",
                                       "--steps", "2", "--batch-size", "8", "--subset", "32", "--test-subset", "16",
                                       "--aux-depth", "2", "--force", "-o", str(gene)], 90)
    if made.code == 0 and gene.exists():
        fixtures.gene = gene
    else:
        fixtures.notes.append(f"no learngene fixture (lg condense: exit {made.code}, "
                              f"{made.stderr.strip().splitlines()[-1:] if made.stderr.strip() else ''}); "
                              f"learngene cases left out")
    warm_up(fixtures, root / "warm-up")
    return fixtures


class _SyncExecutor:
    """Stands in for lg's thread pools during the warm-up: runs each task at once."""

    def __init__(self, real):
        self._max_workers = real._max_workers
        self._thread_name_prefix = real._thread_name_prefix

    def submit(self, fn, *args, **kwargs):
        from concurrent.futures import Future

        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, as a pool would
            future.set_exception(exc)
        return future

    def shutdown(self, *args, **kwargs):
        pass


def warm_up(fixtures: Fixtures, folder: Path) -> None:
    """Run a few ordinary lg commands in this process, so that every forked
    child inherits lg's lazy imports and first-call caches (a child's first
    `inspect` costs ~0.15 s cold, ~0.03 s warm). lg's thread pools are swapped
    for a synchronous stand-in meanwhile (no thread may run in a process that
    forks), torch keeps one thread, and any failure here is ignored: the
    children then just do the work themselves."""
    import contextlib
    from concurrent.futures import ThreadPoolExecutor

    _preimport()
    folder.mkdir(parents=True, exist_ok=True)
    swapped = []
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "lgcli" or name.startswith("lgcli.")):
            for attr, value in list(vars(module).items()):
                if isinstance(value, ThreadPoolExecutor):
                    swapped.append((module, attr, value))
                    setattr(module, attr, _SyncExecutor(value))
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    # lg seeds the global generators: give later tests in this process theirs back.
    import numpy as np

    rng_states = (torch.random.get_rng_state(), np.random.get_state(), random.getstate())
    out = folder / "o.safetensors"
    commands = [["inspect", fixtures.plain], ["inspect", fixtures.lgmade], ["inspect", folder / "missing"],
                ["shrink", fixtures.plain, "--depth", "1", "-o", out], ["grow", fixtures.plain, "--depth", "4", "-o", out],
                ["grow", fixtures.plain, "--depth", "abc"],
                ["eval", fixtures.plain, "--steps", "1", "--batch-size", "4", "--subset", "16", "--test-subset", "16"]]
    if fixtures.gene is not None:
        commands += [["inspect", fixtures.gene], ["grow", fixtures.gene, "--depth", "3", "-o", out]]
    try:
        from lgcli.cli import main

        for argv in commands:
            if out.exists():
                out.unlink()
            sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()), \
                    warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    main([str(a) for a in argv])
                except BaseException:  # noqa: BLE001 - SystemExit, or anything: see the docstring
                    pass
    except Exception:  # noqa: BLE001
        pass
    finally:
        torch.set_num_threads(previous)
        torch.random.set_rng_state(rng_states[0])
        np.random.set_state(rng_states[1])
        random.setstate(rng_states[2])
        for module, attr, value in swapped:
            setattr(module, attr, value)


def _fixture_run(work: Path, name: str, argv: list[str], timeout: float) -> Outcome:
    folder = work / name
    (folder / "in").mkdir(parents=True, exist_ok=True)
    (folder / "out").mkdir(exist_ok=True)
    case = Case("fixture", name, argv, "ok", folder, timeout=timeout)
    return run_cases([case], jobs=1, check=False, logs=work / "logs")[0]


# ====================================================================== case building helpers

class Builder:
    """Makes case folders and cases for one family."""

    def __init__(self, root: Path, family: str, fixtures: Fixtures, rng: random.Random):
        self.root, self.family, self.fx, self.rng = Path(root), family, fixtures, rng
        self.base = self.root / "cases" / family
        if self.base.exists():
            shutil.rmtree(self.base, onerror=_force_remove)
        self.base.mkdir(parents=True)
        self.cases: list[Case] = []

    def folder(self, name: str) -> Path:
        slug = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)[:60]
        folder = self.base / f"{len(self.cases):03d}-{slug}"
        (folder / "in").mkdir(parents=True)
        (folder / "out").mkdir()
        return folder

    def add(self, name: str, argv: list[str], expect: str, folder: Path | None = None, **kw) -> Case:
        folder = folder or self.folder(name)
        case = Case(self.family, f"{len(self.cases):03d}-{name}", [str(a) for a in argv], expect, folder, **kw)
        self.cases.append(case)
        return case

    # The three ways family 1 and 2 run a file.
    def run_file(self, name: str, data: bytes, expect: str, command: str, *, suffix: str = ".safetensors",
                 filename: str | None = None, codes: tuple[int, ...] = (1,)) -> Case:
        folder = self.folder(f"{name}-{command}")
        src = folder / "in" / (filename or f"model{suffix}")
        src.write_bytes(data)
        return self.command(name, folder, src, command, expect, codes=codes)

    def command(self, name: str, folder: Path, src: Path | str, command: str, expect: str,
                codes: tuple[int, ...] = (1,), **kw) -> Case:
        out = folder / "out" / "o.safetensors"
        if command == "inspect":
            return self.add(f"{name}-inspect", ["inspect", src], expect, folder, check="stdout", codes=codes, **kw)
        if command == "inspect-stdin":
            return self.add(f"{name}-stdin", ["inspect", "-"], expect, folder, check="stdout",
                            stdin=("file", Path(src)), codes=codes, **kw)
        if command == "shrink":
            return self.add(f"{name}-shrink", ["shrink", src, "--depth", "1", "-o", out], expect, folder,
                            output=str(out), check="file", codes=codes, **kw)
        if command == "grow":
            return self.add(f"{name}-grow", ["grow", src, "--depth", "4", "-o", out], expect, folder,
                            output=str(out), check="file", codes=codes, **kw)
        raise ValueError(command)


def _force_remove(func, path, exc_info):  # rmtree onerror: unreadable test files
    try:
        os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


# ====================================================================== family 1: byte mutations

STRUCT_CHARS = b'"{}[],:0123456789-.eE \\\x00\xff'
MUTATIONS = ("flip-header", "poke-header", "flip-data", "poke-prefix", "truncate-prefix", "truncate-header",
             "truncate-data", "append", "splice", "len+1", "len-1", "len+8", "len-8", "dup-range", "zero",
             "empty", "number", "rename", "dtype", "pad-header")


def mutate(rng: random.Random, op: str, data: bytes, other: bytes) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    head = (8, 8 + n)
    b = bytearray(data)
    if op == "flip-header":
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(*head)] ^= 1 << rng.randrange(8)
    elif op == "poke-header":
        b[rng.randrange(*head)] = rng.choice(STRUCT_CHARS)
    elif op == "flip-data":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(head[1], len(b))] ^= 1 << rng.randrange(8)
    elif op == "poke-prefix":
        b[rng.randrange(8)] = rng.randrange(256)
    elif op == "truncate-prefix":
        b = b[:rng.randrange(1, 8)]
    elif op == "truncate-header":
        b = b[:rng.randrange(*head)]
    elif op == "truncate-data":
        b = b[:rng.randrange(head[1] + 1, len(b))]
    elif op == "append":
        b += rng.randbytes(rng.randint(1, 64))
    elif op == "splice":
        (m,) = struct.unpack("<Q", other[:8])
        b = bytearray(data[:head[1]] + other[8 + m:])
    elif op in ("len+1", "len-1", "len+8", "len-8"):
        b[:8] = struct.pack("<Q", (n + int(op[3:])) % 2**64)
    elif op == "dup-range":
        start = rng.randrange(len(b))
        stop = min(len(b), start + rng.randint(1, 512))
        at = rng.randrange(len(b))
        b[at:at] = b[start:stop]
    elif op == "zero":
        b = bytearray(len(b))
    elif op == "empty":
        b = bytearray()
    elif op in ("number", "rename", "dtype", "pad-header"):
        text = data[8:8 + n].decode()
        if op == "number":
            spots = list(re.finditer(r"\d+", text))
            spot = rng.choice(spots)
            value = int(spot.group())
            new = rng.choice([str(value + 1), str(value - 1), "-1", "0", str(2**64), str(2**63), "99999999999",
                              str(value * 2), f"{value}.0", f"{value}e0"])
            text = text[:spot.start()] + new + text[spot.end():]
        elif op == "rename":
            spots = list(re.finditer(r'"(blocks\.\d+\.[^"]+|[a-z_]+\.[a-z_.]+)"', text))
            spot = rng.choice(spots)
            key = spot.group(1)
            new = rng.choice([key.replace("blocks.0", "blocks.7"), key + "x", key.upper(), key.replace(".", "_", 1),
                              "blocks.1." + key.split(".", 2)[-1], key.replace("weight", "bias")])
            text = text[:spot.start()] + json.dumps(new) + text[spot.end():]
        elif op == "dtype":
            spots = list(re.finditer(r'"(F32|F16|BF16|I64)"', text))
            spot = rng.choice(spots)
            text = text[:spot.start()] + json.dumps(rng.choice(["F16", "BF16", "I32", "U8", "F64", "BOOL", "F8_E4M3",
                                                                "I64", "C64", "U32"])) + text[spot.end():]
        else:
            text = text + " " * rng.randint(1, 16)
        raw = text.encode()
        b = bytearray(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    else:
        raise ValueError(op)
    return bytes(b)


def gen_mutations(bld: Builder) -> None:
    rng, bases = bld.rng, bld.fx.bases()
    names = sorted(bases)
    commands = ("inspect", "inspect-stdin", "shrink")
    for i in range(26):
        op = MUTATIONS[i % len(MUTATIONS)]
        base = rng.choice(names)
        other = rng.choice([n for n in names if n != base])
        data = mutate(rng, op, bases[base], bases[other])
        if data == bases[base] and op != "pad-header":
            data = mutate(rng, "flip-header", data, bases[other])
        expect = "error" if st_rejects(data) else "either"
        for command in rng.sample(commands, 2):
            bld.run_file(f"{op}-{base}", data, expect, command)
    # Controls: the unmutated files must work.
    for base in names:
        bld.run_file(f"valid-{base}", bases[base], "ok", "inspect")
    bld.run_file("valid-plain", bases["plain"], "ok", "shrink")


# ====================================================================== family 2: lying headers

def _ordered(header: dict) -> list[tuple[str, dict]]:
    return sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])


def header_lies(rng: random.Random, fx: Fixtures) -> list[tuple[str, bytes, str]]:
    """(name, bytes, expect) for structurally lying safetensors files."""
    plain = fx.bytes("plain")
    header, payload = split_st(plain)
    keys = tensor_entries(header)
    lies: list[tuple[str, bytes, str]] = []

    def lie(name: str, data: bytes, expect: str = "error") -> None:
        lies.append((name, data, expect))

    def edit(key: str, **changes) -> dict:
        h = json.loads(json.dumps(header))
        h[key].update(changes)
        return h

    multi = [k for k in keys if len(header[k]["shape"]) >= 2]
    big = rng.choice(multi)
    shape, (b0, b1) = header[big]["shape"], header[big]["data_offsets"]
    first = _ordered(header)[0][0]
    cls = "cls_token"
    lie("shape-strings", build_st(edit(big, shape=[str(n) for n in shape]), payload))
    lie("shape-floats", build_st(edit(big, shape=[float(n) for n in shape]), payload))
    lie("shape-bools", build_st(edit(cls, shape=[True, True, header[cls]["shape"][2]]), payload))
    lie("shape-negative-pair", build_st(edit(big, shape=[-shape[0], -shape[1], *shape[2:]]), payload))
    lie("shape-2**64", build_st(edit(big, shape=[2**64 + shape[0], *shape[1:]]), payload))
    lie("shape-wraps-u64", build_st(edit(big, shape=[2**32, 2**32], data_offsets=[b0, b0]), payload))
    lie("offsets-strings", build_st(edit(big, data_offsets=[str(b0), str(b1)]), payload))
    lie("offsets-floats", build_st(edit(big, data_offsets=[float(b0), float(b1)]), payload))
    lie("offsets-bool-zero", build_st(edit(first, data_offsets=[False, header[first]["data_offsets"][1]]), payload))
    lie("offsets-negative", build_st(edit(big, data_offsets=[b0 - 2**64, b1]), payload))
    lie("offsets-2**64", build_st(edit(big, data_offsets=[2**64 + b0, 2**64 + b1]), payload))
    lie("offsets-reversed", build_st(edit(big, data_offsets=[b1, b0]), payload))
    # Overlap: one tensor's range moved back by 4 bytes into its neighbour's.
    ordered = _ordered(header)
    k2, v2 = ordered[len(ordered) // 2]
    o0, o1 = v2["data_offsets"]
    lie("offsets-overlap", build_st(edit(k2, data_offsets=[o0 - 4, o1 - 4]), payload))
    # A gap: 64 junk bytes inserted after one tensor, later offsets shifted.
    gap = json.loads(json.dumps(header))
    for k, v in gap.items():
        if k != "__metadata__" and v["data_offsets"][0] >= o1:
            v["data_offsets"] = [v["data_offsets"][0] + 64, v["data_offsets"][1] + 64]
    lie("offsets-gap", build_st(gap, payload[:o1] + rng.randbytes(64) + payload[o1:]))
    lie("trailing-bytes", build_st(header, payload + rng.randbytes(rng.choice([1, 8, 64]))))
    lie("not-covering-end", build_st(header, payload[:-4]))
    # 2,000+ entries aliasing the same bytes: as extra blocks, and as junk names.
    aliased = json.loads(json.dumps(header))
    block0 = {k: v for k, v in header.items() if k.startswith("blocks.0.")}
    for index in range(3, 2048):
        for k, v in block0.items():
            aliased[k.replace("blocks.0.", f"blocks.{index}.", 1)] = v
    lie("alias-2048-blocks", build_st(aliased, payload))
    junk = json.loads(json.dumps(header))
    for index in range(2500):
        junk[f"alias.{index}"] = header[big]
    lie("alias-2500-extra", build_st(junk, payload))
    for dtype in ("F128", "f32"):
        lie(f"dtype-{dtype or 'empty'}", build_st(edit(big, dtype=dtype), payload))
    lie("dtype-number", build_st(edit(big, dtype=4), payload))
    text = json.dumps(header, separators=(",", ":"))
    lie("utf16-header", build_st(text.encode("utf-16-le"), payload))
    lie("utf8-bom-header", build_st(b"\xef\xbb\xbf" + text.encode(), payload))
    body = text[1:]
    lg_meta = split_st(fx.bytes("lgmade"))[0]["__metadata__"]
    lg_header, lg_payload = split_st(fx.bytes("lgmade"))
    lg_text = json.dumps({k: v for k, v in lg_header.items() if k != "__metadata__"}, separators=(",", ":"))[1:]
    forged = json.dumps({**lg_meta, "lg.kind": "learngene"})
    lie("dup-metadata", build_st('{"__metadata__":' + forged + ',"__metadata__":' + json.dumps(lg_meta) + "," + lg_text,
                                 lg_payload))
    entry = json.dumps({big: header[big]}, separators=(",", ":"))[1:-1]
    lie("dup-tensor-identical", build_st("{" + entry + "," + body, payload))
    extra = rng.randbytes(b1 - b0)
    twin = json.dumps({big: {**header[big], "data_offsets": [len(payload), len(payload) + b1 - b0]}},
                      separators=(",", ":"))[1:-1]
    lie("dup-tensor-different", build_st("{" + twin + "," + body, payload + extra))
    lie("metadata-list", build_st({"__metadata__": [], **{k: header[k] for k in keys}}, payload))
    lie("metadata-int-value", build_st({"__metadata__": {"format": 1}, **{k: header[k] for k in keys}}, payload))
    lie("metadata-object-config", build_st(
        {"__metadata__": {"format": "pt", "lg.config": {"depth": 3}}, **{k: header[k] for k in keys}}, payload))
    lie("metadata-null", build_st({"__metadata__": None, **{k: header[k] for k in keys}}, payload), "either")
    lie("extra-entry-field", build_st(edit(big, foo=[1, 2]), payload), "either")
    deep = "[" * 100_000 + "]" * 100_000
    lie("deep-json-entry", build_st('{"x":' + deep + "," + body, payload))
    lie("deep-json-metadata", build_st('{"__metadata__":{"a":' + deep + "}," + body, payload))
    for claimed in (100_000_001, 2**64 - 1):
        lie(f"header-claims-{claimed}", build_st(header, payload, length=claimed))
    for top in ("[]", "null", "{}", '{"__metadata__":{"format":"pt"}}'):
        lie(f"header-is-{top[:12]}", build_st(top, b"" if top.startswith("{") else payload))
    lie("entry-no-dtype", build_st(edit(big, dtype=None), payload))

    # lg metadata that lies (valid safetensors, from the file lg wrote).
    lg_tensors = safetensors.torch.load(fx.bytes("lgmade"))
    config = json.loads(lg_meta["lg.config"])

    def meta_lie(name: str, expect: str = "error", tensors: dict | None = None, **changes: Any) -> None:
        meta = dict(lg_meta)
        for key, value in changes.items():
            key = "lg." + key
            if value is None:
                meta.pop(key, None)
            else:
                meta[key] = value
        lie(name, st_save(tensors or lg_tensors, meta), expect)

    def config_lie(name: str, **changes: Any) -> None:
        meta_lie(name, config=json.dumps({**config, **changes}))

    meta_lie("config-list", config="[1, 2]")
    meta_lie("config-string", config='"vit"')
    meta_lie("config-not-json", config="{depth: 2")
    meta_lie("config-deep", config="[" * 100_000 + "]" * 100_000)
    config_lie("config-heads-1.5", num_heads=1.5)
    config_lie("config-heads-3", num_heads=3)
    config_lie("config-heads-string", num_heads="2")
    config_lie("config-pool-bogus", global_pool="bogus")
    config_lie("config-img-0", img_size=0)
    meta_lie("config-img-inf", config=json.dumps({**config, "img_size": "INF"}).replace('"INF"', "1e400"))
    config_lie("config-patch-0", patch_size=0)
    config_lie("config-chans-0", in_chans=0)
    config_lie("config-classes-neg", num_classes=-1)
    config_lie("config-depth-disagrees", depth=99)
    config_lie("config-width-disagrees", embed_dim=64)
    config_lie("config-reg-tokens-huge", reg_tokens=1_000_000_000)
    meta_lie("kind-learngene-on-model", kind="learngene")
    meta_lie("kind-bogus", kind="bogus")
    meta_lie("family-resnet", family="resnet")
    nested = '{"file":"x","kind":"model","source":' * 10_000 + '{"file":"x"}' + "}" * 10_000
    # Provenance 10,000 deep is odd but not a lie about the tensors: lg may list
    # it or refuse it, but must not crash.
    meta_lie("source-nested-10000", "either", source=nested)
    meta_lie("source-not-json", source="{")
    meta_lie("options-not-json", options="[")
    if fx.gene is not None:
        gene_header, _ = split_st(fx.gene.read_bytes())
        gene_meta = gene_header["__metadata__"]
        gene_tensors = safetensors.torch.load(fx.gene.read_bytes())
        lie("gene-kind-model", st_save(gene_tensors, {**gene_meta, "lg.kind": "model"}))
        lie("gene-info-not-object", st_save(gene_tensors, {**gene_meta, "lg.learngene": "[3]"}))
        lie("gene-method-wave", st_save(gene_tensors, {**gene_meta, "lg.method": "wave"}))  # TLEG tensors
        lie("gene-method-bogus", st_save(gene_tensors, {**gene_meta, "lg.method": "bogus"}))
        gene_config = json.loads(gene_meta["lg.config"])
        lie("gene-config-width", st_save(gene_tensors, {**gene_meta, "lg.config": json.dumps(
            {**gene_config, "embed_dim": 2 * gene_config["embed_dim"]})}))

    # Key names that lie (valid safetensors, foreign file).
    tensors = safetensors.torch.load(plain)
    renamed = lambda f: {f(k): v for k, v in tensors.items()}  # noqa: E731
    lie("blocks-00-duplicate", st_save({**tensors, **{k.replace("blocks.0.", "blocks.00.", 1): v.clone()
                                                      for k, v in tensors.items() if k.startswith("blocks.0.")}}))
    lie("blocks-00-only", st_save(renamed(lambda k: k.replace("blocks.0.", "blocks.00.", 1))))
    lie("blocks-arabic-indic-1", st_save(renamed(lambda k: k.replace("blocks.1.", "blocks.\u0661.", 1))))
    lie("blocks-fullwidth-2", st_save(renamed(lambda k: k.replace("blocks.2.", "blocks.\uff12.", 1))))
    lie("blocks-index-huge", st_save(renamed(lambda k: k.replace("blocks.2.", "blocks.99999999999.", 1))))
    lie("qkv-1d", st_save({**tensors, "blocks.1.attn.qkv.weight": tensors["blocks.1.attn.qkv.weight"].reshape(-1)}))
    lie("qkv-empty", st_save({k: (v[:0] if k.endswith("qkv.weight") else v) for k, v in tensors.items()}))
    lie("name-newline", st_save(renamed(lambda k: k + "\n" if k == "norm.weight" else k)))
    lie("name-forged-line", st_save({**tensors, "evil\nlg: error: forged": torch.zeros(2)}))
    lie("name-nul", st_save(renamed(lambda k: k.replace("head.weight", "head.weight\x00x"))))
    lie("name-empty", st_save({**tensors, "": torch.zeros(2)}))
    lie("pos-embed-tokens", st_save({**tensors, "pos_embed": tensors["pos_embed"][:, :-3]}))
    lie("patch-not-square", st_save({**tensors, "patch_embed.proj.weight": tensors["patch_embed.proj.weight"][..., :-1]}))
    lie("mixed-dtypes", st_save({k: (v.half() if k.startswith("blocks.1.") else v) for k, v in tensors.items()}), "either")
    lie("nan-weights", st_save({k: torch.full_like(v, float("nan")) for k, v in tensors.items()}), "either")
    lie("int-weights", st_save({k: v.to(torch.int32) for k, v in tensors.items()}))
    lie("zero-size-everything", st_save({k: v.reshape(-1)[:0] for k, v in tensors.items()}))
    lie("no-tensors-with-lg-meta", st_save({}, lg_meta))
    # Kept valid on purpose: padding, whitespace and key order are the format's freedom.
    spaced = json.dumps(header, indent=1).encode()
    lie("valid-indented-header", build_st(spaced, payload), "ok")
    shuffled = dict(rng.sample(list(header.items()), len(header)))
    lie("valid-shuffled-keys", build_st(shuffled, payload), "ok")
    return lies


def gen_headers(bld: Builder) -> None:
    rng = bld.rng
    for name, data, expect in header_lies(rng, bld.fx):
        # "error" stands even where the library accepts the bytes: a lie is a lie.
        bld.run_file(name, data, expect, "inspect")
        roll = rng.random()
        if roll < 0.1:
            bld.run_file(name, data, expect, "shrink")
        elif roll < 0.15:
            bld.run_file(name, data, expect, "inspect-stdin")


# ====================================================================== family 3: pickles

class Payload:
    """Unpickling this makes a folder (the marker): it must never happen."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


class ExecPayload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def gen_pickles(bld: Builder) -> None:
    rng = bld.rng
    tensors = safetensors.torch.load(bld.fx.bytes("plain"))
    markers = bld.root / "markers"
    markers.mkdir(exist_ok=True)

    def saved(obj: Any, **kw) -> bytes:
        buffer = io.BytesIO()
        torch.save(obj, buffer, **kw)
        return buffer.getvalue()

    files: list[tuple[str, str, Any, str]] = []  # (name, suffix, bytes or callable(marker) -> bytes, expect)

    def add(name: str, suffix: str, content: Any, expect: str) -> None:
        files.append((name, suffix, content, expect))

    add("payload-mkdir", ".pth", lambda m: saved({"model": {**tensors, "x": Payload(m)}}), "error")
    add("payload-exec", ".bin", lambda m: saved({"state_dict": ExecPayload(m)}), "error")
    add("payload-legacy-format", ".pt", lambda m: saved({"model": Payload(m)}, _use_new_zipfile_serialization=False),
        "error")
    add("payload-raw-pickle", ".ckpt", lambda m: __import__("pickle").dumps({"model": Payload(m)}, protocol=2), "error")
    add("payload-protocol0", ".pth", lambda m: __import__("pickle").dumps(Payload(m), protocol=0), "error")
    selfref: dict = {}
    selfref["model"] = selfref
    selfref["state_dict"] = selfref
    add("self-referencing-dict", ".pth", saved(selfref), "error")
    loop_a: dict = {"blocks.0.x": torch.zeros(1)}
    loop_b: dict = {"model": loop_a}
    loop_a["model"] = loop_b
    add("two-dict-cycle", ".pth", saved(loop_b), "error")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        deep: Any = dict(tensors)
        for _ in range(1000):
            deep = {"model": deep}
        add("nested-1000-valid-bottom", ".pth", saved(deep), "either")
        deep_list: Any = []
        for _ in range(1000):
            deep_list = [deep_list]
        add("nested-1000-lists", ".pth", saved({"model": deep_list}), "error")
    finally:
        sys.setrecursionlimit(limit)
    qkv = tensors["blocks.0.attn.qkv.weight"]
    add("sparse-coo", ".pth", saved({**tensors, "blocks.0.attn.qkv.weight": qkv.to_sparse()}), "error")
    add("sparse-csr", ".pth", saved({**tensors, "blocks.0.attn.qkv.weight": qkv.to_sparse_csr()}), "error")
    huge = torch.sparse_coo_tensor(torch.zeros(2, 1, dtype=torch.long), torch.ones(1), (10**6, 10**6))
    add("sparse-coo-huge", ".pth", saved({**tensors, "pos_embed": huge}), "error")
    add("complex", ".pth", saved({**tensors, "blocks.0.attn.qkv.weight": qkv.to(torch.complex64)}), "error")
    # 10**8 position embeddings held by one 32-float storage: a consistent (if odd) ViT of
    # 70,000 px images. inspect may describe it; nothing may materialise its 12.8 GB.
    add("expanded-stride-0-huge", ".pth",
        saved({**tensors, "pos_embed": torch.zeros(32).expand(1, 10**8, 32)}), "either")
    add("non-tensor-values", ".pth", saved({**tensors, "epoch": 3, "args": {"lr": 0.1}}), "error")
    add("non-string-keys", ".pth", saved({**{i: v for i, v in enumerate(tensors.values())}, ("a",): qkv}), "error")
    add("list-of-tensors", ".pth", saved(list(tensors.values())), "error")
    add("just-a-tensor", ".pth", saved(qkv), "error")
    add("none", ".pth", saved(None), "error")
    add("wrapped-model-epoch", ".pth", saved({"model": tensors, "epoch": 3, "optimizer": {"lr": 0.1}}), "ok")
    add("module-prefixes", ".pth", saved({"state_dict": {f"module.{k}": v for k, v in tensors.items()}}), "ok")
    add("orig-mod-module-prefixes", ".ckpt", saved({f"_orig_mod.module.{k}": v for k, v in tensors.items()}), "ok")
    add("model-ema-and-none", ".pt", saved({"model": None, "model_ema": tensors}), "either")
    add("legacy-format-valid", ".pt", saved(tensors, _use_new_zipfile_serialization=False), "ok")
    add("parameters", ".bin", saved({k: torch.nn.Parameter(v) for k, v in tensors.items()}), "ok")
    add("bf16", ".pth", saved({k: v.bfloat16() for k, v in tensors.items()}), "ok")
    add("safetensors-named-pth", ".pth", bld.fx.bytes("plain"), "ok")
    add("garbage", ".pth", rng.randbytes(4096), "error")
    add("empty", ".pth", b"", "error")
    add("zip-not-torch", ".pth", _zip_bytes({"hello.txt": b"hi"}), "error")
    valid = saved(tensors)
    add("truncated-zip", ".pth", valid[:len(valid) // 2], "error")
    flipped = bytearray(valid)
    for _ in range(32):
        flipped[rng.randrange(len(flipped) // 4, len(flipped))] ^= 0xFF
    add("corrupted-zip", ".pth", bytes(flipped), "either")
    add("numpy-array", ".pth", saved({**tensors, "extra": __import__("numpy").zeros(3)}), "error")
    for number, (name, suffix, content, expect) in enumerate(files):
        for command in ("inspect", "shrink") if (callable(content) or number % 2 == 0) else (rng.choice(["inspect", "shrink"]),):
            folder = bld.folder(f"{name}-{command}")
            marker = markers / f"{bld.family}-{len(bld.cases):03d}"
            data = content(str(marker)) if callable(content) else content
            src = folder / "in" / f"model{suffix}"
            src.write_bytes(data)
            bld.command(name, folder, src, command, expect, marker=marker if callable(content) else None)


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# ====================================================================== family 4: odd paths and stdin

def _sharded(folder: Path, tensors: dict[str, torch.Tensor], *, shard_names=("model-00001-of-00002.safetensors",
                                                                           "model-00002-of-00002.safetensors")) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    keys = sorted(tensors)
    half = len(keys) // 2
    weight_map = {}
    for name, part in zip(shard_names, (keys[:half], keys[half:])):
        (folder / name).write_bytes(st_save({k: tensors[k] for k in part}, {"format": "pt"}))
        weight_map.update({k: name for k in part})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
             "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return index


def gen_paths(bld: Builder) -> None:
    rng = bld.rng
    plain = bld.fx.bytes("plain")
    tensors = safetensors.torch.load(plain)
    garbage = rng.randbytes(300)

    def simple(name: str, argv_of: Callable[[Path], list], expect: str, **kw) -> Case:
        folder = bld.folder(name)
        return bld.add(name, argv_of(folder), expect, folder, **kw)

    # FIFOs
    folder = bld.folder("fifo-with-writer")
    os.mkfifo(folder / "in" / "pipe.safetensors")
    bld.add("fifo-with-writer-inspect", ["inspect", folder / "in" / "pipe.safetensors"], "ok", folder, check="stdout",
            fifo_writers=[(folder / "in" / "pipe.safetensors", plain)])
    folder = bld.folder("fifo-with-writer-shrink")
    os.mkfifo(folder / "in" / "pipe.safetensors")
    bld.add("fifo-with-writer-shrink", ["shrink", folder / "in" / "pipe.safetensors", "--depth", "1", "-o",
                                        folder / "out" / "o.safetensors"], "ok", folder,
            output=str(folder / "out" / "o.safetensors"), check="file",
            fifo_writers=[(folder / "in" / "pipe.safetensors", plain)])
    folder = bld.folder("fifo-with-writer-garbage")
    os.mkfifo(folder / "in" / "pipe.safetensors")
    bld.add("fifo-with-writer-garbage", ["inspect", folder / "in" / "pipe.safetensors"], "error", folder,
            fifo_writers=[(folder / "in" / "pipe.safetensors", garbage)])
    # A FIFO as the input blocks until a writer comes, as `cat` does (the
    # issue's contract): the writer here opens it and writes nothing, or a pickle.
    folder = bld.folder("fifo-writer-writes-nothing")
    os.mkfifo(folder / "in" / "lonely.safetensors")
    bld.add("fifo-writer-writes-nothing", ["inspect", folder / "in" / "lonely.safetensors"], "error", folder,
            fifo_writers=[(folder / "in" / "lonely.safetensors", b"")])
    folder = bld.folder("fifo-pickle-pth")
    os.mkfifo(folder / "in" / "lonely.pth")
    bld.add("fifo-pickle-pth", ["inspect", folder / "in" / "lonely.pth"], "error", folder,
            fifo_writers=[(folder / "in" / "lonely.pth", b"PK\x03\x04" + bytes(60))])
    # Process substitution: /dev/fd/N of an inherited pipe.
    simple("dev-fd-pipe-inspect", lambda f: ["inspect", "{PIPE}"], "ok", check="stdout", pipe_data=plain)
    simple("dev-fd-pipe-garbage", lambda f: ["inspect", "{PIPE}"], "error", pipe_data=garbage)
    simple("dev-fd-pipe-shrink", lambda f: ["shrink", "{PIPE}", "--depth", "1", "-o", f / "out" / "o.safetensors"],
           "ok", check="file", pipe_data=plain)
    bld.cases[-1].output = str(bld.cases[-1].dir / "out" / "o.safetensors")
    # Sharded folders.
    folder = bld.folder("sharded-valid-inspect")
    _sharded(folder / "in" / "sharded", tensors)
    bld.add("sharded-valid-inspect", ["inspect", folder / "in" / "sharded"], "ok", folder, check="stdout")
    folder = bld.folder("sharded-valid-shrink")
    _sharded(folder / "in" / "sharded", tensors)
    out = folder / "out" / "o.safetensors"
    bld.add("sharded-valid-shrink", ["shrink", folder / "in" / "sharded", "--depth", "1", "-o", out], "ok", folder,
            output=str(out), check="file")

    def broken_shards(name: str, breaker: Callable[[Path, dict], None], expect: str = "error") -> None:
        folder = bld.folder(name)
        shard_dir = folder / "in" / "sharded"
        index = _sharded(shard_dir, tensors)
        breaker(shard_dir, index)
        bld.add(name, ["inspect", shard_dir], expect, folder, check="stdout")

    def rewrite_index(shard_dir: Path, index: dict) -> None:
        (shard_dir / "model.safetensors.index.json").write_text(json.dumps(index))

    def remap(target: str) -> Callable[[Path, dict], None]:
        def breaker(shard_dir: Path, index: dict) -> None:
            key = sorted(index["weight_map"])[0]
            index["weight_map"][key] = target
            rewrite_index(shard_dir, index)
        return breaker

    broken_shards("sharded-missing-shard", remap("model-00009-of-00009.safetensors"))
    broken_shards("sharded-shard-deleted", lambda d, i: (d / "model-00002-of-00002.safetensors").unlink())

    def shard_folder(d: Path, i: dict) -> None:
        (d / "sub.safetensors").mkdir()
        remap("sub.safetensors")(d, i)
    broken_shards("sharded-shard-is-folder", shard_folder)

    def shard_fifo(d: Path, i: dict) -> None:
        os.mkfifo(d / "fifo.safetensors")
        remap("fifo.safetensors")(d, i)
    broken_shards("sharded-shard-is-fifo", shard_fifo)

    def shard_outside(d: Path, i: dict) -> None:
        (d.parent / "outside.safetensors").write_bytes(plain)
        for k in i["weight_map"]:
            i["weight_map"][k] = "../outside.safetensors"
        rewrite_index(d, i)
    broken_shards("sharded-shard-outside", shard_outside)
    broken_shards("sharded-shard-absolute", remap("/etc/passwd"))
    broken_shards("sharded-shard-dev-zero", remap("/dev/zero"))

    def shard_symlink(d: Path, i: dict) -> None:
        # Hugging Face's cache links shards to blobs elsewhere: following it is fine, refusing too.
        shard = d / "model-00001-of-00002.safetensors"
        blob = d.parent / "blob-1"
        shard.rename(blob)
        shard.symlink_to(blob)
    broken_shards("sharded-shard-symlink-outside", shard_symlink, "either")
    broken_shards("sharded-index-not-json", lambda d, i: (d / "model.safetensors.index.json").write_text("{weight"))
    broken_shards("sharded-index-deep", lambda d, i: (d / "model.safetensors.index.json").write_text(
        '{"weight_map":' + "[" * 100_000 + "]" * 100_000 + "}"))
    broken_shards("sharded-index-list", lambda d, i: (d / "model.safetensors.index.json").write_text("[1,2]"))
    broken_shards("sharded-weight-map-ints", lambda d, i: rewrite_index(d, {**i, "weight_map": {
        k: 1 for k in i["weight_map"]}}))
    broken_shards("sharded-weight-map-empty", lambda d, i: rewrite_index(d, {**i, "weight_map": {}}))
    broken_shards("sharded-metadata-list", lambda d, i: rewrite_index(d, {**i, "metadata": [1]}))
    broken_shards("sharded-index-empty", lambda d, i: (d / "model.safetensors.index.json").write_bytes(b""))
    broken_shards("sharded-index-is-folder", lambda d, i: ((d / "model.safetensors.index.json").unlink(),
                                                           (d / "model.safetensors.index.json").mkdir()))

    def index_fifo(d: Path, i: dict) -> None:
        (d / "model.safetensors.index.json").unlink()
        os.mkfifo(d / "model.safetensors.index.json")
    broken_shards("sharded-index-is-fifo", index_fifo)
    # Folders and non-files.
    simple("folder-without-index", lambda f: ["inspect", f / "in"], "error")
    folder = bld.folder("folder-named-safetensors")
    (folder / "in" / "dir.safetensors").mkdir()
    bld.add("folder-named-safetensors", ["inspect", folder / "in" / "dir.safetensors"], "error", folder)
    simple("nonexistent", lambda f: ["inspect", f / "in" / "nope.safetensors"], "error")
    simple("dev-null", lambda f: ["inspect", "/dev/null"], "error")
    simple("dev-zero-as-file", lambda f: ["inspect", "/dev/zero"], "error")
    simple("dev-zero-as-pth", lambda f: ["shrink", "/proc/self/fd/0", "--depth", "1", "-o",
                                         f / "out" / "o.safetensors"], "error", stdin="zero")
    folder = bld.folder("symlink-loop")
    (folder / "in" / "loop.safetensors").symlink_to("loop.safetensors")
    bld.add("symlink-loop", ["inspect", folder / "in" / "loop.safetensors"], "error", folder)
    folder = bld.folder("dangling-symlink")
    (folder / "in" / "d.safetensors").symlink_to("gone.safetensors")
    bld.add("dangling-symlink", ["inspect", folder / "in" / "d.safetensors"], "error", folder)
    # Names.
    simple("name-300-chars", lambda f: ["inspect", f / "in" / ("x" * 300 + ".safetensors")], "error")
    simple("output-name-300-chars", lambda f: ["shrink", bld.fx.plain, "--depth", "1", "-o",
                                               f / "out" / ("y" * 300 + ".safetensors")], "error")
    for label, name, content, expect in (("newline-garbage", "evil\nlg: error: forged.safetensors", garbage, "error"),
                                         ("newline-valid", "evil\nname.safetensors", plain, "either"),
                                         ("cr-garbage", "evil\rlg: error: forged.safetensors", garbage, "error"),
                                         ("nonutf8-valid", b"bad\xff\xfe.safetensors", plain, "either"),
                                         ("nonutf8-garbage", b"bad\xff\xfe.safetensors", garbage, "error"),
                                         ("dash-name", "-weird.safetensors", plain, "ok")):
        folder = bld.folder(f"name-{label}")
        fname = os.fsdecode(name) if isinstance(name, bytes) else name
        path = folder / "in" / fname
        path.write_bytes(content)
        arg = str(path)
        bld.add(f"name-{label}", ["inspect", arg], expect, folder, check="stdout")
    folder = bld.folder("dash-name-as-option")
    (folder / "in" / "-x.safetensors").write_bytes(plain)
    bld.add("dash-name-as-option", ["inspect", "-x.safetensors"], "error", folder, codes=(2,))
    bld.cases[-1].argv = ["inspect", "-x.safetensors"]
    # stdin.
    for label, stdin, expect in (("dev-zero", "zero", "error"), ("closed", "closed", "error"),
                                 ("empty", ("bytes", b""), "error"), ("garbage", ("bytes", garbage), "error"),
                                 ("valid-pipe", ("bytes", plain), "ok"), ("valid-file", ("file", bld.fx.plain), "ok"),
                                 ("truncated-pipe", ("bytes", plain[:len(plain) // 2]), "error")):
        simple(f"stdin-{label}-inspect", lambda f: ["inspect", "-"], expect, stdin=stdin, check="stdout")
    for label, stdin, expect in (("dev-zero", "zero", "error"), ("closed", "closed", "error"),
                                 ("valid-pipe", ("bytes", plain), "ok")):
        folder = bld.folder(f"stdin-{label}-shrink")
        out = folder / "out" / "o.safetensors"
        bld.add(f"stdin-{label}-shrink", ["shrink", "-", "--depth", "1", "-o", out], expect, folder,
                stdin=stdin, output=str(out), check="file")
    simple("stdout-checkpoint", lambda f: ["shrink", bld.fx.plain, "--depth", "1", "-o", "-"], "ok",
           output="-", check="stdout-st")
    simple("stdout-dev-full-checkpoint", lambda f: ["shrink", bld.fx.plain, "--depth", "1", "-o", "-"], "error",
           stdout="full")
    simple("stdout-dev-full-inspect", lambda f: ["inspect", bld.fx.plain], "error", stdout="full")
    # Outputs.
    simple("output-missing-folder", lambda f: ["shrink", bld.fx.plain, "--depth", "1", "-o",
                                               f / "out" / "no" / "such" / "o.safetensors"], "error")
    simple("output-is-folder", lambda f: ["shrink", bld.fx.plain, "--depth", "1", "-o", f / "out"], "error")
    simple("output-trailing-slash", lambda f: ["shrink", bld.fx.plain, "--depth", "1", "-o",
                                               str(f / "out" / "new") + "/"], "error")
    for force in (False, True):
        folder = bld.folder(f"output-exists-force-{force}")
        existing = folder / "out" / "o.safetensors"
        existing.write_bytes(b"precious")
        bld.add(f"output-exists{'-force' if force else ''}",
                ["shrink", bld.fx.plain, "--depth", "1", "-o", existing] + (["--force"] if force else []),
                "ok" if force else "error", folder, output=str(existing), check="file",
                may_change=(existing,) if force else ())
    for force in (False, True):
        folder = bld.folder(f"output-is-input-{force}")
        src = folder / "in" / "m.safetensors"
        src.write_bytes(plain)
        bld.add(f"output-is-input{'-force' if force else ''}",
                ["shrink", src, "--depth", "1", "-o", src] + (["--force"] if force else []), "error", folder)
    folder = bld.folder("output-hardlink-to-input")
    src = folder / "in" / "m.safetensors"
    src.write_bytes(plain)
    os.link(src, folder / "out" / "o.safetensors")
    bld.add("output-hardlink-to-input", ["shrink", src, "--depth", "1", "-o", folder / "out" / "o.safetensors",
                                         "--force"], "error", folder)
    folder = bld.folder("output-symlink-to-input")
    src = folder / "in" / "m.safetensors"
    src.write_bytes(plain)
    (folder / "out" / "o.safetensors").symlink_to(src)
    bld.add("output-symlink-to-input", ["shrink", src, "--depth", "1", "-o", folder / "out" / "o.safetensors",
                                        "--force"], "error", folder)
    # --force never deletes what lg did not write, and never touches an input
    # (issue 20, item 1): what coreutils' mv -T and git refuse, lg refuses.
    folder = bld.folder("force-over-app-folder")
    app = folder / "out" / "proj"
    app.mkdir()
    (app / "config.json").write_text('{"name": "my-app", "debug": false}')
    (app / "main.py").write_text("print('precious')\n")
    bld.add("force-over-app-folder", ["shrink", bld.fx.plain, "--depth", "1", "-o", app, "--force"], "error", folder)
    folder = bld.folder("force-over-model-folder-with-notes")
    kept = folder / "out" / "m"
    kept.mkdir()
    (kept / "config.json").write_text('{"model_type": "vit"}')
    (kept / "model.safetensors").write_bytes(plain)
    (kept / "notes.txt").write_text("three weeks of experiments\n")
    bld.add("force-over-model-folder-with-notes", ["shrink", bld.fx.plain, "--depth", "1", "-o", kept, "--force"],
            "error", folder)
    folder = bld.folder("force-over-sharded-output")  # control: a folder lg wrote is replaced
    replaced = folder / "out" / "o"
    _sharded(replaced, tensors)
    bld.add("force-over-sharded-output", ["shrink", bld.fx.plain, "--depth", "1", "-o", replaced, "--force"], "ok",
            folder, output=str(replaced), check="file",
            may_change=(replaced, *sorted(replaced.iterdir())))
    folder = bld.folder("force-output-is-input-shard")
    _sharded(folder / "in" / "vs", tensors)
    bld.add("force-output-is-input-shard", ["shrink", folder / "in" / "vs", "--depth", "1", "-o",
                                            folder / "in" / "vs" / "model-00001-of-00002.safetensors", "--force"],
            "error", folder)
    folder = bld.folder("output-inside-input-folder")
    _sharded(folder / "in" / "vs", tensors)
    bld.add("output-inside-input-folder", ["shrink", folder / "in" / "vs", "--depth", "1", "-o",
                                           folder / "in" / "vs" / "small.safetensors"], "error", folder)
    folder = bld.folder("force-output-folder-holds-input")
    holder = folder / "out" / "m"
    holder.mkdir()
    (holder / "config.json").write_text('{"model_type": "vit"}')
    (holder / "model.safetensors").write_bytes(plain)
    bld.add("force-output-folder-holds-input", ["shrink", holder / "model.safetensors", "--depth", "1", "-o", holder,
                                                "--force"], "error", folder)
    folder = bld.folder("force-output-is-stdin-file")
    src = folder / "in" / "v.safetensors"
    src.write_bytes(plain)
    bld.add("force-output-is-stdin-file", ["shrink", "-", "--depth", "1", "-o", src, "--force"], "error", folder,
            stdin=("file", src))
    folder = bld.folder("force-over-special-file")
    special = folder / "out" / "null"
    if IS_ROOT:  # a character device, as /dev/null is
        os.mknod(special, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        os.mkfifo(special)
    bld.add("force-over-special-file", ["shrink", bld.fx.plain, "--depth", "1", "-o", special, "--force"], "error",
            folder)


# ====================================================================== family 5: absurd requests

def gen_requests(bld: Builder) -> None:
    fx = bld.fx
    plain, lgmade, gene = fx.plain, fx.lgmade, fx.gene

    def resize(name: str, args: list, expect: str, codes: tuple[int, ...] = (1, 2), src: Path = plain,
               out: bool = True, **kw) -> None:
        folder = bld.folder(name)
        target = folder / "out" / "o.safetensors"
        argv = [args[0], src, *args[1:]] + (["-o", target] if out else [])
        bld.add(name, argv, expect, folder, codes=codes, output=str(target) if out else None,
                check="file" if out else "none", **kw)

    usage = (2,)
    resize("grow-depth-1e9", ["grow", "--depth", "1000000000"], "error")
    resize("grow-width-1e7", ["grow", "--width", "10000000"], "error")
    resize("grow-width-1e7-heads", ["grow", "--width", "10000000", "--heads", "2"], "error")
    resize("grow-mlp-1e9", ["grow", "--mlp-dim", "1000000000"], "error")
    resize("grow-depth-2**64", ["grow", "--depth", str(2**64)], "error")
    resize("grow-heads-0", ["grow", "--heads", "0"], "error")
    resize("shrink-depth-0", ["shrink", "--depth", "0"], "error")
    resize("shrink-depth-neg", ["shrink", "--depth", "-1"], "error")
    resize("grow-mlp-0", ["grow", "--depth", "4", "--mlp-dim", "0"], "error")
    resize("grow-seed-2**64", ["grow", "--depth", "4", "--method", "heur-lg", "--seed", str(2**64)], "either")
    resize("grow-seed-neg", ["grow", "--depth", "4", "--method", "heur-lg", "--seed", "-1"], "either")
    resize("grow-method-bogus", ["grow", "--depth", "4", "--method", "bogus"], "error")
    resize("grow-method-empty", ["grow", "--depth", "4", "--method", ""], "either")  # '' may mean the default
    resize("grow-unknown-flag", ["grow", "--depth", "4", "--frobnicate"], "error", usage)
    resize("grow-depth-abc", ["grow", "--depth", "abc"], "error", usage)
    resize("grow-depth-missing-value", ["grow", "--depth"], "error", usage, out=False)
    resize("grow-no-output", ["grow", "--depth", "4"], "error", usage, out=False)
    resize("grow-wavelet-bogus", ["grow", "--depth", "4", "--wavelet", "bogus"], "error")
    resize("grow-wavelet-db38", ["grow", "--depth", "4", "--wavelet", "db38"], "either")
    resize("grow-fit-bogus", ["grow", "--width", "96", "--fit", "bogus"], "error")
    resize("grow-insert-bogus", ["grow", "--depth", "4", "--method", "clone", "--insert", "bogus"], "error")
    resize("grow-width-33", ["grow", "--width", "33"], "error")
    resize("grow-width-heads-5", ["grow", "--width", "48", "--heads", "5"], "error")
    resize("shrink-larger", ["shrink", "--depth", "5"], "error")
    resize("grow-smaller", ["grow", "--depth", "2"], "error")
    resize("shrink-nothing", ["shrink"], "error")
    resize("shrink-source-heads-0", ["shrink", "--depth", "1", "--source-heads", "0"], "error")
    resize("shrink-source-heads-7", ["shrink", "--depth", "1", "--source-heads", "7"], "error")
    resize("grow-valid", ["grow", "--depth", "4"], "ok", (1,))
    resize("grow-valid-lgmade", ["grow", "--depth", "3", "--width", "64"], "either", src=lgmade)
    resize("shrink-select-width", ["shrink", "--width", "16", "--method", "select"], "either")
    if gene is not None:
        resize("gene-depth-1e9", ["grow", "--depth", "1000000000"], "error", src=gene)
        resize("gene-width-1e7", ["grow", "--width", "10000000"], "error", src=gene)
        resize("gene-with-method", ["grow", "--depth", "4", "--method", "bot"], "error", src=gene)
        resize("gene-valid", ["grow", "--depth", "4"], "ok", (1,), src=gene)

    data_mini = ["--subset", "16", "--test-subset", "16"]

    def evaluate(name: str, args: list, expect: str, codes: tuple[int, ...] = (1, 2), src: list | None = None,
                 **kw) -> Case:
        folder = bld.folder(name)
        return bld.add(name, ["eval", *([plain] if src is None else src), *args], expect, folder, codes=codes,
                       check="stdout", **{"timeout": 15, **kw})

    evaluate("eval-no-checkpoint", [], "error", usage, src=[])
    for label, value in (("1e999", "1e999"), ("nan", "nan"), ("0", "0"), ("div0", "1/0"), ("2**64", str(2**64))):
        evaluate(f"eval-subset-{label}", ["--subset", value, "--test-subset", "16"], "error")
    evaluate("eval-test-subset-nan", ["--subset", "16", "--test-subset", "nan"], "error")
    tiny_probe = ["--steps", "1", "--batch-size", "4", *data_mini]
    for value in ("nan", "-1"):
        evaluate(f"eval-lr-{value}", [*tiny_probe, "--lr", value], "error")
    evaluate("eval-lr-sweep-nan", [*tiny_probe, "--lr-sweep", "nan,1e-3"], "error")
    evaluate("eval-lr-sweep-and-lr", [*tiny_probe, "--lr-sweep", "1e-3", "--lr", "1e-3"], "error")
    evaluate("eval-label-smoothing-nan", [*tiny_probe, "--label-smoothing", "nan"], "error")
    evaluate("eval-batch-size-0", [*tiny_probe[:2], "--batch-size", "0", *data_mini], "error", usage)
    evaluate("eval-batch-size-huge", ["--steps", "1", "--batch-size", str(10**12), *data_mini], "either")
    evaluate("eval-steps-neg", ["--steps", "-1", *data_mini], "error", usage)
    evaluate("eval-warmup-huge", [*tiny_probe, "--warmup", "1000000000"], "either")
    evaluate("eval-eval-every-2**70", [*tiny_probe, "--eval-every", str(2**70)], "either")
    evaluate("eval-device-bogus", [*data_mini, "--device", "bogus"], "error")
    evaluate("eval-device-cuda-99", [*data_mini, "--device", "cuda:99"], "error")
    evaluate("eval-baseline-bogus", [*data_mini, "--baseline", "bogus"], "error")
    evaluate("eval-heads-0", [*data_mini, "--heads", "0"], "error", usage)
    evaluate("eval-heads-7", [*data_mini, "--heads", "7"], "error")
    evaluate("eval-data-bogus", ["--data", "no-such-dataset", *data_mini], "error")
    evaluate("eval-seed-2**64", [*data_mini, "--seed", str(2**64)], "either")
    evaluate("eval-stdin-twice", [*data_mini], "error", src=["-", "-"], stdin=("file", plain))
    evaluate("eval-plot-missing-folder", [*data_mini, "--plot", "/nonexistent/dir/p.png"], "error")
    case = evaluate("eval-valid-probe", tiny_probe, "ok", (1,))
    case.timeout = 20
    folder = bld.folder("eval-test-fraction-nan")
    _image_folder(folder / "in" / "images", rng=bld.rng)
    bld.add("eval-test-fraction-nan", ["eval", plain, "--data", folder / "in" / "images", "--test-fraction", "nan"],
            "error", folder, codes=(1, 2), check="stdout", timeout=15)

    fast = ["--data", "fashion-mnist-mini", "--batch-size", "8", "--subset", "32", "--test-subset", "16"]

    def condense(name: str, args: list, expect: str, codes: tuple[int, ...] = (1, 2), out: bool = True,
                 method: list | None = None, src: Path = plain) -> Case:
        folder = bld.folder(name)
        target = folder / "out" / "g.lg.safetensors"
        argv = ["condense", src, *(["--method", "tleg"] if method is None else method), *args]
        argv += ["-o", target] if out else []
        return bld.add(name, argv, expect, folder, codes=codes, output=str(target) if out else None,
                       check="file" if out else "none", timeout=20)

    condense("condense-method-bogus", ["--steps", "1", *fast], "error", method=["--method", "bogus"])
    condense("condense-method-missing", ["--steps", "1", *fast], "error", usage, method=[])
    condense("condense-aux-depth-1e9", ["--steps", "1", "--aux-depth", "1000000000", *fast], "error")
    condense("condense-aux-width-1e7", ["--steps", "1", "--aux-width", "10000000", *fast], "error")
    condense("condense-steps-0", ["--steps", "0", *fast], "error", usage)
    condense("condense-epochs-nan", ["--epochs", "nan", *fast], "error")
    condense("condense-lr-nan", ["--steps", "1", "--lr", "nan", *fast], "error")
    condense("condense-no-output", ["--steps", "1", *fast], "error", usage, out=False)
    condense("condense-no-data", ["--steps", "1"], "error", usage)
    condense("condense-checkpoint-every-stdout", ["--steps", "1", "--checkpoint-every", "1", *fast, "-o", "-"],
             "error", out=False)
    condense("condense-depths-huge", ["--steps", "1", "--depths", "1-1000000000", *fast], "error")
    condense("condense-template-dim-1e9", ["--steps", "1", "--template-dim", "1000000000", *fast], "error",
             method=["--method", "wave"])
    condense("condense-template-count-1e9", ["--steps", "1", "--templates", "fc1=8x8@1000000000", *fast], "error",
             method=["--method", "wave"])
    condense("condense-valid", ["--steps", "2", "--aux-depth", "2", *fast], "ok", (1,))
    if gene is not None:
        condense("condense-learngene-teacher", ["--steps", "1", *fast], "error", src=gene)


# ====================================================================== family 6: broken image folders

def _png(size: tuple[int, int] = (28, 28), mode: str = "L", seed: int = 0) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    image = Image.frombytes(mode, size, bytes(rng.randrange(256) for _ in range(size[0] * size[1] * channels)))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose IHDR claims width x height (CRC recomputed)."""
    data = bytearray(_png((8, 8)))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF)
    return bytes(data)


def _image_folder(root: Path, *, classes=("a", "b"), per_class: int = 6, split: bool = False,
                  val_classes=None, rng: random.Random | None = None) -> Path:
    rng = rng or random.Random(0)
    layout = [("train", classes, per_class), ("val", val_classes or classes, 2)] if split else [("", classes, per_class)]
    for sub, names, count in layout:
        for name in names:
            folder = root / sub / name if sub else root / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                (folder / f"img{index}.png").write_bytes(_png(seed=rng.randrange(10**9)))
    return root


def gen_images(bld: Builder) -> None:
    rng, ckpt = bld.rng, bld.fx.plain

    def case(name: str, setup: Callable[[Path], Any], expect: str, *, split: bool = False,
             extra: list | None = None, codes: tuple[int, ...] = (1,), **folder_kw) -> None:
        folder = bld.folder(name)
        root = folder / "in" / "images"
        _image_folder(root, split=split, rng=rng, **folder_kw)
        setup(root)
        bld.add(name, ["eval", ckpt, "--data", root, "--steps", "0", *(extra or [])], expect, folder,
                check="stdout", timeout=15, codes=codes)

    def place(writer: Callable[[Path], None], where: str) -> Callable[[Path], None]:
        """Put a broken file where lg must read it: the first train image (lg
        sniffs channels from it), or every val/ image (all scored)."""
        def setup(root: Path) -> None:
            if where == "first":
                base = root / "train" if (root / "train").is_dir() else root
                target = sorted(p for p in (base / "a").iterdir())[0]
                target.unlink()
                writer(target)
            else:
                for target in sorted((root / "val" / "a").iterdir()):
                    target.unlink()
                    writer(target)
        return setup

    writers: dict[str, tuple[Callable[[Path], None], str]] = {
        "zero-byte": (lambda p: p.write_bytes(b""), "either"),
        "truncated": (lambda p: p.write_bytes(_png()[:60]), "either"),
        "text-as-png": (lambda p: p.write_text("this is not an image\n"), "either"),
        "random-bytes": (lambda p: p.write_bytes(rng.randbytes(500)), "either"),
        "bomb-100000": (lambda p: p.write_bytes(_png_claiming(100_000, 100_000)), "either"),
        "bomb-20000": (lambda p: p.write_bytes(_png_claiming(20_000, 20_000)), "either"),
        "bomb-12000-warns": (lambda p: p.write_bytes(_png_claiming(12_000, 12_000)), "either"),
        "zero-width": (lambda p: p.write_bytes(_png_claiming(0, 28)), "either"),
    }
    for label, (writer, expect) in writers.items():
        case(f"{label}-first-train", place(writer, "first"), expect, split=True)
        case(f"{label}-in-val", place(writer, "val"), expect, split=True)
    case("bomb-flat-folder", place(writers["bomb-100000"][0], "first"), "either")
    case("dir-named-png", lambda r: (r / "a" / "x.png").mkdir(), "either")
    if not IS_ROOT:  # root reads a chmod 000 file anyway
        case("unreadable", lambda r: os.chmod(sorted((r / "a").iterdir())[0], 0), "either")

    def only_empty_class(root: Path) -> None:
        shutil.rmtree(root)
        (root / "empty").mkdir(parents=True)
    case("only-empty-class", only_empty_class, "error")

    def nothing(root: Path) -> None:
        shutil.rmtree(root)
        root.mkdir()
    case("empty-folder", nothing, "error")
    case("symlink-loop-file", lambda r: (r / "a" / "loop.png").symlink_to("loop.png"), "either")
    case("symlink-loop-dir", lambda r: (r / "a" / "up").symlink_to(".."), "either")
    case("symlink-loop-class", lambda r: (r / "c").symlink_to("c"), "either")
    case("val-classes-not-in-train", lambda r: None, "error", split=True, val_classes=("a", "zzz"))
    case("val-empty", lambda r: [p.unlink() for p in (r / "val").rglob("*.png")], "error", split=True)

    def one_image(root: Path) -> None:
        shutil.rmtree(root)
        (root / "a").mkdir(parents=True)
        (root / "a" / "x.png").write_bytes(_png())
    case("one-image", one_image, "error")
    case("mixed-sizes-modes", lambda r: ((r / "a" / "zz-big.png").write_bytes(_png((97, 13), "RGB")),
                                         (r / "b" / "zz-rgba.png").write_bytes(_png((5, 5), "RGBA"))), "ok")
    case("one-pixel-images", lambda r: [p.write_bytes(_png((1, 1))) for p in r.rglob("*.png")], "ok")
    case("class-name-newline", lambda r: (r / "a").rename(r / "evil\nlg: error: forged"), "either")
    case("jpeg-named-png", lambda r: _write_jpeg(sorted((r / "a").iterdir())[0]), "ok")
    case("many-classes", lambda r: [(_mk(r / f"c{i}") / "x.png").write_bytes(_png()) for i in range(40)], "either")
    case("valid-flat", lambda r: None, "ok")
    case("valid-split", lambda r: None, "ok", split=True)
    case("valid-subset-huge", lambda r: None, "error", extra=["--subset", "1000"], codes=(1, 2))
    folder = bld.folder("data-is-a-file")
    (folder / "in" / "images.png").write_bytes(_png())
    bld.add("data-is-a-file", ["eval", ckpt, "--data", folder / "in" / "images.png", "--steps", "0"], "error", folder)


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_jpeg(path: Path) -> None:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (28, 28), 128).save(buffer, format="JPEG")
    path.write_bytes(buffer.getvalue())


GENERATORS: dict[str, Callable[[Builder], None]] = {
    "mutations": gen_mutations, "headers": gen_headers, "pickles": gen_pickles,
    "paths": gen_paths, "requests": gen_requests, "images": gen_images,
}


def generate(family: str, root: Path, fixtures: Fixtures, seed: int = SEED) -> list[Case]:
    rng = random.Random(f"{seed}:{family}")
    builder = Builder(root, family, fixtures, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "sparse is beta" while building pickles
        GENERATORS[family](builder)
    CASE_COUNTS[family] = len(builder.cases)
    return builder.cases


# ====================================================================== library differential

def library_byte_strings(fixtures: Fixtures, seed: int = SEED, count: int = 200) -> list[tuple[str, bytes]]:
    """Mutated and lying safetensors bytes that the safetensors library refuses."""
    rng = random.Random(f"{seed}:library")
    bases = fixtures.bases()
    names = sorted(bases)
    found: list[tuple[str, bytes]] = []
    for name, data, _ in header_lies(rng, fixtures):
        if st_rejects(data):
            found.append((f"lie-{name}", data))
    attempts = 0
    while len(found) < count and attempts < 20 * count:
        attempts += 1
        op = rng.choice(MUTATIONS)
        base = rng.choice(names)
        data = mutate(rng, op, bases[base], bases[rng.choice([n for n in names if n != base])])
        if st_rejects(data):
            found.append((f"mut{attempts}-{op}-{base}", data))
    return found[:count]


def library_check(items: list[tuple[str, bytes]], folder: Path, results: Path) -> None:
    """In a child: each item must raise LgError from read_checkpoint(path) and from read_bytes(data)."""
    from lgcli.checkpoint import read_bytes, read_checkpoint
    from lgcli.errors import LgError

    folder.mkdir(parents=True, exist_ok=True)
    with open(results, "w") as log:
        for index, (name, data) in enumerate(items):
            path = folder / f"{index:03d}.safetensors"
            path.write_bytes(data)
            for how, call in (("file", lambda: read_checkpoint(path)), ("bytes", lambda: read_bytes(data))):
                try:
                    call()
                    verdict = "accepted"
                except LgError:
                    verdict = "refused"
                except BaseException as exc:  # noqa: BLE001 - reported
                    verdict = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
                log.write(json.dumps({"name": name, "how": how, "verdict": verdict}) + "\n")
                log.flush()


def run_library_check(fixtures: Fixtures, root: Path, seed: int = SEED, timeout: float = 60) -> tuple[int, list[str]]:
    """Run library_check in a forked child; returns (items, failure lines)."""
    items = library_byte_strings(fixtures, seed)
    results = root / "library-results.jsonl"
    folder = root / "library"
    outcome = run_function_in_child(lambda: library_check(items, folder, results), timeout=timeout,
                                    log=root / "library")
    failures = []
    seen = set()
    if results.exists():
        for line in results.read_text().splitlines():
            record = json.loads(line)
            seen.add((record["name"], record["how"]))
            if record["verdict"] != "refused":
                failures.append(f"{record['name']} as {record['how']}: {record['verdict']}")
    if outcome.killed or outcome.code != 0:
        done = len(seen)
        failures.append(f"the checking child {'timed out' if outcome.killed else f'exited {outcome.code}'} after "
                        f"{done} of {2 * len(items)} checks: {outcome.stderr.strip()[-400:]}")
    return len(items), failures


# ====================================================================== the runner

_LIVE_FDS: set[int] = set()  # pipe ends the parent holds: every child closes those it does not use


def _vm_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _limit_resources() -> None:
    limit = _vm_size() + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))


def _fresh_executors() -> None:
    """ThreadPoolExecutors created before the fork have no threads in the child: replace them."""
    from concurrent.futures import ThreadPoolExecutor

    for name, module in list(sys.modules.items()):
        if not (name == "lgcli" or name.startswith("lgcli.")) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, ThreadPoolExecutor):
                setattr(module, attr, ThreadPoolExecutor(max_workers=value._max_workers,
                                                         thread_name_prefix=value._thread_name_prefix))


def _default_warnings() -> None:
    """Python's own warning filters and printing (pytest's capture does not reach the child)."""
    warnings.resetwarnings()
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=category)

    def show(message, category, filename, lineno, file=None, line=None):
        try:
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
        except Exception:
            pass
    warnings.showwarning = show


def _close_live(keep: Iterable[int]) -> None:
    for fd in list(_LIVE_FDS):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _spawn_writer(target: Path | int, data: bytes) -> int:
    """A process that writes `data` into a pipe fd or a FIFO path, then exits."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            if isinstance(target, int):
                _close_live({target})
                fd = target
            else:
                _close_live(())
                fd = os.open(target, os.O_WRONLY)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.close(fd)
        except BaseException:  # noqa: BLE001 - the reader went away: fine
            code = 1
        os._exit(code)
    return pid


def _child_main(case: Case, argv: list[str], stdin_fd: int | None, keep: set[int], out_path: Path,
                err_path: Path) -> None:
    """In the forked child: set up, run lg, leave with its exit code. Never returns."""
    code = 99
    try:
        os.setpgid(0, 0)
        _close_live(keep | ({stdin_fd} if stdin_fd is not None else set()))
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err_fd, 2)
        os.close(err_fd)
        out_fd = os.open("/dev/full" if case.stdout == "full" else out_path,
                         os.O_WRONLY | (0 if case.stdout == "full" else os.O_CREAT | os.O_TRUNC), 0o644)
        os.dup2(out_fd, 1)
        os.close(out_fd)
        if case.stdin == "closed":
            os.close(0)
        else:
            if stdin_fd is None:
                if isinstance(case.stdin, tuple) and case.stdin[0] == "file":
                    stdin_fd = os.open(case.stdin[1], os.O_RDONLY)
                else:
                    stdin_fd = os.open("/dev/zero" if case.stdin == "zero" else "/dev/null", os.O_RDONLY)
            os.dup2(stdin_fd, 0)
            os.close(stdin_fd)
        encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
        errors = getattr(sys.__stdout__, "errors", None) or "strict"
        sys.stdin = None if case.stdin == "closed" else open(0, "r", encoding=encoding, closefd=False)
        sys.stdout = open(1, "w", encoding=encoding, errors=errors, closefd=False)
        sys.stderr = open(2, "w", encoding=encoding, errors="backslashreplace", closefd=False, buffering=1)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _limit_resources()
        os.chdir(case.dir)
        os.environ.pop("LG_DEBUG", None)
        os.environ.pop("PYTHONWARNINGS", None)
        torch.set_num_threads(1)
        _default_warnings()
        _fresh_executors()
        from lgcli.cli import main

        try:
            main(list(argv))
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                sys.stderr.write(f"{exc.code}\n")
                code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - e.g. /dev/full: the exit code stands
                pass
    except BaseException:  # noqa: BLE001 - escaped main: the harness shows it
        try:
            os.write(2, ("\n[hostile harness] exception escaped lgcli.cli.main:\n"
                         + traceback.format_exc()).encode(errors="replace"))
        except Exception:  # noqa: BLE001
            pass
        code = 99
    os._exit(code if 0 <= code < 256 else 99)


@dataclass
class _Running:
    case: Case
    pid: int
    started: float
    writers: list[int]
    out_path: Path
    err_path: Path
    before: dict[str, Any]
    outside: dict[str, str | None]


def _snapshot(folder: Path) -> dict[str, Any]:
    """Every entry under folder (not following links): relative path -> content fingerprint."""
    entries: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                entries[rel] = ("file", _sha256(path))
            elif stat.S_ISLNK(st.st_mode):
                entries[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = ("dir", None)
            else:
                entries[rel] = ("special", stat.S_IFMT(st.st_mode))
    return entries


def _sha256(path: str | Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _outside_inputs(case: Case) -> dict[str, str | None]:
    """Input files named on the command line (or as stdin) that live outside the case folder."""
    paths = list(case.argv)
    if isinstance(case.stdin, tuple) and case.stdin[0] == "file":
        paths.append(str(case.stdin[1]))
    out = {}
    for arg in paths:
        if not arg.startswith("/") or arg.startswith(str(case.dir)) or arg.startswith(("/dev/", "/proc/")):
            continue
        try:
            if os.path.isfile(arg):
                out[arg] = _sha256(arg)
        except (OSError, ValueError):
            continue
    return out


def _start(case: Case, logs: Path) -> _Running:
    logs.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", case.id)
    out_path, err_path = logs / f"{slug}.out", logs / f"{slug}.err"
    before = _snapshot(case.dir)
    outside = _outside_inputs(case)
    writers: list[int] = []
    parent_close: list[int] = []
    stdin_fd = None
    keep: set[int] = set()
    argv = list(case.argv)
    if isinstance(case.stdin, tuple) and case.stdin[0] == "bytes":
        r, w = os.pipe()
        _LIVE_FDS.update((r, w))
        writers.append(_spawn_writer(w, case.stdin[1]))
        stdin_fd = r
        parent_close += [r, w]
    if case.pipe_data is not None:
        r, w = os.pipe()
        _LIVE_FDS.update((r, w))
        writers.append(_spawn_writer(w, case.pipe_data))
        keep.add(r)
        argv = [a.replace("{PIPE}", f"/dev/fd/{r}") for a in argv]
        parent_close += [r, w]
    for path, data in case.fifo_writers:
        writers.append(_spawn_writer(path, data))
    pid = os.fork()
    if pid == 0:
        _child_main(case, argv, stdin_fd, keep, out_path, err_path)
    for fd in parent_close:
        os.close(fd)
        _LIVE_FDS.discard(fd)
    return _Running(case, pid, time.monotonic(), writers, out_path, err_path, before, outside)


def _reap_writers(pids: list[int]) -> None:
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass


def _finish(run: _Running, status: int | None, killed: bool, check: bool) -> Outcome:
    seconds = time.monotonic() - run.started
    _reap_writers(run.writers)
    code = signum = None
    if status is not None:
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
    stdout = run.out_path.read_bytes() if run.out_path.exists() else b""
    stderr = run.err_path.read_bytes().decode("utf-8", "replace") if run.err_path.exists() else ""
    outcome = Outcome(run.case, code, signum, killed, seconds, stdout, stderr)
    if check:
        outcome.failures = judge(run, outcome)
    return outcome


def judge(run: _Running, o: Outcome) -> list[tuple[str, str]]:
    """The contract, clause by clause."""
    case = run.case
    fails: list[tuple[str, str]] = []
    if o.killed:
        fails.append(("time", f"still running after {o.seconds:.1f} s (killed)"))
    elif o.signal is not None:
        fails.append(("killed", f"died of signal {o.signal} ({signal.Signals(o.signal).name})"))
    elif o.code == 99:
        fails.append(("crash", "an exception escaped lgcli.cli.main"))
    if MEMORY.search(o.stderr):
        fails.append(("memory", "hit its memory limit (an allocation failed, even if reworded)"))
    if "Traceback" in o.stderr or b"Traceback" in o.stdout:
        fails.append(("traceback", "a traceback was printed"))
    if case.marker is not None and os.path.lexists(case.marker):
        fails.append(("payload", f"the pickle payload ran ({case.marker.name} exists)"))
    code = o.code
    if code is not None and not o.killed and o.signal is None:
        if code == 0:
            if case.expect == "error":
                fails.append(("accepted", "exit 0 where a refusal was expected"))
            else:
                fails.extend(_check_output(case, o))
        elif code != 99:
            if case.expect == "ok":
                fails.append(("refused", f"exit {code} where success was expected"))
            elif code not in case.codes:
                fails.append(("exit-code", f"exit {code}, expected {' or '.join(map(str, case.codes))}"))
            fails.extend(_check_error_message(o.stderr))
    # Files: inputs unchanged, nothing new but the output (and only on success).
    after = _snapshot(case.dir)
    succeeded = code == 0 and not o.killed
    allowed_new = set()
    if succeeded:
        for path in (case.output, *map(str, case.may_create)):
            if path and path != "-":
                allowed_new.add(os.path.relpath(path, case.dir))
    may_change = {os.path.relpath(p, case.dir) for p in case.may_change} if succeeded else set()
    for rel, before in run.before.items():
        now = after.get(rel)
        if now != before and rel not in may_change:
            fails.append(("input-changed", f"{rel!r} {'vanished' if now is None else 'changed'}"))
    new = sorted(rel for rel in after if rel not in run.before and rel not in allowed_new)
    if new and not o.killed:  # a killed run's debris is the timeout's fault
        fails.append(("leftover", f"new files: {', '.join(repr(n) for n in new[:4])}"))
    for path, digest in run.outside.items():
        if _sha256(path) != digest:
            fails.append(("input-changed", f"{path} changed"))
    return fails


def _check_output(case: Case, o: Outcome) -> list[tuple[str, str]]:
    if case.check == "file" and case.output and case.output != "-":
        if not os.path.isfile(case.output):
            return [("output", "exit 0 but no output file")]
        try:
            with safetensors.safe_open(case.output, "pt") as f:
                for key in f.keys():
                    f.get_tensor(key)
        except Exception as exc:  # noqa: BLE001
            return [("output", f"the output is not readable safetensors ({type(exc).__name__}: {str(exc)[:80]})")]
    elif case.check == "stdout-st":
        try:
            safetensors.torch.load(o.stdout)
        except Exception as exc:  # noqa: BLE001
            return [("output", f"stdout is not a readable checkpoint ({str(exc)[:80]})")]
    elif case.check == "stdout" and case.stdout == "capture" and not o.stdout.strip():
        return [("output", "exit 0 but nothing on stdout")]
    return []


WARNING_LINE = re.compile(r"\w+Warning\b|Traceback|warnings\.warn|^\s+File \"")


def _check_error_message(stderr: str) -> list[tuple[str, str]]:
    fails = []
    lines = stderr.splitlines()
    # One error line, the last: progress notes may precede it (eval's "head
    # re-initialised"), but no second error line, warning or traceback.
    errors = [line for line in lines if line.startswith(PREFIX)]
    if len(errors) != 1 or not lines or not lines[-1].startswith(PREFIX) or not stderr.endswith("\n"):
        fails.append(("stderr-lines", f"{len(errors)} 'lg: error:' lines in {len(lines)} on stderr, "
                                      f"expected exactly one, last"))
    if any(WARNING_LINE.search(line) for line in lines[:-1]):
        fails.append(("stderr-lines", "a third-party warning or traceback before the error line"))
    first = next((line for line in lines if line.startswith(PREFIX)), lines[0] if lines else "")
    if not first.startswith(PREFIX):
        fails.append(("stderr-prefix", "no 'lg: error: ' line"))
    else:
        text = first[len(PREFIX):]
        if EXC_NAME.match(text) or CAMEL_NAME.match(text):
            fails.append(("exception-name", f"message starts with a class name: {text.split(':')[0][:40]}"))
        elif re.search(r"\binternal error\b|\bbug in lg\b", text, re.IGNORECASE) or HIDDEN_CRASH_NAMES.search(text):
            fails.append(("internal-error", "an unforeseen exception, reworded"))
    return fails


def run_cases(cases: list[Case], jobs: int = JOBS, check: bool = True, logs: Path | None = None,
              progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run cases in forked children, `jobs` at a time; outcomes in case order."""
    _preimport()

    if not cases:
        return []
    logs = logs or cases[0].dir.parent.parent.parent / "logs"
    pending = list(enumerate(cases))
    running: dict[int, tuple[int, _Running]] = {}
    outcomes: dict[int, Outcome] = {}
    while pending or running:
        while pending and len(running) < jobs:
            index, case = pending.pop(0)
            run = _start(case, logs)
            running[run.pid] = (index, run)
        time.sleep(0.005)
        for pid, (index, run) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            killed = False
            if not done:
                if time.monotonic() - run.started <= (run.case.timeout or TIMEOUT):
                    continue
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status = os.waitpid(pid, 0)
                killed = True
            del running[pid]
            outcome = _finish(run, status, killed, check)
            outcomes[index] = outcome
            if progress:
                progress(outcome)
    return [outcomes[i] for i in range(len(cases))]


def _preimport() -> None:
    """Import lg's modules once here: every child inherits them instead of importing its own."""
    import importlib

    import lgcli.cli  # noqa: F401 - a failure here is the test's failure
    for name in ("api", "resize", "evaluate", "data", "condense", "report", "train", "methods", "learngenes"):
        try:
            importlib.import_module(f"lgcli.{name}")
        except ImportError:
            pass


def run_function_in_child(func: Callable[[], None], timeout: float, log: Path) -> Outcome:
    """Run func() in a forked child under the same limits; exit 0 unless it raised."""
    log.mkdir(parents=True, exist_ok=True)
    err_path = log / "child.err"
    case = Case("library", "check", [], "ok", log, timeout=timeout)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _close_live(())
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 2)
            sys.stderr = open(2, "w", closefd=False, buffering=1)
            _limit_resources()
            torch.set_num_threads(1)
            _fresh_executors()
            func()
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        os._exit(code)
    started = time.monotonic()
    killed = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - started > timeout:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            killed = True
            break
        time.sleep(0.01)
    stderr = err_path.read_text(errors="replace") if err_path.exists() else ""
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return Outcome(case, code, os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, killed,
                   time.monotonic() - started, b"", stderr)


def failure_message(outcomes: list[Outcome], limit: int = 8000) -> str:
    failed = [o for o in outcomes if not o.passed]
    lines = [f"{len(failed)} of {len(outcomes)} hostile cases broke the contract:"]
    for outcome in failed:
        lines.append("  " + outcome.line())
    text = "\n".join(lines)
    if len(text) > limit:
        text = text[:limit] + f"\n  ... (cut; run `python tests/hostile_cases.py --report --family "\
                              f"{failed[0].case.family}` for all)"
    return text


# ====================================================================== script

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="store_true", help="run the cases and print a summary (the default)")
    parser.add_argument("--family", action="append", choices=FAMILIES + ("library",),
                        help="only these families (repeatable); 'library' is the in-process differential check")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--list", action="store_true", help="list the cases without running them")
    parser.add_argument("--match", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES) + ["library"]
    root = args.keep or Path(tempfile.mkdtemp(prefix="lg-hostile-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        fixtures = build_fixtures(root)
        for note in fixtures.notes:
            print(f"note: {note}")
        total_failed = 0
        summary = []
        clauses: dict[str, int] = {}
        for family in families:
            t0 = time.monotonic()
            if family == "library":
                count, failures = run_library_check(fixtures, root, args.seed)
                summary.append((family, count, count - len(failures), len(failures), time.monotonic() - t0))
                for line in failures:
                    print(f"FAIL library/{line}")
                total_failed += len(failures)
                continue
            cases = generate(family, root, fixtures, args.seed)
            if args.match:
                cases = [c for c in cases if args.match in c.name]
            if args.list:
                for case in cases:
                    print(f"{case.id} [{case.expect}] {case.describe_argv()}")
                continue
            outcomes = run_cases(cases, jobs=args.jobs)
            failed = [o for o in outcomes if not o.passed]
            for outcome in failed:
                print("FAIL " + outcome.line())
                for clause in {c for c, _ in outcome.failures}:
                    clauses[clause] = clauses.get(clause, 0) + 1
            total_failed += len(failed)
            summary.append((family, len(outcomes), len(outcomes) - len(failed), len(failed), time.monotonic() - t0))
        print(f"\n{'family':<10} {'cases':>6} {'passed':>7} {'failed':>7} {'seconds':>8}")
        for family, count, passed, failed_count, seconds in summary:
            print(f"{family:<10} {count:>6} {passed:>7} {failed_count:>7} {seconds:>8.1f}")
        if clauses:
            print("failing cases by clause: " + ", ".join(f"{c} {n}" for c, n in sorted(clauses.items(),
                                                                                       key=lambda kv: -kv[1])))
        print(f"total {sum(s[1] for s in summary)} cases, {total_failed} failed, "
              f"{time.monotonic() - started:.1f} s (seed {args.seed})")
        return 1 if total_failed else 0
    finally:
        if args.keep is None:
            shutil.rmtree(root, onerror=_force_remove)


if __name__ == "__main__":
    sys.exit(main())
