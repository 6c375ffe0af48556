"""The shell text of the hints lg prints: the `lg shrink ... | lg grow ...`
commands that make what one command cannot, with every flag the user gave
that they need. Made here, in one place, from the sizes `lgcli.sizing`
reaches and checks; each hint runs as printed (tests run them)."""

from __future__ import annotations

import shlex
from typing import Any, Callable

from .errors import LgError
from .methods.common import GROW, SHRINK
from .options import DEFAULT_SHARD_SIZE, parse_byte_size
from .sizing import WidthKept, at_depths_of, check_direction, depths_of, divisors, target_spec
from .stack import ArchSpec


def source_flags(source_heads: int | None, source_kv_heads: int | None, allow_nonfinite: bool) -> tuple[str, ...]:
    """The flags about the source a user gave, for the command of a hint that reads it."""
    return ((f"--source-heads {source_heads}",) if source_heads is not None else ()) + \
        ((f"--source-kv-heads {source_kv_heads}",) if source_kv_heads is not None else ()) + \
        (("--allow-nonfinite",) if allow_nonfinite else ())


def output_flags(force: bool, shard_size: int | None, card_file: str | None) -> tuple[str, ...]:
    """The flags about the output a user gave, for the command of a hint that writes it."""
    shard_flag = shard_size is not None and shard_size != parse_byte_size(DEFAULT_SHARD_SIZE, "--shard-size")
    return (("--force",) if force else ()) + ((f"--shard-size {shard_size}",) if shard_flag else ()) + \
        ((f"--card {shlex.quote(str(card_file))}",) if card_file is not None else ())


def depth_then_width_pipe(refused: WidthKept, *, src: str, output: str, width_method: str | None,
                          source_options: tuple[str, ...] = (), output_options: tuple[str, ...] = ()) -> str | None:
    """The commands that make what a depth-only method was asked: `lg grow`
    with that method at the target depth (the width kept), piped into the
    command that changes the width (`mixed_change_pipe`), with `width_method`
    when given; the width step alone when the depth does not change. None
    when no command changes the width that way."""
    source, target = refused.source, refused.target
    middle = at_depths_of(source, target)
    width_options = {GROW: ("--method", width_method)} if width_method else {}
    if depths_of(target) == depths_of(source):
        return mixed_change_pipe(source, target, src=src, output=output, options=width_options,
                                 source_options=source_options, output_options=output_options)
    width_step = mixed_change_pipe(middle, target, src="-", output=output, options=width_options,
                                   output_options=output_options)
    if width_step is None:
        return None
    flags = " ".join([*source_options, "--method", refused.method, "--depth", ",".join(map(str, depths_of(middle)))])
    return f"lg grow {shlex.quote(src)} {flags} -o - | {width_step}"


def mixed_change_pipe(source: ArchSpec, target: ArchSpec, *, src: str, output: str,
                      options: dict[str, tuple[str, ...]] | None = None,
                      source_options: tuple[str, ...] = (), output_options: tuple[str, ...] = ()) -> str | None:
    """The command that turns `source` (read from `src`) into `target` at
    `output`, every size written out: the other command alone when it can,
    else a shrink piped into a grow (or a grow into a shrink, when only that
    order keeps the head dim one way per step); None when none can.
    `options`: each command's own (--method) by its name; `source_options`
    (the source's heads) go to the command that reads `src`, `output_options`
    (--force, --shard-size) to the one that writes `output`. Each step is
    checked as the commands will check it."""
    options = options or {}
    if source.stages:
        return _staged_pipe(source, target, src=src, output=output, options=options, source_options=source_options,
                            output_options=output_options)
    gqa = source.kv_heads is not None

    def sizes_of(spec: ArchSpec) -> dict[str, int]:
        return {"depth": spec.depth, "width": spec.width, "heads": spec.heads, "mlp_dim": spec.mlp_dim,
                **({"kv_heads": spec.key_value_heads} if gqa else {})}

    def step(command: str, src_text: str, sizes: dict[str, int], out: str) -> str:
        given = source_options if src_text != "-" else ()
        flags = [*given, *options.get(command, ()), *(f"--{k.replace('_', '-')} {v}" for k, v in sizes.items()),
                 *(output_options if out != "-" else ())]
        return f"lg {command} {src_text} {' '.join(flags)} -o {out}"

    def reaches(start: ArchSpec, sizes: dict[str, int], direction: str) -> ArchSpec | None:
        try:
            reached = target_spec(start, **sizes)
            check_direction(start, reached, direction)
        except LgError:
            return None
        return reached

    final = sizes_of(target)
    for direction in (SHRINK, GROW):
        alone = reaches(source, final, direction)
        if alone is not None and alone.axis_sizes() == target.axis_sizes():
            return step(direction, shlex.quote(src), final, shlex.quote(output))
    for first, then, pick in ((SHRINK, GROW, min), (GROW, SHRINK, max)):
        wide = pick(source.width, target.width)
        heads_first = pick(source.heads, target.heads)
        # Then the heads and the head dim each one way (heads that shrink while the head dim grows).
        middles = [(wide, heads_first)] + [(wide, d) for d in divisors(wide) if d != heads_first] + \
            [(heads_first * pick(source.head_dim, target.head_dim), heads_first)]
        for width, heads in middles:
            kv_heads = pick(source.key_value_heads, target.key_value_heads)
            if gqa and heads % kv_heads:
                continue
            sizes = {"depth": pick(source.depth, target.depth), "width": width, "heads": heads,
                     "mlp_dim": pick(source.mlp_dim, target.mlp_dim), **({"kv_heads": kv_heads} if gqa else {})}
            middle = reaches(source, sizes, first)
            reached = middle and reaches(middle, final, then)
            if reached is not None and reached.axis_sizes() == target.axis_sizes() \
                    and reached.key_value_heads == target.key_value_heads:
                return (f"{step(first, shlex.quote(src), sizes, '-')} | "
                        f"{step(then, '-', final, shlex.quote(output))}")
    return None


def _staged_pipe(source: ArchSpec, target: ArchSpec, *, src: str, output: str,
                 options: dict[str, tuple[str, ...]], source_options: tuple[str, ...],
                 output_options: tuple[str, ...] = ()) -> str | None:
    """`mixed_change_pipe` for a model of stages: sized by `--depth` per stage
    and the first stage's `--width` (heads and MLP follow), so the step
    between is every stage at its smaller depth and the smaller width (a
    shrink, then a grow), or the larger ones (a grow, then a shrink)."""
    final = ([stage.depth for stage in target.stages], target.width)

    def step(command: str, src_text: str, sizes: tuple[list[int], int], out: str) -> str:
        flags = [*(source_options if src_text != "-" else ()), *options.get(command, ()),
                 f"--depth {','.join(map(str, sizes[0]))}", f"--width {sizes[1]}",
                 *(output_options if out != "-" else ())]
        return f"lg {command} {src_text} {' '.join(flags)} -o {out}"

    def reaches(start: ArchSpec, sizes: tuple[list[int], int], direction: str) -> ArchSpec | None:
        try:
            reached = target_spec(start, depth=sizes[0], width=sizes[1])
            check_direction(start, reached, direction)
        except LgError:
            return None
        return reached

    for direction in (SHRINK, GROW):
        if reaches(source, final, direction) is not None:
            return step(direction, shlex.quote(src), final, shlex.quote(output))
    for first, then, pick in ((SHRINK, GROW, min), (GROW, SHRINK, max)):
        sizes = ([pick(a.depth, b.depth) for a, b in zip(source.stages, target.stages)],
                 pick(source.width, target.width))
        middle = reaches(source, sizes, first)
        if middle is not None and reaches(middle, final, then) is not None:
            return f"{step(first, shlex.quote(src), sizes, '-')} | {step(then, '-', final, shlex.quote(output))}"
    return None


def mixed_change_hint(source: ArchSpec, target: ArchSpec, *, src: str, output: str, direction: str,
                      method: str | None, source_options: tuple[str, ...], output_options: tuple[str, ...]) -> str:
    """How to make a change that grows some axes and shrinks others: the
    shrink piped into the grow, with this request's source, sizes and output,
    and the flags the user gave about them (`--method` to the command of its
    `direction`)."""
    method_flag = (f"--method {method}",) if method is not None else ()
    pipe = mixed_change_pipe(source, target, src=src, output=output, options={direction: method_flag},
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
    from .methods import get_method

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
