"""Shrink and grow a checkpoint without training, or build a model of any
size from a learngene: what `lg shrink` and `lg grow` do, as functions for
notebooks and scripts.

    >>> from lgcli.resize import resize, resize_file
    >>> spec, stack, report = resize("deit_b.safetensors", direction="shrink", depth=6, width=384)
    >>> report = resize_file("deit_s.safetensors", "big.safetensors", direction="grow",
    ...                      depth=12, width=768, method="clone")
"""

from __future__ import annotations

import dataclasses
import os
import time
from functools import partial
from typing import Any, BinaryIO, Callable, Mapping

from .hints import (Asked, learngene_method_refusal, learngene_pipe, mixed_change_hint, output_flags,
                    source_flags, width_kept_hint)
from .inspection import load_line
from .learngene_files import is_learngene, load_learngene
from .loading import Loaded, build_model, load
from .outputs import CheckedOutput, checked_output, plan_output
from .resize_record import calibration_record, recorded_options
from .saving import save
from .arch import get_adapter, with_layer_sources
from .budget import budget_report, budget_shape, check_budget_request
from .calibrated_shrink import (SIZE_FLAGS, calibrated_plan, calibrated_steps, calibration_passes,
                                shrink_in_two_steps, wants_calibrated_default)
from .card import CardFacts, fitting_results
from .checkpoint import STDIO, Checkpoint, read_checkpoint
from .errors import LgError, RefusedWithPipe, UsageError, notify_stderr
from .fitting import check_fit_data, fit_or_say_why_not
from .lazy import torch
from .learngenes import ExpandContext, Learngene, LearngeneKind, get_kind
from .methods import (CALIBRATED_DEFAULTS, GROW, METHODS, SHRINK, MethodContext, checked_request, default_method,
                      get_method, resolve_options, source_layers)
from .methods.calibrated import CALIBRATION_NEEDED
from .methods.stages import check_defined, run_per_stage, validate_per_stage
from .options import resolve_options as resolve_declared
from .preprocessing import PREPROCESSING, Overrides, with_preprocessing
from .sizing import (MixedChange, WidthKept, check_direction, check_heads_known, check_kv_heads_apply,
                     depths_of, keeps_width, moves_heads, peak_memory, spec_sizes, target_spec)
from .stack import ArchSpec, RoleMap, Stack, axes_and_shape
from .text import check_data_source


def resize(loaded_or_path: Loaded | str | os.PathLike, *, direction: str,
           depth: int | tuple[int, ...] | None = None,
           width: int | None = None, heads: int | None = None, mlp_dim: int | None = None,
           kv_heads: int | None = None, method: str | None = None, seed: int | None = None,
           source_heads: int | None = None, source_kv_heads: int | None = None,
           stdin: BinaryIO | None = None, max_params: float | None = None, device: str | None = None,
           params: int | None = None, memory: int | None = None, notify: Callable[[str], None] | None = None,
           measure: bool = True, **method_options: Any) -> tuple[ArchSpec, Stack, dict[str, Any]]:
    """Resize a model checkpoint to a new depth / width with a training-free
    method. Returns the target spec, the target Stack and a JSON-ready report.

    The returned stack is lazy: a role is computed when it is asked for (by
    `save`, which streams them to the file, or `stack.layers["fc1"]`), from
    the source role read from the file then, so no more than one role of
    either model is ever in memory; `stack.materialized()` holds them all.
    Report entries that come from the computation (tleg-fit's residuals) are
    filled in as roles are made.

    A Swin (a model of stages) takes `depth` per stage, or one number for
    its deepest stage, and `width` for its first stage
    (`sizing.staged_target_spec`); the method runs on each stage.

    `method_options` are the method's own (bot: wavelet, fit, qkv_axis,
    rescale; clone: insert); None means the method's default. `source_heads`
    is the source's head count when its file does not record it (or
    `source_kv_heads`, its key/value heads, which fix the head dim); a
    resize that depends on heads the file does not give is refused
    (`sizing.check_heads_known`). `device`
    (cuda) is where the transforms run; the files are read and written on
    the CPU.

    `params` (a count) or `memory` (bytes of the written weights, at the
    source's dtype) is a budget instead of sizes: a shrink picks the depth
    and width by `sizing.shape_for_budget`'s rule, and the report's
    "budget" says what it chose.

    A shrink given calibration data (`calibrate`) and no method measures
    the model on it, as `lg shrink` does (`calibrated_shrink`): block
    ablation where only the depth changes, activation importance where only
    the width, heads or MLP do. Both at once are two steps with the model
    written between them: `resize_file` runs them. `measure=False` (a
    dry run) reads and checks the calibration examples but runs no pass
    over them (block ablation's can take hours on a CPU): the stack it
    returns has the target's shapes and no tensors."""
    started = time.perf_counter()
    loaded = (loaded_or_path if isinstance(loaded_or_path, Loaded)
              else load(loaded_or_path, heads=source_heads, kv_heads=source_kv_heads, stdin=stdin))
    if wants_calibrated_default(direction, method, method_options):  # data, no method: measured on it
        steps, _ = calibrated_plan(loaded, dict(depth=depth, width=width, heads=heads, mlp_dim=mlp_dim,
                                                kv_heads=kv_heads, max_params=max_params), params, memory)
        if len(steps) > 1:  # the model is written and read back between the steps
            raise UsageError(f"a shrink of depth and width given calibration data is two steps "
                             f"({' then '.join(steps)}): lgcli.resize.resize_file runs both, or name a method")
        method = steps[0]
    if method is None and direction in (GROW, SHRINK):
        def refusal(name: str) -> str | None:  # an option the default does not take is said naming it, below
            candidate = get_method(name)
            try:
                options = resolve_options(candidate, method_options)
            except LgError:
                return None
            try:
                plan_resize(loaded, candidate, options, direction=direction, depth=depth, width=width, heads=heads,
                            mlp_dim=mlp_dim, kv_heads=kv_heads, max_params=max_params)
            except LgError as refused:
                return str(refused)
            return None

        method = default_method(direction, refusal, notify or notify_stderr)  # measured: docs/methods.md "Defaults"
    chosen, options = checked_request(method, direction, method_options)
    budget = None
    if params is not None or memory is not None:
        budget = budget_shape(loaded, direction=direction, params=params, memory=memory,
                              sizes=(depth, width, heads, mlp_dim, kv_heads))
        depth, width = budget.depth, budget.width
    source, target = plan_resize(loaded, chosen, options, direction=direction, depth=depth, width=width,
                                 heads=heads, mlp_dim=mlp_dim, kv_heads=kv_heads, max_params=max_params)
    adapter = get_adapter(source.family)
    if chosen.calibrated and not measure:  # a plan: the examples checked, one batch timed, no pass run
        from .calibration import calibration_device, planned_calibration

        model, examples, name = calibration_examples_of(loaded, options, seed)
        made = adapter.template_from_config(adapter.config(target))[1]
        details = {"calibration": planned_calibration(model, examples, name,
                                                      *calibration_passes(chosen.name, source, target, options),
                                                      calibration_device(device))}
        calibration = None
    else:
        context = MethodContext(direction=direction, seed=seed,
                                random_stack=lambda spec: adapter.random_stack(spec, seed=seed),
                                calibration=measured(loaded, options, seed, device, notify or notify_stderr)
                                if chosen.calibrated else None, notify=notify or notify_stderr)
        # auto keeps the CPU's streamed path (one role in memory at a time): a
        # resize is bound by reading and writing, and a GPU copy would hold it all.
        stack = loaded.stack if device in (None, "cpu", "auto") else on_device(loaded.stack, device)
        result = run_per_stage(chosen, stack, source, target, options, context)  # each stage of a Swin
        try:
            result.stack.check(target)
        except ValueError as exc:  # a method bug, not a user error
            raise RuntimeError(f"method {method} returned a wrongly sized stack: {exc}") from None
        made, details, calibration = result.stack, result.report, context.calibration
    report = {
        "command": direction,
        "method": method,
        "options": options,
        "seed": seed,
        "source": spec_sizes(source),
        "target": spec_sizes(target),
        "parameters": {"source": loaded.stack.num_parameters(), "target": made.num_parameters()},
        "details": details,
        **({"calibration_seconds": round(calibration.seconds, 3)} if calibration else {}),
        "seconds": round(time.perf_counter() - started, 3),
    }
    if budget is not None:
        report["budget"] = budget_report(budget)
    return with_layer_sources(target, source, source_layers(chosen, details, source, target)), made, report


def calibration_examples_of(loaded: Loaded, options: dict[str, Any], seed: int | None):
    """(the source's model, the calibration examples the options name, the
    data's name), read and checked: data of the model's kind, as many
    examples as asked."""
    from .calibration import DEFAULT_CALIBRATION_SAMPLES, calibration_examples

    if options["calibrate"] is None:
        raise UsageError(CALIBRATION_NEEDED)
    model = build_model(loaded.spec, loaded.stack)
    examples, name = calibration_examples(model, loaded.spec, options["calibrate"],
                                          samples=options["calibrate_samples"] or DEFAULT_CALIBRATION_SAMPLES,
                                          seed=seed or 0, seq_len=options["calibrate_seq_len"],
                                          companions=loaded.checkpoint.companions, where=loaded.checkpoint.label)
    return model, examples, name


def measured(loaded: Loaded, options: dict[str, Any], seed: int | None, device: str | None,
             notify: Callable[[str], None] = notify_stderr):
    """The source's statistics on the calibration data the options name
    (`lgcli.calibration`), for a data-aware method."""
    from .calibration import calibrate, calibration_device

    model, examples, name = calibration_examples_of(loaded, options, seed)
    statistics = calibrate(model, loaded.spec, examples, name=name, seed=seed or 0,
                           device=calibration_device(device))
    notify(f"calibrated on {statistics.samples} examples of {name} ({statistics.positions:,} tokens) "
                  f"in {statistics.seconds:.1f} s")
    return statistics


def on_device(stack: Stack, device: str) -> Stack:
    """The same lazy stack with each role moved to `device` as it is made:
    the methods' transforms then run there (torch ops, device-generic)."""
    try:
        where = torch.device(device)
    except (RuntimeError, ValueError):
        raise LgError(f"--device: unknown device {device!r} (cpu, cuda, cuda:N)") from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise LgError(f"--device {device}: no CUDA device is available here; leave it out to use the CPU")

    def moved(roles):
        info = {role: axes_and_shape(roles, role) for role in roles}
        return RoleMap(info, lambda role: roles[role].data.to(where))

    def moved_stack(stack: Stack) -> Stack:
        return Stack(layers=moved(stack.layers), globals=moved(stack.globals),
                     stages=tuple(moved_stack(stage) for stage in stack.stages))

    return moved_stack(stack)


def plan_resize(loaded: Loaded, chosen, options: dict[str, Any], *, direction: str, depth, width, heads=None,
                mlp_dim=None, kv_heads=None, max_params=None) -> tuple[ArchSpec, ArchSpec]:
    """(source, target) of a resize, after every check the resize makes before it computes anything."""
    source = loaded.spec
    if all(v is None for v in (depth, width, heads, mlp_dim, kv_heads)):  # its own depth rewrites it (a folder, say)
        raise UsageError(f"nothing to {direction}: give --depth, --width, --heads, --kv-heads or --mlp-dim "
                         f"(--depth {','.join(map(str, depths_of(source)))}, its own, writes it in the output's form)")
    check_kv_heads_apply(source, kv_heads, get_adapter(source.family).grouped_query)
    check_defined(chosen, source)
    check_heads_known(source, moves_heads=moves_heads(source, width, heads, kv_heads),
                      where=loaded.checkpoint.label)
    target = target_spec(source, depth=depth, width=width, heads=heads, mlp_dim=mlp_dim, kv_heads=kv_heads,
                         max_params=max_params, direction=direction)  # a size the other way: refused as such first
    check_direction(source, target, direction)
    validate_per_stage(chosen, options, source, target, direction)
    if chosen.depth_only and not keeps_width(source, target):
        raise WidthKept(chosen.name, source, target)  # resize_file adds the pipe that makes it
    return source, target


def expand(learngene: Learngene, *, depth: int | None = None, width: int | None = None,
           heads: int | None = None, mlp_dim: int | None = None, kv_heads: int | None = None, seed: int = 0,
           notify: Callable[[str], None] | None = None, max_params: float | None = None,
           **options: Any) -> tuple[ArchSpec, Stack, dict[str, Any]]:
    """Build a model of the given size from a learngene, by the learngene's
    own rule (its kind's `expand`). `options` are the kind's expand options
    (WAVE: data, steps, teacher, ...): the kind fits on data through the
    `ExpandContext` it is handed (`lgcli.fitting`). Returns the target spec,
    its Stack and a JSON-ready report."""
    started = time.perf_counter()
    notify = notify or notify_stderr
    learngene = _with_overrides(learngene, options)
    kind = get_kind(learngene.kind, learngene.spec)
    resolved, target = _kind_target(kind, learngene, depth=depth, width=width, heads=heads, mlp_dim=mlp_dim,
                                    kv_heads=kv_heads, max_params=max_params, **options)
    context = ExpandContext(seed=seed, notify=notify, fit=partial(fit_or_say_why_not, seed=seed, notify=notify))
    stack, details = kind.expand(learngene, target, resolved, context)
    try:
        stack.check(target)
    except ValueError as exc:  # a kind's bug, not a user error
        raise RuntimeError(f"learngene kind {kind.name} built a wrongly sized stack: {exc}") from None
    report = {"command": "expand", "method": kind.name, "options": resolved, "seed": seed,
              "source": {"learngene": kind.name, **spec_sizes(learngene.spec)}, "target": spec_sizes(target),
              "parameters": {"source": learngene.num_parameters(), "target": stack.num_parameters()},
              "details": details, "seconds": round(time.perf_counter() - started, 3)}
    return target, stack, report


def _with_overrides(learngene: Learngene, options: Mapping[str, Any]) -> Learngene:
    """The learngene with `--mean`, `--std`, `--interpolation` over the
    preprocessing it records: the images of --data are prepared so, and the
    descendant records it. Without --data there are no images to prepare."""
    overrides = Overrides.parse(options.get("mean"), options.get("std"), options.get("interpolation"))
    if not overrides:
        return learngene
    if options.get("data") is None:
        raise UsageError("--mean, --std and --interpolation say how the images of --data are prepared: give --data D")
    recipe = learngene.spec.extras.get(PREPROCESSING)
    if recipe is None:
        raise UsageError("--mean, --std and --interpolation are for image models; this learngene's takes tokens")
    return dataclasses.replace(learngene, spec=with_preprocessing(learngene.spec, overrides.apply(recipe)))


def expand_target(learngene: Learngene, *, depth: int | None = None, width: int | None = None,
                  heads: int | None = None, mlp_dim: int | None = None, kv_heads: int | None = None,
                  max_params: float | None = None, **options: Any) -> tuple[dict[str, Any], ArchSpec]:
    """The kind's expand options resolved, and the model a request builds
    from `learngene`, checked as `expand` checks it (before any work)."""
    return _kind_target(get_kind(learngene.kind, learngene.spec), learngene, depth=depth, width=width, heads=heads,
                        mlp_dim=mlp_dim, kv_heads=kv_heads, max_params=max_params, **options)


def _kind_target(kind: LearngeneKind, learngene: Learngene, *, depth: int | None, width: int | None,
                 heads: int | None, mlp_dim: int | None, kv_heads: int | None, max_params: float | None,
                 **options: Any) -> tuple[dict[str, Any], ArchSpec]:
    """`expand_target` for the learngene's kind, found once by the caller (`expand`)."""
    resolved = resolve_declared(f"a {kind.name} learngene", kind.expand_options, options)
    check_kv_heads_apply(learngene.spec, kv_heads, get_adapter(learngene.spec.family).grouped_query)
    if all(v is None for v in (depth, width, heads, mlp_dim)):
        raise UsageError("give the size to build: --depth (and --width where the learngene can change it)")
    depth, width, heads, mlp_dim = kind.resolve_request(learngene, depth, width, heads, mlp_dim)
    target = target_spec(learngene.spec, depth=depth, width=width, heads=heads, mlp_dim=mlp_dim,
                         kv_heads=kv_heads, max_params=max_params)
    kind.check_target(learngene, target)
    return resolved, target


def dry_run_plan(report: dict[str, Any], target: CheckedOutput, spec: ArchSpec, stack: Stack, *,
                 source: Loaded | Checkpoint, source_spec: ArchSpec, shard_size: int | None) -> dict[str, Any]:
    """What a resize or an expansion would write to the checked output, from the model's shapes alone, with the
    checks the real run makes on its output: the model's sizes and parameters, what the method decided (its
    `details`: the layer each copies, the seam), the output's form and tensor bytes, and the peak memory of
    making it one role at a time (`sizing.peak_memory`)."""
    output = target.path
    plan = plan_output(target, spec, stack, source=source, shard_size=shard_size)
    details = dict(report.get("details") or {})
    calibration = details.pop("calibration", None)  # checked, not measured
    return {"dry_run": True, **{k: report[k] for k in ("command", "method", "options", "seed", "source", "target",
                                                       "budget") if k in report},
            **({"calibration": calibration} if calibration else {}), "details": details,
            "parameters": {"source": report["parameters"]["source"], "target": stack.num_parameters()},
            "output": {"path": "<stdout>" if str(output) == STDIO else str(output), "form": plan.form(output),
                       "safetensors_files": plan.shards, "tensor_bytes": plan.tensor_bytes,
                       "dtype": str(plan.target_dtype).replace("torch.", "")},
            "peak_memory_bytes": max(peak_memory(source_spec), peak_memory(spec))}


def resize_file(source: Loaded | str | os.PathLike, output: str | os.PathLike, *, direction: str,
                force: bool = False, source_heads: int | None = None, source_kv_heads: int | None = None,
                stdin: BinaryIO | None = None,
                stdout: BinaryIO | None = None, method: str | None = None,
                notify: Callable[[str], None] | None = None, allow_nonfinite: bool = False,
                dry_run: bool = False, card: CardFacts | None = None, card_file: str | None = None,
                **kwargs: Any) -> dict[str, Any]:
    """What `lg shrink` and `lg grow` do to a file: read the source, then take
    its route, and write the result to `output` ('-' for stdout) with
    provenance chained to the source. Returns the report (with the output's
    name and sha256). The output is checked before any work.

    A model is resized by a method (`resize`), which `direction` constrains.
    A learngene builds the model by its own rule (`expand`), at any size it
    can reach: `direction` only names the command in the record, and a
    model's `method` and `source_heads` are refused (the learngene's kind is
    its method, and it records its own heads).

    `dry_run`: check and plan everything, write nothing, and return the plan
    (`dry_run_plan`) instead of the report. `card` and `card_file`: the model
    card (`lgcli.card`), as `save` takes them."""
    target = checked_output(output, force=force, card_file=card_file,
                            inputs=(source.checkpoint.source if isinstance(source, Loaded) else str(source),))
    check_data_source(kwargs.get("calibrate"), "--calibrate")  # a mistyped path, said before the model is read
    # So are a budget beside sizes and a data-aware method's options (with --calibrate alone, the defaults').
    check_budget_request(direction, kwargs.get("params"), kwargs.get("memory"),
                         tuple(kwargs.get(flag) for flag in SIZE_FLAGS))
    defaults = [*CALIBRATED_DEFAULTS.values()] if method is None and kwargs.get("calibrate") is not None else []
    for name in [method] if method in METHODS else defaults:
        if METHODS[name].calibrated and direction == SHRINK:
            checked_request(name, direction, {o.name: kwargs.get(o.name) for o in METHODS[name].options})
    checkpoint = source.checkpoint if isinstance(source, Loaded) else read_checkpoint(source, stdin=stdin)
    checkpoint.allow_nonfinite = allow_nonfinite
    if is_learngene(checkpoint):
        learngene = load_learngene(checkpoint)
        written = output_flags(force, kwargs.get("shard_size"), card_file)
        if method is not None and get_kind(learngene.kind, learngene.spec).trained_widths(learngene) is not None:
            try:
                return _expand_then_resize(learngene, target, method=method, command=direction, stdout=stdout,
                                           notify=notify or notify_stderr, dry_run=dry_run, card=card, **kwargs)
            except RefusedWithPipe as refused:  # a pipe from this learngene to this output, with the user's flags
                raise LgError(refused.complete(str(source), str(output), (), written)) from None
        if method is not None:
            raise UsageError(learngene_method_refusal(
                learngene, kwargs, built_at=lambda depth: expand_target(learngene, depth=depth)[1],
                direction=direction, method=method, src=str(source), output=str(output), written=written))
        budget = next((flag for flag in ("params", "memory") if kwargs.get(flag) is not None), None)
        if budget is not None:
            raise UsageError(f"--{budget} picks the shape of a model to shrink; a learngene builds the sizes it is "
                             f"given: --depth and --width")
        if source_heads is not None or source_kv_heads is not None:
            flag = "--source-heads" if source_heads is not None else "--source-kv-heads"
            raise UsageError(f"{flag} does not apply to a learngene: it records its own heads")
        try:
            return _expand_file(learngene, target, command=direction, stdout=stdout, notify=notify,
                                dry_run=dry_run, card=card, **kwargs)
        except RefusedWithPipe as refused:  # a pipe from this learngene to this output, with the user's flags
            raise LgError(refused.complete(str(source), str(output), (), written)) from None
    loaded = source if isinstance(source, Loaded) else load(checkpoint, heads=source_heads, kv_heads=source_kv_heads)
    shard_size = kwargs.pop("shard_size", None)
    # A hint's commands carry every flag the user gave that they need: the
    # source's to the command reading it, the output's to the one writing it
    # (a dry run's plans it: --dry-run, and no -o where none was given), each
    # method's options to the commands that run it (`hints.Asked`).
    source_options = source_flags(source_heads, source_kv_heads, allow_nonfinite)
    output_options = output_flags(force, shard_size, card_file, dry_run)
    src_text = loaded.checkpoint.source if isinstance(source, Loaded) else str(source)
    out_text = None if dry_run and str(target.path) == STDIO else str(target.path)
    asked = Asked(direction, method, kwargs, calibrated_steps, seed=kwargs.get("seed"),
                  max_params=kwargs.get("max_params"), device=kwargs.get("device"))
    try:
        if wants_calibrated_default(direction, method, kwargs):  # data and no method: lg's data-aware default
            # The target is checked as one shrink here, before any pass: the
            # hint of a refusal names this request, not a step of it.
            steps, budget = calibrated_plan(loaded, kwargs, kwargs.get("params"), kwargs.get("memory"))
            if len(steps) > 1:
                return shrink_in_two_steps(resize_file, loaded, target, stdout=stdout, notify=notify,
                                           dry_run=dry_run, card=card, budget=budget_report(budget) if budget else None,
                                           shard_size=shard_size, **kwargs)
            method = steps[0]
        # The methods' stacks are lazy: resizing computes nothing until save asks for the roles.
        spec, stack, report = resize(loaded, direction=direction, method=method, notify=notify, measure=not dry_run,
                                     **kwargs)
    except MixedChange as mixed:
        hint = mixed_change_hint(mixed.source, mixed.target, src=src_text, output=out_text, asked=asked,
                                 source_options=source_options, output_options=output_options)
        raise LgError(f"{mixed.what}; {hint}") from None
    except WidthKept as kept:
        hint = width_kept_hint(kept, src=src_text, output=out_text, source_options=source_options,
                               output_options=output_options, asked=asked)
        raise LgError(f"{kept}; {hint}") from None
    except RefusedWithPipe as refused:
        raise LgError(refused.complete(src_text, str(target.path), source_options, output_options)) from None
    if dry_run:
        return dry_run_plan(report, target, spec, stack, source=loaded, source_spec=loaded.spec,
                            shard_size=shard_size)
    report["heads_assumed"] = spec.heads_assumed
    return _written(report, target, spec, stack, method=report["method"], options=recorded_options(report),
                    source=loaded,
                    stdout=stdout, shard_size=shard_size, card=card)


def _written(report: dict[str, Any], target: CheckedOutput, spec: ArchSpec, stack: Stack,
             **save_options: Any) -> dict[str, Any]:
    """`report` once the model is saved to the checked output (`save`'s
    options): its sha256, where it went, the line that loads it and what to do next."""
    report["sha256"] = save(target, spec, stack, force=target.force, **save_options)
    report["output"] = "<stdout>" if str(target.path) == STDIO else str(target.path)
    report["load_line"] = load_line(spec, target.path)
    report.update(_next_step(spec))
    return report


def _next_step(spec: ArchSpec) -> dict[str, Any]:
    """What a user does with a written model: score it with lg eval (on
    their data, or first on lg's built-in data of its kind, which the hint
    names so that it runs as printed), or, for a family lg does not train,
    fine-tune it in its library."""
    from .arch.base import IMAGE_CLASSIFICATION
    from .data import DEFAULT_DATA, FASHION_MNIST_CLASSES
    from . import pace
    from .text import KJV_MINI

    adapter = get_adapter(spec.family)
    step = {"scored_by_lg": adapter.scored_by_lg(spec), "fine_tune": adapter.fine_tune}
    if step["scored_by_lg"]:
        image = adapter.task(spec) == IMAGE_CLASSIFICATION
        step["try_data"] = DEFAULT_DATA if image else KJV_MINI
        if image and not torch.cuda.is_available():  # lg eval probes on the CPU: a real model's probe is long
            _, height, width = adapter.input_size(spec)
            work = adapter.parameter_count(spec) * height * width
            step["cpu_probe"] = {"slow": pace.probe_seconds(work) > pace.SLOW_PROBE_SECONDS,
                                 "as_it_is": adapter.num_classes(spec) == len(FASHION_MNIST_CLASSES)}
    return step


def _expand_file(learngene: Learngene, target: CheckedOutput, *, command: str,
                 stdout: BinaryIO | None, notify: Callable[[str], None] | None, seed: int | None = None,
                 shard_size: int | None = None, dry_run: bool = False, card: CardFacts | None = None,
                 **size_and_options: Any) -> dict[str, Any]:
    """`expand`, then write the descendant; the file records `command` (grow
    or shrink: what was typed) with the kind's options and the seed. A dry
    run plans the descendant from its sizes (a meta-device stack of the
    family's shapes) and neither builds nor fits it."""
    seed = 0 if seed is None else seed
    if dry_run:
        resolved, built = expand_target(learngene, **size_and_options)
        check_fit_data(learngene, resolved)  # the run's refusals of --data, none read
        shapes = get_adapter(built.family).template_from_config(get_adapter(built.family).config(built))[1]
        report = {"command": command, "method": learngene.kind, "options": resolved, "seed": seed,
                  "source": {"learngene": learngene.kind, **spec_sizes(learngene.spec)}, "target": spec_sizes(built),
                  "parameters": {"source": learngene.num_parameters()}}
        return dry_run_plan(report, target, built, shapes, source=learngene.checkpoint, source_spec=learngene.spec,
                            shard_size=shard_size)
    spec, stack, report = expand(learngene, seed=seed, notify=notify, **size_and_options)
    report["command"] = command
    recorded = {"direction": command, **{k: v for k, v in report["options"].items() if v is not None}}
    if report["seed"] is not None:
        recorded["seed"] = report["seed"]
    facts = CardFacts(command=card.command if card else None,
                      results=(*(card.results if card else ()), *fitting_results(report["details"])))
    return _written(report, target, spec, stack, method=learngene.kind, options=recorded,
                    source=learngene.checkpoint, stdout=stdout, shard_size=shard_size, card=facts)


def _expand_then_resize(learngene: Learngene, target: CheckedOutput, *, method: str, command: str,
                        stdout: BinaryIO | None, notify: Callable[[str], None], dry_run: bool,
                        card: CardFacts | None, seed: int | None = None,
                        shard_size: int | None = None, depth: int | None = None, width: int | None = None,
                        heads: int | None = None, mlp_dim: int | None = None, kv_heads: int | None = None,
                        max_params: float | None = None, **options: Any) -> dict[str, Any]:
    """`lg grow LG --width W --method M` for a learngene trained at some
    widths (`kind.trained_widths`): W is not one of them (a trained width is
    built by the learngene's own rule, and M is refused), so the nearest
    trained width is built at the target depth (`widths.nearest_trained`),
    then resized to W by M. A kind that builds only its trained depths
    (`kind.trained_depths`: LeTs) starts from the nearest trained depth
    too, and M resizes depth and width together. The file records both steps."""
    from .learngenes.widths import nearest_trained, nearest_trained_size

    kind = get_kind(learngene.kind, learngene.spec)
    declared = {option.name for option in kind.expand_options}
    kind_options = {k: v for k, v in options.items() if k in declared}
    method_options = {k: v for k, v in options.items() if k not in declared}
    if all(v is None for v in (depth, width, heads, mlp_dim)):
        raise UsageError("give the size to build: --depth and --width")
    asked_depth, asked_width, asked_heads, asked_mlp = kind.resolve_request(learngene, depth, width, heads, mlp_dim)
    asked = target_spec(learngene.spec, depth=asked_depth, width=asked_width, heads=asked_heads, mlp_dim=asked_mlp,
                        kv_heads=kv_heads, max_params=max_params)
    try:
        kind.check_target(learngene, asked)
    except LgError:
        pass
    else:  # a width it was trained at: its own rule builds it, and a method has nothing to do
        size = f"width {asked.width}" if kind.trained_depths(learngene) is None else \
            f"depth {asked.depth}, width {asked.width}"
        raise UsageError(f"{size} is one the {kind.name} learngene was trained at, built by its own "
                         f"rule: --method does not apply (drop it)")
    # A kind that builds only its trained depths (LeTs) starts from a trained depth too, and M resizes both.
    depths = kind.trained_depths(learngene)
    if depths is None:
        start, start_depth = nearest_trained(kind.trained_widths(learngene), asked.width), asked.depth
    else:
        nearest = nearest_trained_size(kind.trained_widths(learngene), depths, asked.width, asked.depth)
        if nearest is None:
            raise UsageError(f"depth {asked.depth}, width {asked.width} is reached from the {kind.name} learngene's "
                             f"trained sizes only by a grow of one and a shrink of the other: build a trained size, "
                             f"then shrink and grow it in two steps (lg grow LG --depth D --width W -o - | lg shrink "
                             f"- ... -o - | lg grow - ... -o OUT)")
        start, start_depth = nearest
    direction = SHRINK if (start, start_depth) > (asked.width, asked.depth) else GROW
    chosen = get_method(method)
    if direction not in chosen.directions:
        raise UsageError(f"depth {asked.depth}, width {asked.width} is reached from the trained depth {start_depth}, "
                         f"width {start} by a {direction}; method '{method}' cannot {direction} (methods that can: "
                         f"{', '.join(n for n, m in METHODS.items() if direction in m.directions)})")
    built = dict(depth=start_depth, width=start, kv_heads=kv_heads, max_params=max_params)
    resize_to = dict(width=width if width is not None else asked.width, heads=heads, mlp_dim=mlp_dim,
                     kv_heads=kv_heads, max_params=max_params)
    if start_depth != asked.depth:
        resize_to["depth"] = asked.depth
    _, first = expand_target(learngene, **built, **kind_options)  # every check of both steps, before any work
    placeholder = Loaded(first, get_adapter(first.family).template_from_config(
        get_adapter(first.family).config(first))[1], learngene.checkpoint)
    try:
        source, resized = plan_resize(placeholder, chosen, resolve_options(chosen, method_options),
                                      direction=direction, **{"depth": None, **resize_to})
    except MixedChange as mixed:  # what --method cannot do alone: the trained size, then a shrink and a grow
        pipe = learngene_pipe(first, mixed.target, build=f"--depth {start_depth} --width {start}",
                              direction=direction, method=method)
        reason = (f"depth {asked.depth}, width {asked.width} is reached from the trained depth {start_depth}, width "
                  f"{start} only by a shrink and a grow ({mixed.what})")
        if pipe is None:
            raise LgError(f"{reason}, and no pipe of the two reaches it") from None
        raise RefusedWithPipe(f"{reason}: ", pipe) from None
    if dry_run:
        report = {"command": command, "method": f"{learngene.kind}+{method}", "options": method_options,
                  "seed": seed, "source": {"learngene": learngene.kind, **spec_sizes(learngene.spec)},
                  "target": spec_sizes(resized), "parameters": {"source": learngene.num_parameters()}}
        shapes = get_adapter(resized.family).template_from_config(get_adapter(resized.family).config(resized))[1]
        return dry_run_plan(report, target, resized, shapes, source=learngene.checkpoint,
                            source_spec=learngene.spec, shard_size=shard_size)
    first, first_stack, first_report = expand(learngene, seed=seed or 0, notify=notify, **built, **kind_options)
    spec, stack, report = resize(Loaded(first, first_stack, learngene.checkpoint), direction=direction,
                                 method=method, seed=seed, **resize_to, **method_options)
    notify(f"built width {start} (trained) from the {kind.name} learngene at depth {first.depth}, then "
           f"{direction} to depth {spec.depth}, width {spec.width} by {method}")
    recorded = {"direction": command, "trained_width": start, "width_method": method,
                **({"trained_depth": start_depth} if start_depth != asked.depth else {}),
                **{k: v for k, v in report["options"].items() if v is not None}, "seed": seed or 0}
    if chosen.calibrated:  # what the statistics chose, as a resize of a model records it
        recorded.update(calibration_record(report))
    report.update({"command": command, "source": {"learngene": learngene.kind, **spec_sizes(learngene.spec)},
                   "built": {"width": start, "details": first_report["details"]}})
    return _written(report, target, spec, stack, method=learngene.kind, options=recorded,
                    source=learngene.checkpoint, stdout=stdout, shard_size=shard_size, card=card)
