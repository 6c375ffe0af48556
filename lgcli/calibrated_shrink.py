"""`lg shrink --calibrate DATA` without `--method`: the data-aware shrink
lg measured best, in one command.

Given calibration data and no method, a shrink measures the model on it
(docs/methods.md "Without `--method`"):

- the depth by block ablation (the blocks whose removal changes the
  model's output least): on SmolLM2-135M 30 -> 20 the only choice that
  keeps a language model (held-out perplexity 69.3 against 3.3 x 10^8 for
  weight selection), and on the real DINOv2-S 12 -> 6, distilled after it,
  tied with weight selection (above it on the means at 300 steps, under
  at 1,500);
- the width by activation importance (the MLP neurons, heads and embedding
  channels most active on the data): on SmolLM2 576 -> 384 three times
  better than weight selection after the same 300 distillation steps, and
  on the real DINOv2-S at or above it on the means at every budget measured;
- both in turn when both change, as the pipe
  `lg shrink SRC --depth D --method block-ablation --calibrate DATA -o - |
  lg shrink - --width W --method activation --calibrate DATA -o OUT` does:
  activation importance alone keeps the first blocks, which breaks a
  language model's depth. The step between stays in memory, and the
  output's provenance records both steps, as the pipe's does, the step
  between named `<in memory>` (the pipe's says `<stdin>`).

Without data the default stays weight selection (`methods.DEFAULT_METHODS`).
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, BinaryIO, Callable

from .budget import budget_shape
from .loading import Loaded
from .methods import CALIBRATED_DEFAULTS, SHRINK
from .sizing import check_direction, depths_of, keeps_width, spec_sizes, target_spec
from .stack import ArchSpec

DEPTH_METHOD, WIDTH_METHOD = CALIBRATED_DEFAULTS["depth"], CALIBRATED_DEFAULTS["width"]
# lg bench's row for this shrink (`--methods block-ablation+activation`).
BENCH_ROW = f"{DEPTH_METHOD}+{WIDTH_METHOD}"
SIZE_FLAGS = ("depth", "width", "heads", "mlp_dim", "kv_heads")
# Options only the depth step's method takes (the width step would refuse them).
DEPTH_ONLY_OPTIONS = ("ablation",)


def calibrated_steps(source: ArchSpec, target: ArchSpec) -> tuple[str, ...]:
    """The methods, in order, that shrink `source` to `target` by what the
    model computes: block ablation where the depth changes, activation
    importance where the width, heads or MLP do, both when both do."""
    depth_changes = depths_of(source) != depths_of(target)
    width_changes = not keeps_width(source, target)
    if depth_changes and width_changes:
        return DEPTH_METHOD, WIDTH_METHOD
    return (WIDTH_METHOD,) if width_changes else (DEPTH_METHOD,)


def wants_calibrated_default(direction: str, method: str | None, options: dict[str, Any]) -> bool:
    """Whether a resize is a shrink given calibration data and no method."""
    return direction == SHRINK and method is None and options.get("calibrate") is not None


def calibrated_target(source: ArchSpec, options: dict[str, Any], budget=None) -> ArchSpec:
    """The size a calibrated shrink makes: the sizes asked, or the shape a
    `--params`/`--memory` budget chose (`budget.budget_shape`)."""
    sizes = {flag: options.get(flag) for flag in SIZE_FLAGS}
    if budget is not None:
        sizes.update(depth=budget.depth, width=budget.width)
    if all(v is None for v in sizes.values()):
        return source  # nothing asked: the resize says so in its own words
    return target_spec(source, **sizes, max_params=options.get("max_params"), direction=SHRINK)


def calibrated_plan(loaded: Loaded, sizes: dict[str, Any], params: int | None, memory: int | None):
    """A shrink given calibration data and no method: the methods it runs
    in turn (`calibrated_steps`) for the `sizes` asked
    (SIZE_FLAGS and max_params) or the budget's shape, and that shape.
    A target no shrink reaches (a larger axis) is refused here as one
    shrink (`sizing.MixedChange`, whose hint the caller writes), before a
    step measures anything: its first step would run, then its second refuse."""
    budget = (budget_shape(loaded, direction=SHRINK, params=params, memory=memory,
                           sizes=tuple(sizes.get(flag) for flag in SIZE_FLAGS))
              if params is not None or memory is not None else None)
    target = calibrated_target(loaded.spec, sizes, budget)
    check_direction(loaded.spec, target, SHRINK)
    return calibrated_steps(loaded.spec, target), budget


def shrink_in_two_steps(resize_step: Callable[..., dict[str, Any]], loaded, target, *, stdout: BinaryIO | None,
                        notify: Callable[[str], None] | None, dry_run: bool, card, budget: dict[str, Any] | None,
                        **options: Any) -> dict[str, Any]:
    """Block ablation to the target depth (the width kept), then activation
    importance to the target width, the model between held in memory; the
    output (a `CheckedOutput`) is written by the second step. Each step is
    `resize_step` (`resize.resize_file`, which calls this: passed in, so
    this module stays below it). `budget`: what a `--params`/`--memory`
    budget chose (`budget.budget_report`), its shape already in `options`'
    sizes. Returns the second step's report told as one shrink: the
    source's sizes, the two methods and what each chose (`steps`)."""
    from .checkpoint import STDIO
    from .checkpoint.names import IN_MEMORY
    from .checkpoint.reading import read_stream
    from .loading import load

    options = {k: v for k, v in options.items() if k not in ("params", "memory")}
    if budget is not None:
        options.update(depth=budget["depth"], width=budget["width"])
    width_options = {k: v for k, v in options.items() if k not in DEPTH_ONLY_OPTIONS}
    # The same sizes and files as the two steps; activation's plan stands for
    # both. A run makes it too, before the first pass: what the second step
    # would refuse is said before the first one's measuring, not after.
    plan = resize_step(loaded, target, direction=SHRINK, method=WIDTH_METHOD, notify=notify, dry_run=True,
                       card=card, **width_options)
    if dry_run:
        return _told_as_one(_with_depth_passes(plan, loaded.spec, options), loaded, None, budget)
    depth_options = {**{k: v for k, v in options.items() if k != "shard_size"},  # the step between is a stream
                     **{flag: None for flag in SIZE_FLAGS if flag != "depth"}}
    between = io.BytesIO()
    first = resize_step(loaded, STDIO, direction=SHRINK, method=DEPTH_METHOD, notify=notify, stdout=between,
                        **depth_options)
    between.seek(0)
    # The step between is named for what it is, not a <stdin> nobody piped
    # (the card names the source it came from: `card.named_source`). Its
    # record is the pipe's otherwise: each step's method, options, source sha256.
    middle = load(read_stream(between, IN_MEMORY))
    # What a stream cannot carry is the source's form: a timm model read from
    # a hub folder is written as one again (its config.json, which a pipe
    # drops). The extras the step between lacks are those; its own stand.
    extras = {**{k: v for k, v in loaded.spec.extras.items() if k not in middle.spec.extras}, **middle.spec.extras}
    middle = dataclasses.replace(middle, spec=dataclasses.replace(middle.spec, extras=extras))
    # The first step made the depth; asked again of the model between, a Swin's one number (its deepest
    # stage's depth, `sizing.stage_depths`) would be read against that model's stages, whose deepest may
    # be another stage (2,2 -> 2,1: depth 1 read again gives 1,1). The pipe's second command asks no depth.
    second = resize_step(middle, target, direction=SHRINK, method=WIDTH_METHOD, notify=notify, stdout=stdout,
                         card=card, **{**width_options, "depth": None})
    return _told_as_one(second, loaded, first, budget)


def shrunk_in_memory(resize_step: Callable[..., dict[str, Any]], loaded, notify: Callable[[str], None],
                     **options: Any):
    """The model `lg shrink --calibrate DATA` (no --method) writes for
    `options` (sizes, calibration, seed), read back from memory as written:
    (spec, stack, report). `resize_step` is `resize.resize_file`."""
    from .checkpoint import STDIO, read_checkpoint
    from .loading import load

    written = io.BytesIO()
    report = resize_step(loaded, STDIO, direction=SHRINK, stdout=written, notify=notify, **options)
    written.seek(0)
    shrunk = load(read_checkpoint(STDIO, stdin=written))
    return shrunk.spec, shrunk.stack, report


def calibration_passes(method: str | None, source: ArchSpec, target: ArchSpec,
                       options: dict[str, Any]) -> tuple[int, int]:
    """(passes over the calibration examples, those of them with blocks
    skipped) that a data-aware shrink of `source` to `target` runs, for a
    dry run's estimate: per step (`method`'s one, or without a method
    `calibrated_steps`'), the pass that gathers the statistics and the
    method's `extra_passes` (block ablation's). lg bench counts its
    data-aware cells' passes with this too (`lgcli.bench_plan`)."""
    from .methods import get_method

    steps = (method,) if method is not None else calibrated_steps(source, target)
    skipping = sum(get_method(name).extra_passes(source, target, options)
                   for name in steps if get_method(name).extra_passes)
    return len(steps) + skipping, skipping


def _with_depth_passes(plan: dict[str, Any], source: ArchSpec, options: dict[str, Any]) -> dict[str, Any]:
    """The width step's plan with the depth step's passes added to its
    calibration estimate: block ablation's statistics pass and its passes
    with blocks skipped, each timed as one of the whole source (an upper bound)."""
    calibration = dict(plan["calibration"])
    passes, skipping = calibration_passes(DEPTH_METHOD, source, calibrated_target(source, options), options)
    calibration["passes"] += passes
    calibration["passes_skipping_blocks"] += skipping
    calibration["estimated_seconds"] = round(calibration["pass_seconds"] * calibration["passes"], 1)
    return {**plan, "calibration": calibration}


def _told_as_one(report: dict[str, Any], loaded, first: dict[str, Any] | None,
                 budget: dict[str, Any] | None) -> dict[str, Any]:
    """The second step's report as the whole shrink's."""
    steps = [{"method": DEPTH_METHOD, **({"details": first["details"], "target": first["target"],
                                          "seconds": first["seconds"]} if first else {})},
             {"method": WIDTH_METHOD, "details": report.get("details"), "target": report["target"],
              **({"seconds": report["seconds"]} if "seconds" in report else {})}]
    told = {**report, "method": f"{DEPTH_METHOD}, then {WIDTH_METHOD}", "steps": steps,
            "source": spec_sizes(loaded.spec)}
    told["parameters"] = {**report.get("parameters", {}), "source": loaded.stack.num_parameters()}
    if first is not None:
        told["seconds"] = round(first["seconds"] + report.get("seconds", 0.0), 3)
    if budget is not None:
        told["budget"] = budget
    return told


__all__ = ["BENCH_ROW", "DEPTH_METHOD", "SIZE_FLAGS", "WIDTH_METHOD", "calibrated_plan", "calibrated_steps",
           "calibrated_target", "calibration_passes", "shrink_in_two_steps", "shrunk_in_memory",
           "wants_calibrated_default"]
