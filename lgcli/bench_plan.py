"""What `lg bench --dry-run` reports: the cells still to run and what they
will cost, without running any of them.

A module of its own so that `lgcli.bench` stays under lgcli's 600 lines a
module (tests/test_layers.py), split from it when the plan learned to count the data-aware resize rows'
calibration passes: a greedy block ablation is many passes of the whole
ancestry over the calibration examples, minutes where the training steps
are seconds, and the plan said "about 0 s" for it. The passes are counted
as `lg shrink --calibrate --dry-run` counts them
(`calibrated_shrink.calibration_passes`), and timed as it times them
(`calibration.planned_calibration`: one batch, once for the whole bench,
since every cell calibrates the same ancestry on the same examples).

The plan reads the cells' keys, builds and candidates from `lgcli.bench`
(the same layer), imported where they are used.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .bench_rows import RESIZE_ROWS
from .bench_settings import CONDENSE_BATCH_FLAG, FIT, RANDOM, Cell
from .errors import LgError

if TYPE_CHECKING:
    from .bench import _Context


def plan(cells: list[Cell], methods: list[str], context: "_Context", seeds: int = 1) -> dict[str, Any]:
    """The plan of a bench of `cells` (the first seed's; every seed runs the
    same cells, `_seeded`): the cells (those an earlier run saved are
    reused, looked up seed by seed as the run looks them up), the training
    steps still to run, and their time, from a few timed steps of each
    size's random model (the probe; a fitting is counted at the probe's
    rate) and of each learngene kind's condense run (one a seed whose
    learngene is not saved), and the data-aware resize cells' passes over
    their calibration examples (`calibration`)."""
    from .bench import _build, _candidate, _cell_key, _cell_path, _is_kind, _reusable, _saved_json, _saved_learngene
    from .condense import CondenseSettings, condense
    from .evaluate import probe_config
    from .learngenes import get_kind
    from .train import seconds_per_step

    settings, probe = context.settings, context.settings.probe
    every, contexts = _seeded(cells, context, seeds)
    # Each seed's own cells: a seed whose cells are gone, or a seed added
    # since, runs its cells though another seed's are saved.
    pending = [cell for cell in every
               if not _reusable(_saved_json(_cell_path(cell, contexts[cell.seed]) if context.out else None),
                                _cell_key(cell, contexts[cell.seed]), contexts[cell.seed])]
    # A method that cannot reach a size is n/a in the run, at no cost: found
    # by the checks a resize makes first, or a kind's on its unstarted learngene.
    unreachable = [cell for cell in pending if _unreachable(cell, contexts[cell.seed])]
    to_run = [cell for cell in pending if cell not in unreachable]
    calibration, refused = _calibration(to_run, context)
    unreachable += refused  # calibration data the resize refuses: n/a in the run too, before any pass
    to_run = [cell for cell in to_run if cell not in refused]
    per_size: dict[str, dict[str, Any]] = {}
    for depth, width in settings.sizes:
        cell = Cell(RANDOM, depth, width)
        # A fit, and with a budget a resize's distillation, counted at the probe's rate.
        steps = sum(probe.steps * len(probe.rates()) + (settings.fit_steps if c.method.endswith(FIT) else 0)
                    + (settings.budget or 0 if c.method in RESIZE_ROWS else 0)
                    for c in to_run if c.size == cell.size)
        if not steps:
            per_size[cell.size] = {"steps": 0, "seconds_per_step": 0.0, "batch_size": probe.batch_size}
            continue
        model = _build(cell, context)[0]
        candidate = _candidate(cell, model, context)
        per_step, _ = seconds_per_step(candidate.model, context.data.train,
                                       probe_config(probe, probe.rates()[0], cell.name))
        per_size[cell.size] = {"steps": steps, "seconds_per_step": per_step, "batch_size": probe.batch_size}
    # A seed condenses its own learngene of a kind when one of its cells of
    # the kind runs and no learngene of its seed is saved (`bench._learngene`;
    # --force condenses it again). Timed once a kind: every seed's run is alike.
    runs: dict[str, int] = {}  # kind: the seeds that condense it
    for seed, kind in dict.fromkeys((cell.seed, cell.method.removesuffix(FIT)) for cell in to_run):
        if _is_kind(kind) and get_kind(kind).trains and (settings.force or not _saved_learngene(kind, contexts[seed])):
            runs[kind] = runs.get(kind, 0) + 1
    condensing: dict[str, dict[str, Any]] = {}
    for kind, count in runs.items():
        budget = settings.condense_budget(kind)
        _, _, timed = condense(context.loaded.checkpoint, context.data, method=kind, dry_run=True,
                               options=settings.learngene_options(kind, context.loaded.spec),
                               notify=lambda message: None, preprocessing=settings.preprocessing,
                               settings=CondenseSettings(steps=budget, batch_size=settings.condense_batch_size,
                                                         batch_flag=CONDENSE_BATCH_FLAG, seed=probe.seed,
                                                         device=probe.device, progress=False))
        condensing[kind] = {"steps": budget * count, "runs": count, "seconds_per_step": timed["seconds_per_step"],
                            "batch_size": settings.condense_batch_size}
    parts = [*per_size.values(), *condensing.values()]
    # Every count is of every seed's cells and condense runs: what the run does.
    training = sum(part["steps"] * part["seconds_per_step"] for part in parts)
    return {"dry_run": True, "command": "bench", "sizes": [f"{d}x{w}" for d, w in settings.sizes],
            "methods": methods, "seeds": seeds, "budget": settings.budget, "cells": len(every),
            "cells_to_run": len(to_run), "cells_reused": len(every) - len(pending),
            "cells_not_applicable": len(unreachable), "probe": per_size, "condense": condensing,
            **({"calibration": calibration} if calibration else {}),
            "steps": sum(part["steps"] for part in parts), "device": probe.device,
            "estimated_seconds": training + (calibration["estimated_seconds"] if calibration else 0.0)}


def _seeded(cells: list[Cell], context: "_Context", seeds: int) -> tuple[list[Cell], dict[int | None, "_Context"]]:
    """Every seed's cells, and each seed's context, as `bench.bench` makes
    them for the run: one seed, the cells as given (no seed in their
    names); K seeds, the first seed's cells again for each of SEED..SEED+K-1."""
    if seeds == 1:
        return cells, {None: context}
    first = context.settings.probe.seed
    contexts = {first + index: context.seeded(first + index) for index in range(seeds)}
    return [dataclasses.replace(cell, seed=seed) for seed in contexts for cell in cells], contexts


def _calibration(to_run: list[Cell], context: "_Context") -> tuple[dict[str, Any] | None, list[Cell]]:
    """The data-aware resize cells' calibration, as `lg shrink --calibrate
    --dry-run` plans one: the examples read and checked (once: every cell
    calibrates the ancestry on the same examples), each cell's passes over
    them counted by the shrink's own rule, and one batch timed, once, for
    all of them (`calibration.planned_calibration`); the passes are those
    of every seed's cells to run (each seed's cells calibrate anew, and a
    seed's saved cells not at all), `cells` one cell's of each method and
    size, and `cells_to_run` the cells that calibrate. Where the examples are
    refused (fewer than --calibrate-samples), (None, the cells): each is
    n/a in the run, in those words, before any pass."""
    from .calibrated_shrink import calibration_passes
    from .calibration import calibration_device, planned_calibration
    from .methods import get_method, resolve_options
    from .resize import calibration_examples_of
    from .sizing import target_spec

    loaded, settings = context.loaded, context.settings
    calibrated = [cell for cell in to_run if cell.method in RESIZE_ROWS and RESIZE_ROWS[cell.method].calibrated]
    if not calibrated:
        return None, []
    given = {"calibrate": context.data_name, "calibrate_samples": settings.calibrate_samples}
    counts: dict[str, dict[str, int]] = {}
    passes = skipping = 0
    for cell in calibrated:  # the options a row's resize takes (a row without a method: its width step's)
        row = RESIZE_ROWS[cell.method]
        options = resolve_options(get_method(row.reach_method), given)  # the calibration's are every row's
        target = target_spec(loaded.spec, depth=cell.depth, width=cell.width, heads_flag=None)
        cell_passes, cell_skipping = calibration_passes(row.method, loaded.spec, target, options)
        counts[f"{cell.method}@{cell.size}"] = {"passes": cell_passes, "passes_skipping_blocks": cell_skipping}
        passes, skipping = passes + cell_passes, skipping + cell_skipping
    try:
        model, examples, name = calibration_examples_of(loaded, options, settings.probe.seed)
    except LgError:
        return None, calibrated
    # The bench's resizes calibrate where `lg shrink` does without --device (a GPU when there is one).
    timed = planned_calibration(model, examples, name, passes, skipping, calibration_device(None))
    return {**timed, "cells": counts, "cells_to_run": len(calibrated)}, []


def _unreachable(cell: Cell, context: "_Context") -> str | None:
    """Why a cell is n/a (what `bench._build` would raise), or None."""
    from .bench import _check_kind_reaches, _is_kind

    if _is_kind(cell.method.removesuffix(FIT)):
        try:
            _check_kind_reaches(cell, context)
        except LgError as exc:
            return str(exc)
        return None
    row = RESIZE_ROWS.get(cell.method)
    return row.unreachable(context.loaded, cell.depth, cell.width) if row else None


__all__ = ["plan"]
