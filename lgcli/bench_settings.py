"""What an lg bench run is asked (`BenchSettings`: sizes, methods, the probe,
the learngenes' condense steps) and parsed from its flags, the cells it
runs (`Cell`: a method at a size and seed), and what it may write in its
results folder (`foreign_entry`, `check_ancestry`)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LgError, UsageError, os_reason, shown
from .options import DEFAULT_CONDENSE_BATCH_SIZE, DEFAULT_CONDENSE_STEPS


RANDOM = "random"
FIT = "+fit"  # the row of a learngene kind whose per-size part is fitted before the probe
BENCH_VERSION = 1
# The option that sets the learngenes' condense batch (`--batch-size` is the
# probe's): named where a condense run's hint says to lower the batch.
CONDENSE_BATCH_FLAG = "--condense-batch-size"
CONDENSE_OPTION_FLAG = "--condense-option"
LEARNGENE_WIDTHS_FLAG, LEARNGENE_DEPTHS_FLAG = "--learngene-widths", "--learngene-depths"


@dataclass
class BenchSettings:
    """What `lg bench` runs. `probe` is `lg eval`'s probe (steps, rates,
    batch, seed, ...), the same for every cell. Each learngene kind that
    trains is condensed once: `condense_steps` steps (one number for every
    kind, or {kind: steps}), of `condense_batch_size`, started as `lg
    condense` starts by default (from the ancestry when the widths match),
    and with `condense_until` stopped by `lg condense --until`'s rule (the
    steps are then the most it runs). With `learngene_widths`, a kind that
    trains widths (`lg condense --widths`) is condensed at every width of
    `sizes` no wider than the ancestry, by the sandwich rule, so that it
    builds each of them directly; with `learngene_depths`, each kind that
    draws depths (`lg condense --depths`) draws them from the range of the
    depths of `sizes`. `condense_options` gives a kind more of `lg condense`'s
    options ({kind: {name: value}}, from `--condense-option KIND:NAME=VALUE`),
    e.g. {"sws": {"stages": 30, "stage_map": "angular"}}."""

    sizes: list[tuple[int, int]]
    methods: list[str] | None = None  # None: every method that fits
    probe: Any = None  # lgcli.evaluate.ProbeSettings (default: 300 steps)
    condense_steps: int | dict[str, int] = DEFAULT_CONDENSE_STEPS
    condense_batch_size: int = DEFAULT_CONDENSE_BATCH_SIZE
    condense_until: float | None = None
    learngene_widths: bool = False
    learngene_depths: bool = False
    condense_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # > 0: a KIND+fit row for every kind that fits a part per size (with
    # --methods, the +fit rows it names: it must name one); never with a budget.
    fit_steps: int = 0
    subset: str | None = None
    test_subset: str | None = None
    seq_len: int | None = None  # a language model's window (None: lg eval's default, min(128, its positions))
    force: bool = False
    # Each cell is run once per seed (seed, seed + 1, ...): the table gives
    # the mean and a 95 % t-interval; one seed, a bootstrap over test examples.
    seeds: int = 1
    # Equal compute (SPEC.md "Measuring an initialisation"): every path gets
    # `budget` training steps of `lg distill`'s batch on the bench's data
    # before the probe: a resize distilled from the ancestry, a learngene
    # condensed (once for every size) for `budget` steps, whatever
    # condense_steps say (`lg bench` refuses --condense-steps beside a
    # --budget they differ from). None: resizes cost nothing and each
    # learngene its condense_steps, as before.
    budget: int | None = None
    calibrate_samples: int | None = None  # the data-aware methods' (their default when None)
    # --mean, --std, --interpolation over the ancestry's own preprocessing
    # (`lgcli.preprocessing`), which every cell's images are prepared by.
    preprocessing: Any = None  # lgcli.preprocessing.Overrides

    def __post_init__(self) -> None:
        from .checks import check_whole
        from .evaluate import ProbeSettings

        if not self.sizes:
            raise UsageError("--sizes: give at least one size, e.g. 3x64,6x128")
        if self.probe is None:
            self.probe = ProbeSettings(steps=300)
        if self.probe.steps < 1:
            raise UsageError("--steps must be at least 1: the bench compares how models learn")
        if isinstance(self.condense_steps, dict):
            for kind, steps in self.condense_steps.items():
                check_whole(steps, f"--condense-steps {kind}", 1)
        else:
            check_whole(self.condense_steps, "--condense-steps", 1)
        check_whole(self.condense_batch_size, CONDENSE_BATCH_FLAG, 1)
        check_whole(self.seeds, "--seeds", 1)
        check_whole(self.fit_steps, "--fit-steps", 0)
        self._check_methods()
        self._check_condense_options()
        if self.budget is not None:
            check_whole(self.budget, "--budget", 0)
        if self.condense_until is not None:
            from .checks import check_real

            check_real(self.condense_until, "--condense-until", "a fraction in (0, 1]", lambda v: 0 < v <= 1)

    def _check_methods(self) -> None:
        """Refuse a --methods that names no method, one lg does not know or one
        twice; a fit beside --budget; and --fit-steps where --methods names no
        +fit row for it: said here, before the ancestry is read, so that no
        request is dropped or bent in silence."""
        fitted = [m for m in self.methods or [] if m.endswith(FIT)]
        if self.methods is not None:
            if not self.methods:  # not every method: an empty list is a mistake, never a request for all
                raise UsageError("--methods: give at least one method, e.g. select,tleg (leave --methods out for "
                                 "every method)")
            known = all_methods()
            unknown = next((m for m in self.methods if m not in known), None)
            if unknown is not None:
                raise UsageError(f"--methods: unknown {shown(unknown)} (known: {', '.join(known)})")
            # A second copy would run each cell again and be summarised as another seed of the row.
            twice = next((m for i, m in enumerate(self.methods) if m in self.methods[:i]), None)
            if twice is not None:
                raise UsageError(f"--methods names {shown(twice)} twice: give each method once")
        if self.budget is not None and (self.fit_steps or fitted):
            # The fit trains on top of the learngene's condense run, which the budget already is.
            given = f"--fit-steps {self.fit_steps}" if self.fit_steps else f"--methods {fitted[0]}"
            raise UsageError(f"{given} beside --budget {self.budget}: a +fit row's fit steps come on top of the "
                             f"budget every path shares, so its compute would not be equal; give one of them")
        if self.fit_steps and self.methods is not None and not fitted:
            rows = [m for m in all_methods() if m.endswith(FIT)]
            asked = [f"{m}{FIT}" for m in self.methods if f"{m}{FIT}" in rows] or rows
            raise UsageError(f"--fit-steps {self.fit_steps} is for the +fit rows, and --methods names none: add "
                             f"{' or '.join(asked)} to --methods")

    def _check_condense_options(self) -> None:
        """Refuse a kind the bench will not condense, an option the kind does
        not take or a value it refuses, and an option a bench flag sets."""
        from .learngenes import KINDS
        from .options import resolve_options

        # Checked values into a dict of its own: the caller's is left as given.
        self.condense_options = {kind: dict(given) for kind, given in self.condense_options.items()}
        for kind, given in self.condense_options.items():
            if kind not in KINDS:
                raise UsageError(f"{CONDENSE_OPTION_FLAG}: no learngene kind {shown(repr(kind))} (kinds: "
                                 f"{', '.join(KINDS)})")
            if self.methods is not None and not any(m.removesuffix(FIT) == kind for m in self.methods):
                raise UsageError(f"{CONDENSE_OPTION_FLAG} {kind}:... is for a kind --methods does not bench (add "
                                 f"{kind} to --methods)")
            checked = resolve_options(f"learngene kind '{kind}'", KINDS[kind].condense_options, given)
            self.condense_options[kind] = {name: checked[name] for name in given}
            for flag, asked, names in ((LEARNGENE_WIDTHS_FLAG, self.learngene_widths, ("widths", "width_rule")),
                                       (LEARNGENE_DEPTHS_FLAG, self.learngene_depths, ("depths",))):
                clash = [name.replace("_", "-") for name in names if asked and name in given]
                if clash:
                    raise UsageError(f"{flag} sets {kind}'s --{clash[0]}: give {flag} or "
                                     f"{CONDENSE_OPTION_FLAG} {kind}:{clash[0]}=..., not both")

    def recorded(self) -> dict[str, Any]:
        """The learngene settings bench.json records, as they ran: under a
        budget the condense steps are the budget, whatever condense_steps say."""
        names = ("condense_steps", "condense_batch_size", "condense_until", "learngene_widths", "learngene_depths",
                 "condense_options", "fit_steps")
        return {**{name: getattr(self, name) for name in names},
                **({"condense_steps": self.budget} if self.budget is not None else {})}

    def condense_budget(self, kind: str) -> int:
        """The condense steps of `kind` (the most it runs, with condense_until):
        the bench's budget when it has one."""
        if self.budget is not None:
            return self.budget
        if isinstance(self.condense_steps, dict):
            return self.condense_steps.get(kind, DEFAULT_CONDENSE_STEPS)
        return self.condense_steps

    def condense_key(self, kind: str, ancestry) -> dict[str, Any]:
        """What a learngene of `kind` depends on (its cells' reuse key); a
        key without width options is the one earlier versions wrote."""
        options = self.learngene_options(kind, ancestry)
        return {"steps": self.condense_budget(kind), "batch_size": self.condense_batch_size,
                "until": self.condense_until, **({"options": options} if options else {})}

    def learngene_options(self, kind: str, ancestry) -> dict[str, str]:
        """`lg condense` options for `kind`'s learngene from the `ancestry`
        spec, for the kinds that take them: with learngene_widths, the widths
        of `sizes` no wider than the ancestry, and its own (the learngene's
        widest), when a size asks for another; the sandwich rule, which
        trains the widest and narrowest every step (docs/learngenes.md). With
        learngene_depths, `--depths MIN-MAX` over the depths of `sizes`: a
        kind that trains one depth by default (SWS, WAVE) then trains the
        shallow and deep sizes too, and one that draws 2-2L (TLEG, LeTs)
        spends its steps on the bench's depths. Any `condense_options` of the
        kind come with them."""
        options: dict[str, Any] = dict(self.condense_options.get(kind, {}))
        if not (self.learngene_widths or self.learngene_depths):
            return options
        declared = _condense_options(kind, ancestry)
        widths = sorted({width for _, width in self.sizes if width < ancestry.width} | {ancestry.width})
        if self.learngene_widths and "widths" in declared and len(widths) > 1:
            rule = {"width_rule": "sandwich"} if "width_rule" in declared else {}
            options.update({"widths": ",".join(map(str, widths)), **rule})
        if self.learngene_depths and "depths" in declared:
            depths = [depth for depth, _ in self.sizes]
            options["depths"] = f"{min(depths)}-{max(depths)}"
        return options

    def widths_hint(self, kind: str, ancestry, width: int) -> str:
        """What a cell of `kind` the learngene cannot build at `width` adds to
        its reason: the flag that trains it there, when one would."""
        if (self.learngene_widths or "widths" in self.condense_options.get(kind, {})
                or "widths" not in _condense_options(kind, ancestry) or not width < ancestry.width):
            return ""
        return "; lg bench --learngene-widths condenses it at the bench's widths"


def _condense_options(kind: str, ancestry) -> set[str]:
    """The names of the options `lg condense` takes for `kind` on this ancestry."""
    from .learngenes import get_kind

    return {option.name for option in get_kind(kind, ancestry).condense_options}


def parse_condense_steps(text: str) -> int | dict[str, int]:
    """``600`` (every kind) or ``tleg=600,wave=1500`` (per kind; a kind not
    named gets DEFAULT_CONDENSE_STEPS)."""
    from .learngenes import KINDS

    text = str(text).strip()
    if re.fullmatch(r"[0-9]{1,9}", text, re.ASCII):
        return int(text)
    steps: dict[str, int] = {}
    for part in text.split(","):
        match = re.fullmatch(r"\s*([a-z]+)\s*=\s*([0-9]{1,9})\s*", part, re.ASCII)
        if not match or match[1] not in KINDS:
            raise UsageError(f"--condense-steps takes N, or KIND=N pairs comma-separated (kinds: "
                             f"{', '.join(KINDS)}), not {shown(repr(part.strip()))}")
        if match[1] in steps:  # the later would replace the earlier in silence
            raise UsageError(f"--condense-steps gives {match[1]} twice")
        steps[match[1]] = int(match[2])
    return steps


def parse_condense_options(texts: list[str] | None) -> dict[str, dict[str, Any]]:
    """``["sws:stages=30", "sws:stage-map=angular"]`` -> {"sws": {"stages": "30",
    "stage_map": "angular"}}: `lg condense`'s flag (its name without the
    dashes, or with them) and value for one kind's condense run; the values
    are checked against the kind's declarations by BenchSettings. A bool
    option takes true or false."""
    options: dict[str, dict[str, Any]] = {}
    for text in texts or []:
        match = re.fullmatch(r"\s*([a-z]+)\s*:\s*(?:--)?([a-z][a-z0-9-]*)\s*=\s*(\S(?:.*\S)?)\s*", str(text), re.ASCII)
        if not match:
            raise UsageError(f"{CONDENSE_OPTION_FLAG} takes KIND:OPTION=VALUE, as sws:stage-map=angular (the "
                             f"options lg condense --method KIND takes), not {shown(repr(str(text)))}")
        kind, name, value = match[1], match[2].replace("-", "_"), match[3]
        if value.lower() in ("true", "false"):
            value = value.lower() == "true"
        given = options.setdefault(kind, {})
        if name in given:
            raise UsageError(f"{CONDENSE_OPTION_FLAG} gives {kind}:{match[2]} twice")
        given[name] = value
    return options


# The largest sizes --sizes takes (the digits it always read: 6 and 7).
MAX_BENCH_DEPTH, MAX_BENCH_WIDTH = 999_999, 9_999_999


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``3x64,6x128`` -> [(3, 64), (6, 128)] (depth x width), in the order given."""
    sizes = []
    for part in str(text).split(","):
        match = re.fullmatch(r"\s*([0-9]+)\s*x\s*([0-9]+)\s*", part, re.ASCII)
        if not match or int(match[1]) < 1 or int(match[2]) < 1:
            raise UsageError(f"--sizes takes DEPTHxWIDTH pairs, comma-separated (e.g. 3x64,6x128), "
                             f"not {shown(repr(part.strip()))}")
        # Well formed, but larger than any model a bench builds: said as such, not as malformed.
        for name, value, most in (("depth", match[1], MAX_BENCH_DEPTH), ("width", match[2], MAX_BENCH_WIDTH)):
            if len(value) > len(str(most)) or int(value) > most:
                raise UsageError(f"--sizes {shown(part.strip())}: {name} {value} is too large "
                                 f"(a bench builds {name}s up to {most:,})")
        size = (int(match[1]), int(match[2]))
        if size not in sizes:
            sizes.append(size)
    return sizes


def all_methods(fitted: bool = True) -> list[str]:
    """Every method the bench knows, in table order: resize methods, the row
    of `lg shrink --calibrate` without a method, learngene kinds, (with
    `fitted`) the fitted rows of the kinds that fit, random."""
    from .learngenes import KINDS

    from .calibrated_shrink import BENCH_ROW
    from .methods import METHODS

    fits = [f"{name}{FIT}" for name, kind in KINDS.items()
            if fitted and any(option.name == "data" for option in kind.expand_options)]
    return [*METHODS, BENCH_ROW, *KINDS, *fits, RANDOM]


@dataclass
class Cell:
    method: str
    depth: int
    width: int
    seed: int | None = None  # None: the bench's one seed (the file names of a bench of one seed)

    @property
    def size(self) -> str:
        return f"{self.depth}x{self.width}"

    @property
    def name(self) -> str:
        return f"{self.method}@{self.size}" + (f"~seed{self.seed}" if self.seed is not None else "")


# What lg bench writes in its folder: the report, its figures, and the
# cells and learngenes an interrupted run resumes from.
BENCH_FILES = re.compile(r"bench\.json|summary\.png|curves_[0-9]+x[0-9]+\.png", re.ASCII)
BENCH_FOLDERS = {"cells": re.compile(r"[a-z0-9+_-]+@[0-9]+x[0-9]+(~seed[0-9]+)?\.json", re.ASCII),
                 "learngenes": re.compile(r"[a-z0-9_-]+(\.lg\.safetensors|\.json)", re.ASCII)}
# A temporary file of an atomic write cut short by a crash (lgcli.checkpoint.atomic).
TEMPORARY = re.compile(r"\..*\.(tmp|old)(\..*)?", re.ASCII | re.DOTALL)


def foreign_entry(out: Path) -> str | None:
    """The first entry of the folder `out` that lg bench did not write, or
    None when it wrote all of them (or the folder is empty or absent). A
    folder is lg's own only when lg made it: it holds cells/ or bench.json,
    and nothing but what a bench writes; a summary.png of the user's own in
    an otherwise empty folder is theirs. A file is lg's by its name and what
    it holds (`_written_by_lg`): a bench.json, a cell or a learngene of the
    user's own is theirs too."""
    if not out.is_dir():
        return None
    try:
        entries = sorted(os.listdir(out))
    except OSError as exc:
        raise LgError(f"{shown(out)}: cannot list it ({os_reason(exc)})") from None
    for name in entries:
        entry = out / name
        if TEMPORARY.fullmatch(name):
            continue
        if name in BENCH_FOLDERS:
            if entry.is_symlink() or not entry.is_dir():
                return name
            try:
                inner = sorted(os.listdir(entry))
            except OSError:
                return name
            stray = next((f for f in inner if not TEMPORARY.fullmatch(f) and not (
                BENCH_FOLDERS[name].fullmatch(f) and _written_by_lg(entry / f, name))), None)
            if stray is not None:
                return f"{name}/{stray}"
        elif not BENCH_FILES.fullmatch(name) or not _written_by_lg(entry, None):
            return name
    kept = [name for name in entries if not TEMPORARY.fullmatch(name)]
    if kept and not {"cells", "bench.json"} & set(kept):
        return kept[0]
    return None


SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _written_by_lg(path: Path, folder: str | None) -> bool:
    """Whether `path`, a name lg bench writes (in `folder`, or in the results
    folder itself), is a plain file holding what lg writes there: bench.json
    a bench's report, a cell a cell of its name, a learngene's record its
    key, a learngene file one, a figure a PNG."""
    if path.is_symlink() or not path.is_file():
        return False
    if folder == "cells":
        cell = _json_record(path) or {}
        return (_is_sha256(cell.get("key")) and cell.get("status") in ("done", "n/a")
                and f"{cell.get('method')}@{cell.get('size')}" == path.name.removesuffix(".json").split("~")[0])
    if folder == "learngenes" and path.name.endswith(".json"):
        info = _json_record(path) or {}
        return _is_sha256(info.get("key")) and "steps" in info
    if folder == "learngenes":
        return _is_learngene_file(path)
    if path.name == "bench.json":
        return bench_record(path) is not None
    return _head(path, len(PNG_SIGNATURE)) == PNG_SIGNATURE


def bench_record(path: Path) -> dict[str, Any] | None:
    """The report in `path` when it is one lg bench wrote (its version, the
    ancestry's file and sha256, the sizes, methods and cells it records, as
    every lg bench wrote them), else None. Parsed as JSON: nothing in it is
    run."""
    report = _json_record(path)
    if report is None:
        return None
    version, ancestry = report.get("version"), report.get("ancestry")
    if not (type(version) is int and version >= 1 and isinstance(ancestry, dict)
            and isinstance(ancestry.get("file"), str) and _is_sha256(ancestry.get("sha256"))
            and all(isinstance(report.get(name), list) for name in ("sizes", "methods", "cells"))):
        return None
    return report


def check_ancestry(out: Path | None, ancestry: str, sha256: str) -> None:
    """Refuse a results folder holding a bench of another ancestry (another
    experiment, not a resume): by its bench.json's record, or without one
    (a run stopped before its report) by its cells' and learngenes'."""
    other = _recorded_ancestry(out, sha256) if out is not None and out.is_dir() else None
    if other is not None:
        raise LgError(f"{shown(out)}: holds a bench of {shown(other.get('file') or 'another ancestry')} (sha256 "
                      f"{other['sha256'][:12]}...), not of {shown(ancestry)} (sha256 {sha256[:12]}...): give "
                      f"another -o, or --force to replace its results")


def _recorded_ancestry(out: Path, sha256: str) -> dict[str, Any] | None:
    """The ancestry record ({"file", "sha256"}) of the bench in `out` when it
    is not `sha256`'s, else None (this ancestry's, or none recorded)."""
    report = bench_record(out / "bench.json") if (out / "bench.json").is_file() else None
    if report is not None:
        records = [report["ancestry"]]
    else:  # each cell and learngene record their ancestry (since 2026-12)
        records = []
        for folder, names in BENCH_FOLDERS.items():
            try:
                found = sorted(os.listdir(out / folder)) if (out / folder).is_dir() else []
            except OSError:
                found = []
            records += [(_json_record(out / folder / name) or {}).get("ancestry") for name in found
                        if name.endswith(".json") and names.fullmatch(name) and (out / folder / name).is_file()]
    return next((r for r in records if isinstance(r, dict) and _is_sha256(r.get("sha256")) and r["sha256"] != sha256),
                None)


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and SHA256.fullmatch(value) is not None


def _json_record(path: Path) -> dict[str, Any] | None:
    """The JSON object `path` holds, or None when it holds none. Python's
    reader, not `header.load_json`: lg bench writes a diverged run's figures
    as Infinity or NaN (json.dumps' default), which the strict reader refuses."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LgError(f"{shown(path)}: cannot read it ({os_reason(exc)})") from None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _head(path: Path, size: int) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read(size)
    except OSError as exc:
        raise LgError(f"{shown(path)}: cannot read it ({os_reason(exc)})") from None


def _is_learngene_file(path: Path) -> bool:
    """Whether `path` is a safetensors file whose lg metadata say it is a
    learngene: its header alone is read, and checked as lg reads one
    (`header.header_length`, `header.parse_header`)."""
    from .checkpoint.metadata import LG_PREFIX
    from .header import header_length, parse_header
    from .loading import LEARNGENE

    try:
        with open(path, "rb") as file:
            total = os.fstat(file.fileno()).st_size
            header = parse_header(file.read(header_length(file.read(8), str(path), total)), str(path))
    except OSError as exc:
        raise LgError(f"{shown(path)}: cannot read it ({os_reason(exc)})") from None
    except LgError:  # not a safetensors file: not one lg wrote
        return False
    return header.metadata.get(f"{LG_PREFIX}kind") == LEARNGENE


def unmade_folders(out: Path) -> list[Path]:
    """The folders a bench into `out` would make that do not exist yet,
    deepest first: `out`'s own folders (BENCH_FOLDERS), `out`, and the
    parents it is made with. A run that fails removes those still empty
    (`remove_if_empty`), so that a refusal leaves nothing behind."""
    made = [out / name for name in BENCH_FOLDERS if not (out / name).exists()]
    folder = out
    while not folder.exists() and folder != folder.parent:
        made.append(folder)
        folder = folder.parent
    return made


def remove_if_empty(folders: list[Path]) -> None:
    """Remove each folder, deepest first, that is still empty: rmdir refuses
    one that holds anything, so no file of the user's (or a finished cell)
    is ever removed."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass
