"""The shell text of the hints lg prints: the `lg shrink ... | lg grow ...`
commands that make what one command cannot, with every flag the user gave
that they need. Made here, in one place, from the sizes `lgcli.sizing`
reaches and checks; each hint runs as printed (tests run them)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from .errors import LgError
from .methods import DEFAULT_METHODS, FALLBACK_METHODS, METHODS, get_method, resolve_options
from .methods.common import GROW, SHRINK
from .methods.stages import validate_per_stage
from .options import DEFAULT_SHARD_SIZE, Option, parse_byte_size
from .sizing import WidthKept, at_depths_of, check_direction, depths_of, divisors, target_spec
from .stack import ArchSpec

# The flags of one command of a hint, from (that command, the spec it reads, the spec it makes).
StepFlags = Callable[[str, ArchSpec, ArchSpec], tuple[str, ...]]


def source_flags(source_heads: int | None, source_kv_heads: int | None, allow_nonfinite: bool) -> tuple[str, ...]:
    """The flags about the source a user gave, for the command of a hint that reads it."""
    return ((f"--source-heads {source_heads}",) if source_heads is not None else ()) + \
        ((f"--source-kv-heads {source_kv_heads}",) if source_kv_heads is not None else ()) + \
        (("--allow-nonfinite",) if allow_nonfinite else ())


def output_flags(force: bool, shard_size: int | None, card_file: str | None, dry_run: bool = False) -> tuple[str, ...]:
    """The flags about the output a user gave, for the command of a hint that
    writes it; a dry run's hint plans it too (`--dry-run`), writing nothing."""
    shard_flag = shard_size is not None and shard_size != parse_byte_size(DEFAULT_SHARD_SIZE, "--shard-size")
    return (("--force",) if force else ()) + ((f"--shard-size {shard_size}",) if shard_flag else ()) + \
        ((f"--card {shlex.quote(str(card_file))}",) if card_file is not None else ()) + \
        (("--dry-run",) if dry_run else ())


def option_flag(option: Option, value: Any) -> str:
    """A declared option's value as the command line gives it."""
    if option.type is bool:
        return option.flag if value else "--no-" + option.flag[2:]
    return f"{option.flag} {shlex.quote(str(value))}"


@dataclass(frozen=True)
class Asked:
    """What a user asked of `lg shrink` or `lg grow`, for the commands of a
    hint: each gets `--method` where it names one, and every option the user
    gave that the method(s) it runs declare (--wavelet to bot, --calibrate
    and its companions to a data-aware method); `every_step` (--seed,
    --max-params, --device) goes to each, and each step's sizes are checked
    under that --max-params (`mixed_change_pipe`). The command of the user's
    direction runs their method: the one named, or, for a shrink given
    --calibrate and no --method, lg's data-aware default, whose methods
    `calibrated_steps(start, reached)` names (`calibrated_shrink`'s, above
    this module: the caller hands it in); the other command runs its own
    default, or the method the hint picks (`replace(asked, method=...)`)."""
    direction: str
    method: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # by name; None: not given
    calibrated_steps: Callable[[ArchSpec, ArchSpec], tuple[str, ...]] | None = None
    seed: int | None = None
    max_params: float | None = None
    device: str | None = None

    @property
    def every_step(self) -> tuple[str, ...]:
        """The flags every command of a hint takes and may need: a seed other
        than the default 0 (a grow may fall back to a random method), the
        --max-params that admits a large model, the device."""
        return ((f"--seed {self.seed}",) if self.seed else ()) + \
            ((f"--max-params {self.max_params:g}",) if self.max_params is not None else ()) + \
            ((f"--device {shlex.quote(self.device)}",) if self.device is not None else ())

    def flags(self, command: str, start: ArchSpec, reached: ArchSpec) -> tuple[str, ...]:
        """The flags of the hint's `command` that turns `start` into `reached`."""
        method = self.method if command == self.direction else None
        if method is not None:
            runs, named = (method,), (f"--method {method}",)
        elif command == SHRINK and self.calibrated_steps is not None and self.options.get("calibrate") is not None:
            runs, named = self.calibrated_steps(start, reached), ()
        else:  # the command's default, or the method it falls back on
            runs, named = tuple(m for m in (DEFAULT_METHODS[command], FALLBACK_METHODS.get(command)) if m), ()
        declared = {option.name: option for name in runs for option in get_method(name).options}
        return (*named, *self.every_step, *(option_flag(declared[name], value) for name, value in self.options.items()
                                             if value is not None and name in declared))


def _step_flags(options: Mapping[str, tuple[str, ...]] | Asked | None) -> StepFlags:
    """`mixed_change_pipe`'s options as a function: a mapping gives each command's own flags as they are."""
    if isinstance(options, Asked):
        return options.flags
    given = options or {}
    return lambda command, start, reached: tuple(given.get(command, ()))


def _out(output: str | None) -> str:
    """The output clause of a hint's last command: none for a plan (a dry run without -o writes nothing)."""
    return "" if output is None else f" -o {shlex.quote(output)}"


def depth_then_width_pipe(refused: WidthKept, *, src: str, output: str | None, width_method: str | None,
                          source_options: tuple[str, ...] = (), output_options: tuple[str, ...] = (),
                          asked: Asked | None = None) -> str | None:
    """The commands that make what a depth-only method was asked: `lg grow`
    with that method at the target depth (the width kept), piped into the
    command that changes the width (`mixed_change_pipe`), with `width_method`
    when given; the width step alone when the depth does not change. None
    when no command changes the width that way. `asked`: the flags the
    user gave, each to the commands that take it."""
    source, target = refused.source, refused.target
    asked = asked or Asked(GROW, refused.method)
    middle = at_depths_of(source, target)
    width_options = replace(asked, method=width_method)  # the width step's grow: that method, or the default
    if depths_of(target) == depths_of(source):
        return mixed_change_pipe(source, target, src=src, output=output, options=width_options,
                                 source_options=source_options, output_options=output_options)
    width_step = mixed_change_pipe(middle, target, src="-", output=output, options=width_options,
                                   output_options=output_options)
    if width_step is None:
        return None
    flags = " ".join([*source_options, *asked.flags(GROW, source, middle),
                      "--depth", ",".join(map(str, depths_of(middle)))])
    return f"lg grow {shlex.quote(src)} {flags} -o - | {width_step}"


def width_kept_hint(kept: WidthKept, *, src: str, output: str | None, source_options: tuple[str, ...],
                    output_options: tuple[str, ...], asked: Asked) -> str:
    """The pipe that makes what a depth-only method was asked: the method
    for the depth, then clone for the width where it keeps the function
    (`clone.validate`), else the grow default; with every flag the user
    gave that its commands need."""
    clone = METHODS["clone"]
    try:
        validate_per_stage(clone, resolve_options(clone, {}), at_depths_of(kept.source, kept.target), kept.target,
                           GROW)
        width_method = clone.name
    except LgError:
        width_method = None
    pipe = depth_then_width_pipe(kept, src=src, output=output, width_method=width_method,
                                 source_options=source_options, output_options=output_options, asked=asked)
    return f"run: {pipe}" if pipe else "no width step reaches these sizes"


def _middles(source: ArchSpec, target: ArchSpec, pick: Callable[..., int]) -> list[tuple[int, int]]:
    """The (width, heads) of the model between the two commands of a pipe,
    best first: each size the smaller of the two models' (`pick` min: a
    shrink, then a grow) or the larger (max: a grow, then a shrink). The
    width they share with its heads, then its other head counts; then, at
    the head dim they share, each head count from theirs down to 1 (or up
    to twice theirs): a middle narrower than both keeps the head dim and
    the key/value grouping when no middle of their width does (576 wide, 9
    heads of 64, 3 key/value heads, to 640 with 2: through 512 with 8).
    A few dozen at most, each checked as the commands check it."""
    wide, heads_first = pick(source.width, target.width), pick(source.heads, target.heads)
    head_dim = pick(source.head_dim, target.head_dim)
    counts = range(heads_first, 0, -1) if pick is min else range(heads_first, 2 * heads_first + 1)
    candidates = [(wide, heads_first), *((wide, d) for d in divisors(wide)), (heads_first * head_dim, heads_first),
                  *((count * head_dim, count) for count in counts), *((wide, count) for count in counts)]
    return list(dict.fromkeys(candidates))


def mixed_change_pipe(source: ArchSpec, target: ArchSpec, *, src: str, output: str | None,
                      options: Mapping[str, tuple[str, ...]] | Asked | None = None,
                      source_options: tuple[str, ...] = (), output_options: tuple[str, ...] = ()) -> str | None:
    """The command that turns `source` (read from `src`) into `target` at
    `output` (None: a plan that writes nothing, no -o), every size written
    out: the other command alone when it can, else a shrink piped into a
    grow (or a grow into a shrink, when only that order keeps the head dim
    one way per step); None when none can. `options`: each command's own
    flags (--method and its options), by its name, or the `Asked` that
    says them; `source_options` (the source's heads) go to the command
    that reads `src`, `output_options` (--force, --shard-size, --dry-run)
    to the one that writes `output`. Each step is checked as the commands
    will check it, under the Asked's --max-params, which they get."""
    own_flags = _step_flags(options)
    max_params = options.max_params if isinstance(options, Asked) else None
    if source.stages:
        return _staged_pipe(source, target, src=src, output=output, options=own_flags, source_options=source_options,
                            output_options=output_options, max_params=max_params)
    gqa = source.kv_heads is not None

    def sizes_of(spec: ArchSpec) -> dict[str, int]:
        return {"depth": spec.depth, "width": spec.width, "heads": spec.heads, "mlp_dim": spec.mlp_dim,
                **({"kv_heads": spec.key_value_heads} if gqa else {})}

    def step(command: str, start: ArchSpec, reached: ArchSpec, src_text: str, sizes: dict[str, int],
             out: str | None) -> str:
        flags = [*(source_options if src_text != "-" else ()), *own_flags(command, start, reached),
                 *(f"--{k.replace('_', '-')} {v}" for k, v in sizes.items()),
                 *(output_options if out != "-" else ())]
        return f"lg {command} {src_text} {' '.join(flags)}{_out(out)}"

    def reaches(start: ArchSpec, sizes: dict[str, int], direction: str) -> ArchSpec | None:
        try:
            reached = target_spec(start, **sizes, max_params=max_params)
            check_direction(start, reached, direction)
        except LgError:
            return None
        return reached

    final = sizes_of(target)
    for direction in (SHRINK, GROW):
        alone = reaches(source, final, direction)
        if alone is not None and alone.axis_sizes() == target.axis_sizes():
            return step(direction, source, alone, shlex.quote(src), final, output)
    for first, then, pick in ((SHRINK, GROW, min), (GROW, SHRINK, max)):
        # Then the heads and the head dim each one way (heads that shrink while the head dim grows).
        for width, heads in _middles(source, target, pick):
            kv_heads = pick(source.key_value_heads, target.key_value_heads)
            if gqa and heads % kv_heads:
                continue
            sizes = {"depth": pick(source.depth, target.depth), "width": width, "heads": heads,
                     "mlp_dim": pick(source.mlp_dim, target.mlp_dim), **({"kv_heads": kv_heads} if gqa else {})}
            middle = reaches(source, sizes, first)
            reached = middle and reaches(middle, final, then)
            if reached is not None and reached.axis_sizes() == target.axis_sizes() \
                    and reached.key_value_heads == target.key_value_heads:
                return (f"{step(first, source, middle, shlex.quote(src), sizes, '-')} | "
                        f"{step(then, middle, reached, '-', final, output)}")
    return None


def _staged_pipe(source: ArchSpec, target: ArchSpec, *, src: str, output: str | None, options: StepFlags,
                 source_options: tuple[str, ...], output_options: tuple[str, ...] = (),
                 max_params: float | None = None) -> str | None:
    """`mixed_change_pipe` for a model of stages: sized by `--depth` per stage
    and the first stage's `--width` (heads and MLP follow), so the step
    between is every stage at its smaller depth and the smaller width (a
    shrink, then a grow), or the larger ones (a grow, then a shrink)."""
    final = ([stage.depth for stage in target.stages], target.width)

    def step(command: str, start: ArchSpec, reached: ArchSpec, src_text: str, sizes: tuple[list[int], int],
             out: str | None) -> str:
        flags = [*(source_options if src_text != "-" else ()), *options(command, start, reached),
                 f"--depth {','.join(map(str, sizes[0]))}", f"--width {sizes[1]}",
                 *(output_options if out != "-" else ())]
        return f"lg {command} {src_text} {' '.join(flags)}{_out(out)}"

    def reaches(start: ArchSpec, sizes: tuple[list[int], int], direction: str) -> ArchSpec | None:
        try:
            reached = target_spec(start, depth=sizes[0], width=sizes[1], max_params=max_params)
            check_direction(start, reached, direction)
        except LgError:
            return None
        return reached

    for direction in (SHRINK, GROW):
        alone = reaches(source, final, direction)
        if alone is not None:
            return step(direction, source, alone, shlex.quote(src), final, output)
    for first, then, pick in ((SHRINK, GROW, min), (GROW, SHRINK, max)):
        sizes = ([pick(a.depth, b.depth) for a, b in zip(source.stages, target.stages)],
                 pick(source.width, target.width))
        middle = reaches(source, sizes, first)
        reached = middle and reaches(middle, final, then)
        if reached is not None:
            return (f"{step(first, source, middle, shlex.quote(src), sizes, '-')} | "
                    f"{step(then, middle, reached, '-', final, output)}")
    return None


def mixed_change_hint(source: ArchSpec, target: ArchSpec, *, src: str, output: str | None, asked: Asked,
                      source_options: tuple[str, ...], output_options: tuple[str, ...]) -> str:
    """How to make a change that grows some axes and shrinks others: the
    shrink piped into the grow, with this request's source, sizes and output,
    and the flags the user gave, each to the commands that take it (`Asked`)."""
    pipe = mixed_change_pipe(source, target, src=src, output=output, options=asked,
                             source_options=source_options, output_options=output_options)
    if pipe is None:  # the other command alone does not either: not named
        return "neither lg shrink nor lg grow reaches these sizes, alone or piped together"
    if " | " not in pipe:
        return f"run: {pipe}"
    return f"for a mixed change pipe the two: {pipe}"


def learngene_pipe(start: ArchSpec, target: ArchSpec, *, build: str, direction: str | None = None,
                   method: str | None = None) -> str | None:
    """A `RefusedWithPipe` template that builds `start`, a size a learngene
    builds itself, with `lg grow {src} BUILD`, then turns it into `target`
    (`mixed_change_pipe`: one command, or a shrink and a grow), `--method`
    going to the command of `direction`; None when no such pipe reaches it."""
    placeholder = "LG_PIPE_OUTPUT"
    options = {direction: (f"--method {method}",)} if method is not None and direction is not None else {}
    pipe = mixed_change_pipe(start, target, src="-", output=placeholder, options=options)
    if pipe is None:
        return None
    return f"lg grow {{src}} {build} -o - | " + pipe.replace(f" -o {placeholder}", " -o {out}{written}")


def learngene_method_refusal(learngene, sizes: dict, *, built_at: Callable[[Any], ArchSpec], direction: str,
                             method: str, src: str, output: str, written: tuple[str, ...]) -> str:
    """Why `--method` does not apply to a learngene that builds by its own
    rule, with the commands that give it its place: the learngene's own
    build at the depth asked (`built_at(depth)`: the model it builds, as
    `resize.expand_target` checks it), then `method` resizing its width,
    heads or MLP (`mixed_change_pipe`: one command, or a shrink and a grow);
    the build alone where nothing else was asked."""
    reason = f"a learngene is built by its own rule ({learngene.kind}): --method does not apply"
    own = depths_of(learngene.spec)  # a model of stages: one depth per stage
    depth = sizes.get("depth") or (own[0] if len(own) == 1 else own)
    depth_text = ",".join(map(str, depth)) if isinstance(depth, tuple) else str(depth)
    out = " ".join(["-o", shlex.quote(output), *written])
    build = f"lg {direction} {shlex.quote(src)} --depth {depth_text}"
    resized = {flag: sizes.get(flag) for flag in ("width", "heads", "mlp_dim", "kv_heads")}
    if all(value is None for value in resized.values()):
        return f"{reason}; it builds the size asked itself: {build} {out}"
    try:
        start = built_at(depth)
        target = target_spec(start, **resized)
    except LgError as refused:
        return f"{reason}, and a resize of what it builds at depth {depth_text} is refused too ({refused})"
    flag = (f"--method {method}",)
    pipe = mixed_change_pipe(start, target, src="-", output=output, options=dict.fromkeys(
        get_method(method).directions, flag), output_options=written)
    if pipe is None:
        return f"{reason}, and no resize reaches these sizes from what it builds at depth {depth_text}"
    return f"{reason}; resize the model it builds: {build} -o - | {pipe}"
