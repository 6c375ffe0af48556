"""`lg bench`: every initialisation method at every size, on the user's own
ancestry model and data, judged the way the learngene papers judge one (WAVE's
Table 1: rows are methods, columns are descendant sizes).

For each target size and each method that can reach it (the training-free
resize methods whose direction fits, ``block-ablation+activation``, what `lg
shrink --calibrate` does without a method, every learngene kind, and timm's
random initialisation), the model is built in memory and put through `lg eval`'s
probe with the same data order and settings as every other cell; each
learngene kind is condensed once and reused for every size. A cell records
the probe's row (instinct, final and mean top-1, the curve), the steps it
needs to reach the random row's final top-1 at its size, and what building it
cost. With `fit_steps`, the kinds that fit a part per size (WAVE's scalers,
PEG's map φ) get a second row, ``KIND+fit``: the same learngene, that part
trained on the bench's data before the probe, as `lg grow --data` does.
Every finished cell is saved as it finishes (``OUT/cells/``), and a rerun
with the same arguments reuses it, so an interrupted bench resumes.

    >>> from lgcli.bench import BenchSettings, bench, parse_sizes
    >>> report = bench("ancestry.safetensors", "fashion-mnist-mini", "results",
    ...                BenchSettings(sizes=parse_sizes("3x64,6x128")))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import LgError, UsageError, counted, notify_stderr, shown
from .bench_settings import (BENCH_VERSION, CONDENSE_BATCH_FLAG, FIT, RANDOM, BenchSettings, Cell, all_methods,
                             check_ancestry, foreign_entry, parse_sizes, remove_if_empty, unmade_folders)
from .bench_tables import plot_summary, row_costs, seed_mean_rows, summarised
from .bench_rows import RESIZE_ROWS
from .bench_plan import plan

Notify = Callable[[str], None]


@dataclass
class _Context:
    """What every cell shares: the ancestry, the data, the learngenes."""

    loaded: Any
    data: Any
    data_name: str
    settings: BenchSettings
    out: Path | None  # None: a plan without a results folder
    key: dict[str, Any]
    notify: Notify
    learngenes: dict[str, Any] = field(default_factory=dict)
    condensed: dict[str, dict[str, Any]] = field(default_factory=dict)
    tag: str = ""  # a learngene file's suffix: each seed of a bench of several condenses its own
    # Each trained kind's learngene before condensing (shapes only,
    # `condense.unstarted_learngene`): which sizes it reaches, known for free.
    unstarted: dict[str, Any] = field(default_factory=dict)
    # The ancestry ({"file", "sha256"}), as each cell and learngene record it:
    # a bench of another ancestry into the folder is refused (`check_ancestry`).
    ancestry: dict[str, str] = field(default_factory=dict)

    def seeded(self, seed: int) -> "_Context":
        """The context of one seed of a bench of several: the probe, the
        methods and the condense runs seeded with it."""
        settings = dataclasses.replace(self.settings, probe=dataclasses.replace(self.settings.probe, seed=seed))
        return _Context(loaded=self.loaded, data=self.data, data_name=self.data_name, settings=settings,
                        out=self.out, key={**self.key, "probe": {**self.key["probe"], "seed": seed}},
                        notify=self.notify, tag=f"-seed{seed}", unstarted=self.unstarted, ancestry=self.ancestry)


def bench(ancestry: str | os.PathLike, data: str, out: str | os.PathLike | None, settings: BenchSettings, *,
          notify: Notify = notify_stderr, dry_run: bool = False) -> dict[str, Any]:
    """Run (or resume) the bench; write ``OUT/bench.json``, a curve plot per
    size and ``OUT/summary.png``; return the report. `dry_run`: read and
    check everything, time a few steps, write nothing, and return the plan
    (`bench_plan.plan`) instead; its `out` may be None (no results folder: nothing
    saved before is reused)."""
    from .loading import load
    from .sizing import check_heads_known, target_spec

    known = all_methods()
    methods = settings.methods or all_methods(fitted=settings.fit_steps > 0)
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise UsageError(f"--methods: unknown {shown(unknown[0])} (known: {', '.join(known)})")
    unfitted = [m for m in methods if m.endswith(FIT)]
    if unfitted and settings.fit_steps == 0:
        raise UsageError(f"--methods {unfitted[0]} fits a part per size: give --fit-steps N")
    if RANDOM not in methods:
        methods = [*methods, RANDOM]  # every cell is measured against it
    if settings.budget == 0:
        from .learngenes import get_kind

        trained = [m for m in methods if _is_kind(m.removesuffix(FIT)) and get_kind(m.removesuffix(FIT)).trains]
        if trained and settings.methods:
            raise UsageError(f"--budget 0 gives no training steps, and {trained[0]} needs them to condense: give "
                             f"--budget N, or leave the learngene kinds out of --methods")
        methods = [m for m in methods if m not in trained]
    if out is None and not dry_run:
        raise UsageError("give a results folder: -o DIR")
    if out is not None:
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise LgError(f"{shown(out)}: exists and is not a folder; -o takes a results folder")
        foreign = foreign_entry(out)
        if foreign is not None and not settings.force:
            raise LgError(f"{shown(out)}: holds {shown(foreign)}, which lg bench did not write; give a new or "
                          f"empty folder, or pass --force to write into it anyway (lg replaces only the files it "
                          f"names as its own there and leaves every other file as it is)")
    from .checkpoint import check_source
    from .text import check_data_source
    from .devices import auto_device_note, concrete_device

    # A mistyped path is said before torch, a device or a model is paid for.
    check_source(ancestry)
    check_data_source(data)
    device_note = auto_device_note(settings.probe.device)
    settings.probe = dataclasses.replace(settings.probe, device=concrete_device(settings.probe.device))
    from .distill import default_alpha
    from .preprocessing import overridden
    from .recipe import preprocessing_of

    loaded = overridden(load(ancestry), settings.preprocessing)
    if not settings.force:  # another ancestry's bench is another experiment, not one to resume
        check_ancestry(out, str(ancestry), loaded.checkpoint.sha256)
    # A clone at the same size is the same weights, written with their heads.
    check_heads_known(loaded.spec, because="every cell is built from them", where=loaded.checkpoint.label,
                      remedy=f"record them first: lg grow {shown(str(ancestry))} --source-heads N --depth "
                             f"{loaded.spec.depth} --method clone -o ANCESTRY (the same weights, heads recorded)")
    for depth, width in settings.sizes:  # a size no model has, not even random's, is refused before any work
        target_spec(loaded.spec, depth=depth, width=width, heads_flag=None)
    preprocessing_of(loaded, notify=notify)  # says when it is assumed
    dataset = _read_data(loaded, data, settings, notify)
    if device_note:
        notify(device_note)
    # Every cell keeps its final model's figure per test example: one seed's
    # interval is a bootstrap over them (`lgcli.intervals`).
    settings.probe = dataclasses.replace(settings.probe, keep_examples=True)
    key = reuse_key(loaded, dataset.describe(), settings, distill_alpha=default_alpha(dataset))
    context = _Context(loaded=loaded, data=dataset, data_name=data, settings=settings, out=out, key=key, notify=notify,
                       ancestry={"file": str(ancestry), "sha256": loaded.checkpoint.sha256})
    seeds = [settings.probe.seed + index for index in range(settings.seeds)]
    contexts = {seed: context.seeded(seed) for seed in seeds} if settings.seeds > 1 else {None: context}

    cells = [Cell(method, depth, width, seed) for seed in contexts for depth, width in settings.sizes
             for method in methods]
    _check_one_batch(methods, context)  # said before anything is made, as the dry run says it
    if dry_run:
        return plan([c for c in cells if c.seed == next(iter(contexts))], methods, context, seeds=settings.seeds)
    made = unmade_folders(out)
    try:
        return _run(ancestry, cells, methods, context, contexts)
    except BaseException:  # a refusal or an interrupt: the folders it made and left empty go
        remove_if_empty(made)
        raise


def _run(ancestry, cells: list[Cell], methods: list[str], context: _Context,
         contexts: dict[int | None, _Context]) -> dict[str, Any]:
    """Run the cells, each saved as it lands, and write the report and figures."""
    settings, out, notify = context.settings, context.out, context.notify
    (out / "cells").mkdir(parents=True, exist_ok=True)
    results = []
    for number, cell in enumerate(cells, 1):
        seeded = f", seed {cell.seed}" if cell.seed is not None else ""
        notify(f"bench: cell {number} of {len(cells)}: {cell.method} at {cell.depth} x {cell.width}{seeded}")
        results.append({**_run_cell(cell, contexts[cell.seed]),
                        "seed": cell.seed if cell.seed is not None else settings.probe.seed})

    report = _report(ancestry, context, methods, results, list(contexts.values()))
    for depth, width in settings.sizes:
        rows = [r["row"] for r in results if r["size"] == f"{depth}x{width}" and r.get("row")]
        if rows:
            from .report import plot_curves

            # One line and colour per method: several seeds' rows drawn as their mean (`seed_mean_rows`).
            plot_curves({"task": report["task"], "settings": report["settings"], "data": report["data"],
                         "rows": seed_mean_rows(rows)},
                        out / f"curves_{depth}x{width}.png", force=True)
    plot_summary(report, out / "summary.png")
    _write_json(out / "bench.json", report)
    return report


def _check_one_batch(methods: list[str], context: _Context) -> None:
    """Refuse a train split smaller than one batch of the probe (every cell
    trains one) or of a kind's condense run, naming the flag that sets it. (A
    learngene saved by an earlier run was condensed on these data at this
    batch, so none is saved that this refuses.)"""
    from .images import ImageData
    from .learngenes import get_kind

    settings, count = context.settings, len(context.data.train)
    unit = "images" if isinstance(context.data, ImageData) else "windows"
    kinds = [m.removesuffix(FIT) for m in methods if _is_kind(m.removesuffix(FIT))]
    for batch, flag, applies in ((settings.probe.batch_size, "--batch-size or raise --subset", True),
                                 (settings.condense_batch_size, CONDENSE_BATCH_FLAG,
                                  any(get_kind(kind).trains for kind in kinds))):
        if applies and count < batch:
            raise LgError(f"the train split has {count} {unit}, fewer than one batch of {batch} (lower {flag})")


def _read_data(loaded, data: str, settings: BenchSettings, notify: Notify):
    """The bench's data as the ancestry takes them: images numbered as its head names them, or text in its tokens."""
    import torch

    from .arch import get_adapter
    from .arch.base import IMAGE_CLASSIFICATION, TEXT_ENCODER
    from .evaluate import classifier_data
    from .heads import class_names_in
    from .images import in_models_label_order
    from .text import text_data_for

    spec, checkpoint, adapter = loaded.spec, loaded.checkpoint, get_adapter(loaded.spec.family)
    task = adapter.task(spec)
    if task == IMAGE_CLASSIFICATION:  # read as lg eval reads it (a text named is said to be one)
        images = classifier_data(data, seq_len=settings.seq_len, subset=settings.subset,
                                 test_subset=settings.test_subset, test_fraction=None, seed=settings.probe.seed)
        stated = class_names_in((spec.extras.get("config") or {}).get("id2label"))
        return in_models_label_order(images, [stated], notify)
    where = checkpoint.label
    if task == TEXT_ENCODER:
        raise LgError(f"{where} is a text encoder without a language-model head: lg bench scores image "
                      f"classifiers and causal or masked language models")
    with torch.device("meta"):  # its vocabulary and positions; no memory
        skeleton = adapter.create_model(spec)
    return text_data_for([("the ancestry", skeleton, checkpoint.companions, where)], task, data,
                         seq_len=settings.seq_len, subset=settings.subset, test_subset=settings.test_subset,
                         seed=settings.probe.seed, notify=notify)


def reuse_key(loaded, data: Mapping[str, Any], settings: BenchSettings, *, distill_alpha: float = 1.0) -> dict:
    """What every cell depends on: a saved cell is reused only when its key says the same (`_cell_key` adds its own).
    `distill_alpha` (a budget's, `default_alpha`) is named where it is not 1, lg distill's only alpha until 2026-12."""
    from .preprocessing import PREPROCESSING, default_preprocessing

    probe = {k: v for k, v in asdict(settings.probe).items() if k not in ("progress", "keep_examples")}
    key = {"ancestry": loaded.checkpoint.sha256, "data": data, "probe": probe,
           **({"budget": settings.budget} if settings.budget is not None else {}),
           **({"distill_alpha": distill_alpha} if settings.budget and distill_alpha != 1 else {})}
    recipe = loaded.spec.extras.get(PREPROCESSING)
    if recipe is not None:  # cells scored on images prepared otherwise are not reused
        key["preprocessing"] = recipe.record()
        # lg distill fed a model whose recipe is not lg's default that default
        # until 2026-11-27 (CHANGELOG): the cells it distilled are not reused.
        default = default_preprocessing(recipe.input_size, "")
        if settings.budget and dataclasses.replace(recipe, assumed=False) != default:
            key["distilled_with"] = "the model's own preprocessing"
    return key


def _cell_key(cell: Cell, context: _Context) -> str:
    # Only a fitted row depends on --fit-steps, and only a learngene's rows on
    # its kind's condense run: changing either reuses every other cell.
    fit = {"fit_steps": context.settings.fit_steps} if cell.method.endswith(FIT) else {}
    kind = cell.method.removesuffix(FIT)
    condense = {"condense": _condense_key(kind, context)} if _is_kind(kind) else {}
    text = json.dumps({**context.key, **fit, **condense, "cell": cell.name}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _is_kind(name: str) -> bool:
    from .learngenes import KINDS

    return name in KINDS


def _condense_key(kind: str, context: _Context) -> dict[str, Any]:
    from .learngenes import get_kind

    # A sampled kind (PEG) has no condense run to vary.
    return context.settings.condense_key(kind, context.loaded.spec) if get_kind(kind).trains else {"sampled": True}


def _run_cell(cell: Cell, context: _Context) -> dict[str, Any]:
    """One cell: reused from OUT/cells when its arguments match, else built,
    probed and saved at once."""
    path = _cell_path(cell, context)
    key = _cell_key(cell, context)
    saved = _saved_json(path)  # read once: reused, or compared with an n/a that may need no rewrite
    if _reusable(saved, key, context):
        context.notify(f"bench: {cell.name}: done before, reused")
        return saved
    try:
        model, stores, details, build_seconds = _build(cell, context)
    except LgError as exc:  # the method cannot reach this size: the table says why
        result = {"key": key, "ancestry": context.ancestry, "method": cell.method, "size": cell.size,
                  "status": "n/a", "reason": str(exc)}
        if saved != result:
            _write_json(path, result)
        return result
    from .evaluate import probe_row

    # A long scoring pass (a real model on a CPU) says how long, as in lg eval.
    row = probe_row(_candidate(cell, model, context), context.data, context.settings.probe, context.notify)
    result = {"key": key, "ancestry": context.ancestry, "method": cell.method, "size": cell.size, "status": "done",
              "row": row, "stores": stores, "build_seconds": round(build_seconds, 2), "details": details}
    _write_json(path, result)
    return result


def _cell_path(cell: Cell, context: _Context) -> Path:
    return context.out / "cells" / f"{cell.name}.json"


def _reusable(saved: dict[str, Any] | None, key: str, context: _Context) -> bool:
    """Whether a saved cell stands: not under --force, made with the same arguments, and done (an n/a is
    tried again: that costs a check, and an lg that has since learned to build the cell fills it)."""
    return saved is not None and not context.settings.force and saved.get("key") == key \
        and saved.get("status") != "n/a"


def _saved_json(path: Path | None) -> dict[str, Any] | None:
    """A saved cell's file, read (None: no file, or no results folder: a plan)."""
    try:
        saved = json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def _candidate(cell: Cell, model, context: _Context):
    """The cell's model as `lg eval` probes it: an image model checked
    against the data's channels and given a head for its classes."""
    from .images import check_channels
    from .evaluate import Candidate, architecture_of, fit_head
    from .preprocessing import PREPROCESSING, attach
    from .heads import model_input

    # Every cell's images are prepared as the ancestry wants them.
    attach(model, context.loaded.spec.extras.get(PREPROCESSING))
    candidate = Candidate(cell.method, model, RANDOM if cell.method == RANDOM else cell.method,
                          architecture_of(model))
    if hasattr(context.data, "num_classes"):  # images: the input the model takes, as lg eval checks it; a head
        check_channels(context.data, model_input(model)[0])
        fit_head(candidate, context.data.num_classes, context.settings.probe.seed)
    return candidate


def _build(cell: Cell, context: _Context):
    """The cell's model (a timm module), the parameters its method stores,
    what building it did, and the seconds building it took at this size (a
    learngene's: the grow and any fit, not its condense run)."""
    from .loading import build_model, create_model
    from .resize import expand
    from .sizing import target_spec

    started = time.perf_counter()
    # A size no model has: n/a. The bench has no --heads to suggest.
    target = target_spec(context.loaded.spec, depth=cell.depth, width=cell.width, heads_flag=None)
    seed = context.settings.probe.seed
    if cell.method == RANDOM:
        return create_model(target, seed=seed), 0, {"init": "timm"}, time.perf_counter() - started
    if cell.method in RESIZE_ROWS:
        spec, stack, details = RESIZE_ROWS[cell.method].build(
            context.loaded, depth=cell.depth, width=cell.width, seed=seed, data_name=context.data_name,
            calibrate_samples=context.settings.calibrate_samples, notify=context.notify)
        model = build_model(spec, stack)
        if context.settings.budget:  # equal compute: the resize healed by distillation for the budget
            model, details["distill"] = _distilled(model, context)
        return model, context.loaded.stack.num_parameters(), details, time.perf_counter() - started
    kind = cell.method.removesuffix(FIT)
    _check_kind_reaches(cell, context)  # before the condense run is paid for
    learngene = _learngene(kind, context)
    # The condense run (or loading its saved learngene) is the row's one cost shared by every size, which
    # `row_costs` adds once: timed from here, a cell's build is its own grow and fit, as the table reads.
    started = time.perf_counter()
    fitting = {}
    if cell.method.endswith(FIT):  # as `lg grow LG --data D --steps N`, on the bench's own train split
        fitting = {"data": context.data_name, "steps": context.settings.fit_steps,
                   "subset": context.settings.subset, "device": context.settings.probe.device}
    spec, stack, report = expand(learngene, depth=cell.depth, width=cell.width, seed=seed,
                                 notify=lambda message: None, **fitting)
    details = {"learngene": kind}
    if fitting:
        details["fit"] = {k: v for k, v in report["details"].items() if k in ("fitted", "steps", "lr",
                                                                              "loss_first", "loss_last")}
    # What the learngene stores, as its condense run counted it (PEG's record of
    # its draws, mix.*, is not a parameter), so every row of a kind agrees.
    return build_model(spec, stack), context.condensed[kind]["parameters"], details, time.perf_counter() - started


def _check_kind_reaches(cell: Cell, context: _Context) -> None:
    """Refuse, as `lg grow` would, a size the kind's learngene cannot build:
    asked of its unstarted learngene (the condensed one has the same shapes
    and sizes), so a kind that reaches none of the sizes is never condensed."""
    from .condense import unstarted_learngene
    from .learngenes import get_kind
    from .resize import expand_target

    kind = cell.method.removesuffix(FIT)
    if not get_kind(kind).trains:  # sampled in no time: its own learngene says
        return
    if kind not in context.unstarted:
        options = context.settings.learngene_options(kind, context.loaded.spec)
        context.unstarted[kind] = unstarted_learngene(context.loaded, kind, seed=context.settings.probe.seed,
                                                      options=options)
    try:
        expand_target(context.unstarted[kind], depth=cell.depth, width=cell.width)
    except LgError as exc:  # a width the kind could be trained at: the cell's n/a reason says how
        hint = context.settings.widths_hint(kind, context.loaded.spec, cell.width)
        if not hint:
            raise
        raise LgError(f"{exc}{hint}") from None


def _distilled(model, context: _Context):
    """`lg distill` of a cell's model from the ancestry for the bench's
    budget, on the bench's train split (the probe's batch size and seed)."""
    from .distill import DistillSettings, distill

    probe = context.settings.probe
    settings = DistillSettings(steps=context.settings.budget, batch_size=probe.batch_size, seed=probe.seed,
                               device=probe.device, progress=probe.progress)
    # The probe scores the cell: distill's own held-out figures would be passes for nothing.
    trained, report = distill(model, context.loaded, context.data, settings=settings, notify=lambda message: None,
                              score=False)
    return trained, {"steps": report["steps"], "seconds": report["seconds"], "alpha": report["options"]["alpha"],
                     "loss_first": report["loss_first"], "loss_last": report["loss_last"]}


def _learngene(kind: str, context: _Context):
    """Condense `kind` once per bench (reused from OUT/learngenes when its
    arguments match); the condense cost is recorded for the report."""
    if kind in context.learngenes:
        return context.learngenes[kind]
    from .learngene_files import load_learngene
    from .condense import CondenseSettings, condense_file

    folder = context.out / "learngenes"
    folder.mkdir(exist_ok=True)
    path, info_path, key = _learngene_paths(kind, context)
    info = {} if context.settings.force else _saved_learngene(kind, context)
    if info.get("key") != key:
        settings = context.settings
        from .learngenes import get_kind

        trained = get_kind(kind).trains
        budget = settings.condense_budget(kind)
        until = f", until {settings.condense_until:g} of the ancestry" if settings.condense_until else ""
        context.notify(f"bench: condensing a {kind} learngene "
                       f"({counted(budget, 'step') + until if trained else 'sampled, no training'})")
        condense_settings = CondenseSettings(steps=budget, batch_size=settings.condense_batch_size,
                                             batch_flag=CONDENSE_BATCH_FLAG, seed=settings.probe.seed,
                                             device=settings.probe.device, progress=settings.probe.progress,
                                             until=settings.condense_until)
        report = condense_file(context.loaded.checkpoint, path, force=True, data=context.data, method=kind,
                               options=settings.learngene_options(kind, context.loaded.spec),
                               settings=condense_settings, notify=context.notify,
                               preprocessing=settings.preprocessing)
        info = {"key": key, "ancestry": context.ancestry, "steps": report["steps"], "seconds": report["seconds"],
                "parameters": report["parameters"]["learngene"],
                # the auxiliary model's test figures: top-1 on images, loss on text
                "score": report.get("accuracy") or report.get("loss")}
        _write_json(info_path, info)
    context.condensed[kind] = {k: info[k] for k in ("steps", "seconds", "parameters", "score")}
    context.learngenes[kind] = load_learngene(path)
    return context.learngenes[kind]


def _learngene_paths(kind: str, context: _Context) -> tuple[Path, Path, str]:
    folder = context.out / "learngenes"
    key = hashlib.sha256(json.dumps({**context.key, "learngene": kind, "condense": _condense_key(kind, context)},
                                    sort_keys=True, default=str).encode()).hexdigest()
    return folder / f"{kind}{context.tag}.lg.safetensors", folder / f"{kind}{context.tag}.json", key


def _saved_learngene(kind: str, context: _Context) -> dict[str, Any]:
    """What an earlier run recorded of condensing `kind` with these arguments ({} if nothing)."""
    if context.out is None:  # a plan without a results folder
        return {}
    path, info_path, key = _learngene_paths(kind, context)
    try:
        info = json.loads(info_path.read_text()) if info_path.exists() and path.exists() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) and info.get("key") == key else {}


def _report(ancestry, context: _Context, methods: list[str], results: list[dict],
            seeded: list[_Context] | None = None) -> dict[str, Any]:
    from .arch.base import IMAGE_CLASSIFICATION
    from .evaluate import add_steps_to_baseline, measure_of
    from .learngenes import KINDS

    seeded = seeded or [context]
    for each in seeded:
        for method in methods:  # learngenes whose every cell was reused were not loaded this run
            kind = method.removesuffix(FIT)
            info = _saved_learngene(kind, each) if kind in KINDS and kind not in each.condensed else {}
            if info:
                each.condensed[kind] = {k: info[k] for k in ("steps", "seconds", "parameters", "score")}
    # The first seed's condense runs stand for the row's cost (each seed condenses its own).
    context.condensed = seeded[0].condensed

    measure = measure_of(context.data)
    for seed in dict.fromkeys(r["seed"] for r in results):
        for depth, width in context.settings.sizes:
            rows = [r["row"] for r in results if r["size"] == f"{depth}x{width}" and r.get("row") and r["seed"] == seed]
            add_steps_to_baseline(rows, measure)
    summary, verdicts = summarised(methods, context.settings.sizes, results, measure)
    spec = context.loaded.spec
    return {
        "version": BENCH_VERSION,
        "ancestry": {"file": str(ancestry), "sha256": context.loaded.checkpoint.sha256, "depth": spec.depth,
                     "width": spec.width, "heads": spec.heads, "parameters": context.loaded.stack.num_parameters()},
        "data": context.data.describe(),
        # What the cells are compared by: top-1 (higher is better) on
        # images, test loss (lower is better) on text.
        "measure": measure_of(context.data).key,
        "task": getattr(context.data, "task", IMAGE_CLASSIFICATION),
        "settings": {**context.key["probe"], "warmup": context.settings.probe.warmup_steps(),
                     **context.settings.recorded()},
        "sizes": [f"{d}x{w}" for d, w in context.settings.sizes],
        "methods": methods,
        "learngenes": context.condensed,
        "costs": row_costs(methods, [r for r in results if r["seed"] == results[0]["seed"]], context.condensed),
        "seeds": sorted(dict.fromkeys(r["seed"] for r in results)),
        "budget": context.settings.budget,
        "summary": summary,
        "verdicts": verdicts,
        "cells": [_without_examples({k: v for k, v in r.items() if k not in ("key", "ancestry")}) for r in results],
    }


def _without_examples(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell as the report keeps it: the per-example figures stay in OUT/cells."""
    if "row" not in cell or "final_examples" not in cell["row"]:
        return cell
    return {**cell, "row": {k: v for k, v in cell["row"].items() if k != "final_examples"}}


def _write_json(path: Path, obj: Any) -> None:
    from .checkpoint.atomic import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")


__all__ = ["BenchSettings", "bench", "parse_sizes", "all_methods", "RANDOM"]
