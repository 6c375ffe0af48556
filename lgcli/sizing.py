"""The sizes a resize, an expansion or a condense may ask for: the target
architecture a request means (`target_spec`), the limits on it (parameters
and memory: `check_size`), and which way `grow` and `shrink` may go
(`check_direction`). Below the commands that ask (resize, condense) and the
learngene kinds that check their own sizes, so each imports it from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .arch import get_adapter
from .checkpoint import available_memory
from .errors import LgError, UsageError, counted
from .methods.common import GROW, SHRINK
from .stack import EMBED, HEAD_DIM, LAYER, MLP, ArchSpec

# The largest model lg builds unless told otherwise (--max-params): 20
# billion parameters, beyond any ViT published, and a bound that keeps a
# mistyped size from exhausting memory.
DEFAULT_MAX_PARAMS = 20_000_000_000
# What a resize holds at its peak, in float32 copies of the largest role
# stack: the source role, the result, and one intermediate (BoT's level).
# The writer streams everything else (docs/checkpoints.md "How large").
PEAK_ROLE_COPIES = 3


def target_spec(source: ArchSpec, *, depth: int | None = None, width: int | None = None,
                heads: int | None = None, mlp_dim: int | None = None, kv_heads: int | None = None,
                max_params: float | None = None, heads_flag: str | None = "--heads",
                direction: str | None = None) -> ArchSpec:
    """The target architecture: unchanged axes keep their size; heads come
    from `heads`, else width / the source's head dim; the MLP keeps the
    source's ratio unless `mlp_dim` is given. Grouped-query attention keeps
    its group size (heads per key/value head) unless `kv_heads` is given
    (SPEC.md "Text families"); key/value heads must divide the heads.

    The target's size is checked before anything else (`check_size`): a
    request over `max_params` or over the memory available is refused.

    A hierarchical model (Swin) takes a depth per stage: see
    `staged_target_spec`. `heads_flag`: the flag a refusal may suggest for
    the heads (lg condense's --aux-heads; None for a command without one: lg bench).

    `direction` (grow or shrink: the command asking, None when either may
    build it) is checked first: a size asked the other way is refused as
    such (`MixedChange`, naming the command that can), before any refusal
    of the sizes themselves, whose lists then name only what that command reaches."""
    sizes = dict(depth=depth, width=width, heads=heads, mlp_dim=mlp_dim, kv_heads=kv_heads)
    if direction is not None:
        _refuse_wrong_way(source, direction, sizes, max_params, heads_flag)
    return _target(source, sizes, max_params, heads_flag, direction)


def _target(source: ArchSpec, sizes: dict[str, Any], max_params: float | None, heads_flag: str | None,
            direction: str | None, pick_kv: bool = False) -> ArchSpec:
    """`target_spec` once its direction is checked (`pick_kv`: see `_kv_heads`)."""
    depth, width, heads, mlp_dim, kv_heads = (sizes[k] for k in ("depth", "width", "heads", "mlp_dim", "kv_heads"))
    if source.stages:
        return staged_target_spec(source, depth=depth, width=width, heads=heads, mlp_dim=mlp_dim,
                                  kv_heads=kv_heads, max_params=max_params, direction=direction)
    if isinstance(depth, (tuple, list)):
        raise LgError(f"a --depth per stage ({','.join(map(str, depth))}) applies to a model of stages (Swin); "
                      f"this {source.family} has one depth: give one number")
    _check_whole(depth=depth, width=width, heads=heads, mlp_dim=mlp_dim, kv_heads=kv_heads)
    new_width = source.width if width is None else int(width)
    new_depth = source.depth if depth is None else int(depth)
    new_mlp = int(mlp_dim) if mlp_dim is not None else round(source.mlp_dim * new_width / source.width)
    # Checked before the heads, so a request far too large is refused as
    # such: bounded with one head of the whole width, which counts the
    # key/value projections at full width. With grouped-query attention
    # they are narrower, so a target the bound puts over the limit is
    # counted exactly before it is refused.
    try:
        check_size(source.with_sizes(depth=new_depth, width=new_width, heads=1, head_dim=new_width,
                                     mlp_dim=max(new_mlp, 1), kv_heads=1), max_params)
    except LgError as over:
        try:
            target = _sized_target(source, new_depth, new_width, new_mlp, heads, kv_heads, heads_flag, direction,
                                   pick_kv)
        except LgError:
            raise over from None
        check_size(target, max_params)
        return target
    return _sized_target(source, new_depth, new_width, new_mlp, heads, kv_heads, heads_flag, direction, pick_kv)


def _refuse_wrong_way(source: ArchSpec, direction: str, sizes: dict[str, Any], max_params: float | None,
                      heads_flag: str | None) -> None:
    """Refuse a size asked that `direction` cannot reach, as `check_direction`
    would once the target is built, but before the target's own checks: a
    shrink to a larger width is a grow's to make, whatever its heads. The
    refusal carries the target the other command builds, for the hint that
    runs it (`hints.mixed_change_hint`); where the source's key/value groups
    do not divide that target's heads, the ones nearest the source's that it
    reaches (said in the refusal); where no target is built, it names the
    other command and why it refuses these sizes too."""
    if direction not in (GROW, SHRINK):
        raise ValueError(f"direction must be grow or shrink, not {direction!r}")
    asked = [(EMBED, source.width, sizes["width"])]
    if not source.stages:  # a model of stages: its stages' depths are checked one by one (`check_direction`)
        asked = [(LAYER, source.depth, sizes["depth"]), *asked, (MLP, source.mlp_dim, sizes["mlp_dim"]),
                 ("heads", source.heads, sizes["heads"]), ("kv_heads", source.key_value_heads, sizes["kv_heads"])]
    wrong = next(((axis, before, after) for axis, before, after in asked
                  if isinstance(after, int) and not isinstance(after, bool) and after >= 1
                  and (after > before if direction == SHRINK else after < before)), None)
    if wrong is None:
        return
    axis, before, after = wrong
    other = GROW if direction == SHRINK else SHRINK
    what = f"{direction} cannot make {_axis_label(axis)} {'larger' if direction == SHRINK else 'smaller'} " \
           f"({before} -> {after})"
    # The other command's own lists where the rest goes its way; none where the request is mixed.
    one_way = all(not isinstance(a, int) or (a >= b if other == GROW else a <= b) for _, b, a in asked)
    try:
        target = _target(source, sizes, max_params, heads_flag, other if one_way else None, pick_kv=True)
    except LgError as exc:
        raise LgError(f"{what}; lg {other} makes it {'larger' if other == GROW else 'smaller'}, but not at "
                      f"these sizes either: {exc}") from None
    group = source.heads // source.key_value_heads
    if sizes["kv_heads"] is None and target.heads % group:
        one = target.heads == 1
        what += (f", and {counted(target.heads, 'head')} {'does' if one else 'do'} not form groups of {group} as "
                 f"the source's do: the command below gives {'it' if one else 'them'} "
                 f"{counted(target.key_value_heads, 'key/value head')} (--kv-heads)")
    raise MixedChange(what, source, target, other)


def _check_whole(**sizes: int | None) -> None:
    for name, value in sizes.items():
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
            raise LgError(f"--{name.replace('_', '-')} must be a whole number of at least 1, not {value}")


def _sized_target(source: ArchSpec, new_depth: int, new_width: int, new_mlp: int, heads: int | None,
                  kv_heads: int | None, heads_flag: str | None = "--heads", direction: str | None = None,
                  pick_kv: bool = False) -> ArchSpec:
    """The target of these sizes, its heads as `target_spec` says
    (`heads_flag`: the flag a refusal may suggest for the heads, None for
    none; `direction`: the command whose sizes a refusal lists, None for either)."""
    if source.attn_dim != source.width:
        new_heads, new_head_dim = _heads_apart_from_width(source, new_width, heads)
    else:
        if heads is not None:
            if new_width % heads:
                valid = divisors(new_width)
                raise LgError(f"width {new_width} does not split into {heads} heads "
                              f"(head counts that divide it: {_short_list(valid)})")
            new_heads = int(heads)
        elif new_width == source.width:
            new_heads = source.heads
        else:
            head_dim = source.head_dim
            if new_width % head_dim:
                raise LgError(f"width {new_width} is not a whole number of heads of dimension {head_dim} "
                              f"(valid widths: {_valid_widths(source, new_width, kv_heads, direction)}"
                              f"{f'; or pass {heads_flag}' if heads_flag else ''})")
            new_heads = new_width // head_dim
        new_head_dim = new_width // new_heads
    if new_mlp < 1:
        raise LgError(f"width {new_width} keeps an MLP of {new_mlp} units: give --mlp-dim")
    new_kv_heads = _kv_heads(source, new_heads, kv_heads, direction, pick_kv)
    return source.with_sizes(depth=new_depth, width=new_width, heads=new_heads, head_dim=new_head_dim,
                             mlp_dim=new_mlp, kv_heads=new_kv_heads)


def at_width(source: ArchSpec, width: int) -> ArchSpec:
    """`source` at another width, heads and MLP following as `target_spec`
    sets them, with no limit checked: for listing the widths a learngene can
    build (one stage of a Swin included, whose size alone is not a model's)."""
    return _sized_target(source, source.depth, width, round(source.mlp_dim * width / source.width), None, None)


def stage_depths(source: ArchSpec, depth: int | tuple[int, ...] | list[int] | None) -> tuple[int, ...]:
    """The target depth of each stage of a hierarchical model: a list gives
    one per stage; one number is the depth of the deepest stage (the one with
    the most blocks, the last of those that tie: Swin-T's third of 2,2,6,2),
    the others keeping theirs, since that stage is where the depth of every
    Swin variant (2,2,6,2 / 2,2,18,2) differs; none keeps them all."""
    current = tuple(stage.depth for stage in source.stages)
    if depth is None:
        return current
    if isinstance(depth, (tuple, list)):
        if len(depth) != len(current):
            raise LgError(f"--depth gives {len(depth)} stage depths, the {source.family} has {len(current)} stages "
                          f"({','.join(map(str, current))})")
        for value in depth:
            _check_whole(depth=value)
        return tuple(int(v) for v in depth)
    _check_whole(depth=depth)
    deepest = deepest_stage(source)
    return tuple(int(depth) if i == deepest else d for i, d in enumerate(current))


def deepest_stage(spec: ArchSpec) -> int:
    """The index of the stage one `--depth N` sets: the most blocks, the last of a tie."""
    return max(range(len(spec.stages)), key=lambda i: (spec.stages[i].depth, i))


def own_depth(spec: ArchSpec) -> int:
    """The depth one `--depth N` means: a plain model's, a model of stages' deepest stage's."""
    return spec.stages[deepest_stage(spec)].depth if spec.stages else spec.depth


def spec_at_depth(spec: ArchSpec, depth: int) -> ArchSpec:
    """`spec` at one `--depth N`: a plain model's depth, a model of stages'
    deepest stage's (the others kept); nothing else checked."""
    if not spec.stages:
        return spec.with_sizes(depth=depth)
    depths = stage_depths(spec, depth)
    return spec.with_stages(tuple(stage.with_sizes(depth=d) for stage, d in zip(spec.stages, depths)))


def staged_target_spec(source: ArchSpec, *, depth: int | tuple[int, ...] | list[int] | None = None,
                       width: int | None = None, heads: int | None = None, mlp_dim: int | None = None,
                       kv_heads: int | None = None, max_params: float | None = None,
                       direction: str | None = None) -> ArchSpec:
    """The target of a hierarchical model (Swin): each stage's depth from
    `stage_depths`; `width` is the first stage's, and every later stage keeps
    its ratio to the first (Swin's 2x per stage). Each stage is then sized as
    a model of its own (`_sized_target`): heads follow the width at the
    stage's head dim (H' = D'/d, SPEC.md "Text families"), the MLP keeps its
    ratio. Heads and the MLP are not asked for separately: a stage's
    `--heads` would break that rule, which timm's Swin (one mlp_ratio, heads
    per stage) and the per-stage head tables rely on."""
    for flag, value in (("--heads", heads), ("--mlp-dim", mlp_dim), ("--kv-heads", kv_heads)):
        if value is not None:
            raise not_for_stages(flag, source)
    _check_whole(width=width)
    depths = stage_depths(source, depth)
    first = source.width if width is None else int(width)
    stages: list[ArchSpec] = []
    for index, (stage, stage_depth) in enumerate(zip(source.stages, depths)):
        if (stage.width * first) % source.width:
            multiple = source.width // math.gcd(stage.width, source.width)
            raise LgError(f"width {first} gives stage {index} no whole width at the source's ratio "
                          f"{stage.width}/{source.width}: give a multiple of {multiple}")
        stage_width = stage.width * first // source.width
        stage_mlp = round(stage.mlp_dim * stage_width / stage.width)
        try:
            target = _sized_target(stage, stage_depth, stage_width, stage_mlp, None, None, heads_flag=None,
                                   direction=direction)
        except LgError as exc:
            raise LgError(f"stage {index}: {exc}") from None
        if stages:
            target = target.with_sizes(stage_input=stages[-1].width)
        stages.append(target)
    target = source.with_stages(tuple(stages))
    check_size(target, max_params)
    return target


def check_heads_known(source: ArchSpec, *, moves_heads: bool = False, because: str | None = None,
                      flag: str = "--source-heads", where: str = "the file", remedy: str | None = None) -> None:
    """Refuse work that would rest on heads lg assumed (the file records none
    and the weights do not show them: no q/k norm, no config): work that
    moves heads (a width change, --heads, --kv-heads: which rows form a head
    decides what is kept, tiled or mixed), whose output records its heads (a
    Hugging Face config.json), or that needs them `because` (a learngene
    records them; a score depends on them). The refusal says to give the
    heads with `flag`, or what `remedy` says. A depth or
    MLP change at the same heads is the same whatever the heads are, and goes
    ahead when the family's file may leave them unrecorded (a timm ViT: the
    output's heads are assumed again when read, as the source's were)."""
    if not source.heads_assumed:
        return
    if moves_heads:
        because = "this changes the heads"
    elif because is None and not get_adapter(source.family).heads_may_go_unrecorded:
        because = "the output would record them"
    if because is None:
        return
    # Grouped-query attention: the key/value heads fix the head dim as well.
    alternative = " (or its key/value heads with --source-kv-heads)" if (
        flag == "--source-heads" and source.kv_heads is not None) else ""
    remedy = remedy or f"give its heads with {flag} N{alternative}"
    raise LgError(f"{where} does not record its attention heads and its weights do not show them (lg would "
                  f"assume {counted(source.heads, 'head')} of dimension {source.head_dim}), and {because}: {remedy}")


def moves_heads(source: ArchSpec, width: int | None, heads: int | None, kv_heads: int | None) -> bool:
    """Whether a request changes the attention's heads (or their dimension)."""
    return ((width is not None and width != source.width) or (heads is not None and heads != source.heads)
            or (kv_heads is not None and kv_heads != source.key_value_heads))


def _heads_apart_from_width(source: ArchSpec, width: int, heads: int | None) -> tuple[int, int]:
    """(heads, head dim) of a target whose source sets its head dim apart from
    its width (a config.json `head_dim`: Mistral-Nemo, Qwen3): the head dim is
    kept, and the heads are given or keep their ratio to the width, as the
    MLP does (H' = H D' / D)."""
    if heads is not None:
        return int(heads), source.head_dim
    if (source.heads * width) % source.width:
        raise LgError(f"width {width} keeps no whole number of heads at the source's {source.heads} heads per "
                      f"{source.width} (heads of dimension {source.head_dim} set apart from the width): pass --heads")
    return source.heads * width // source.width, source.head_dim


def not_for_stages(flag: str, source: ArchSpec) -> UsageError:
    """A size flag a model of stages does not take (a usage mistake, as any
    flag that does not apply), naming the flags it does take."""
    return UsageError(f"{flag} does not apply to a {source.family} (a model of stages): each stage's heads follow "
                      f"its width at its head dim, and its MLP keeps its ratio; give --depth and --width")


def check_kv_heads_apply(source: ArchSpec, kv_heads: int | None, grouped_query: bool) -> None:
    """--kv-heads refused for a family without grouped-query attention (its
    adapter's `grouped_query`), before anything is computed: else its writer
    is given key and value projections its library does not build (a timm
    ViT's fused qkv). A model of stages is sized by --depth and --width alone."""
    if kv_heads is not None and source.stages:
        raise not_for_stages("--kv-heads", source)
    if kv_heads is not None and not grouped_query:
        raise UsageError(f"--kv-heads does not apply to a {source.family}: its attention has a key/value head for "
                         f"each query head (no grouped-query attention); give --heads")


def _kv_heads(source: ArchSpec, heads: int, kv_heads: int | None, direction: str | None = None,
              pick_kv: bool = False) -> int:
    """The target's key/value heads: as asked, else the source's group size
    kept. Where that group does not divide the heads, the refusal lists the
    key/value heads that do and that `direction` reaches from the source's
    (a shrink never adds one, a grow never drops one); `pick_kv` takes the
    one of them nearest the source's instead (for a hint's target)."""
    if kv_heads is None:
        group = source.heads // source.key_value_heads
        if heads % group == 0:
            return heads // group
        have = source.key_value_heads
        choices = [d for d in divisors(heads) if direction is None
                   or (d <= have if direction == SHRINK else d >= have)]
        if pick_kv and choices:
            return min(choices, key=lambda d: (abs(d - have), d))
        bound = "" if direction is None else \
            f" and is at {'most' if direction == SHRINK else 'least'} the source's {have}"
        raise LgError(f"{counted(heads, 'head')} {'does' if heads == 1 else 'do'} not form groups of {group} "
                      f"(the source's {source.heads} heads share {have} key/value heads): "
                      f"give --kv-heads, one that divides {heads}{bound}: {_short_list(choices) or 'none'}")
    if heads % kv_heads:
        raise LgError(f"--kv-heads {kv_heads} does not divide the {heads} heads (key/value heads that do: "
                      f"{_short_list(divisors(heads))})")
    return int(kv_heads)


def check_size(spec: ArchSpec, max_params: float | None = None) -> int:
    """Refuse a model over `max_params` parameters (default DEFAULT_MAX_PARAMS)
    or over the memory available, from its sizes alone; returns the count."""
    limit = DEFAULT_MAX_PARAMS if max_params is None else max_params
    adapter = get_adapter(spec.family)
    count = adapter.parameter_count(spec)
    if count > limit:
        raise LgError(f"the requested model (depth {spec.depth}, width {spec.width}, MLP {spec.mlp_dim}) has "
                      f"{count:,} parameters, over the limit of {limit:,.0f} (--max-params raises it)")
    free = available_memory()
    need = peak_memory(spec)
    if free is not None and need > free:
        raise LgError(f"the requested model (depth {spec.depth}, width {spec.width}, MLP {spec.mlp_dim}) has "
                      f"{count:.3g} parameters; resizing it one role at a time needs about {need / 2**30:,.1f} GiB "
                      f"of memory, and {free / 2**30:,.1f} GiB is available")
    return count


def peak_memory(spec: ArchSpec) -> int:
    """Bytes a resize to or from a model of `spec` holds at its peak:
    PEAK_ROLE_COPIES float32 copies of its largest role stack (the writer
    streams the rest)."""
    return PEAK_ROLE_COPIES * 4 * get_adapter(spec.family).largest_role_elements(spec)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _valid_widths(source: ArchSpec, width: int, kv_heads: int | None, direction: str | None) -> str:
    """The six widths nearest `width` that the request reaches from `source`:
    whole heads of its head dim, in key/value groups (the source's group,
    or of `kv_heads` given), no wider than the source for a shrink and no
    narrower for a grow; ', ...' where more lie above."""
    head_dim = source.head_dim
    step = kv_heads or (source.heads // source.key_value_heads if source.kv_heads is not None else 1)
    low = 1 if direction != GROW else -(-source.width // head_dim)
    high = source.width // head_dim if direction == SHRINK else width // head_dim + 6 * step + low
    counts = [k for k in range(low, high + 1) if k % step == 0]
    shown = sorted(sorted(counts, key=lambda k: (abs(k - width / head_dim), -k))[:6])
    more = direction != SHRINK or (bool(shown) and counts[-1] > shown[-1])
    return (", ".join(str(k * head_dim) for k in shown) or "none") + (", ..." if more else "")


def _short_list(values: list[int]) -> str:
    return ", ".join(map(str, values[:12])) + (", ..." if len(values) > 12 else "")


def direction_between(source: ArchSpec, target: ArchSpec, where: str = "the source") -> str:
    """shrink when no axis grows, grow when no axis shrinks; a mixed change is
    not one resize (an LgError saying so)."""
    before, after = source.axis_sizes(), target.axis_sizes()
    if all(after[a] <= before[a] for a in before):
        return SHRINK
    if all(after[a] >= before[a] for a in before):
        return GROW
    raise LgError(f"{target.depth} x {target.width} is deeper but narrower (or shallower but wider) than "
                  f"{where}: no single resize reaches it")


def check_direction(source: ArchSpec, target: ArchSpec, direction: str) -> None:
    """`grow` never makes an axis smaller and `shrink` never larger: a mixed
    change is two commands in a pipe."""
    if direction not in (GROW, SHRINK):
        raise ValueError(f"direction must be grow or shrink, not {direction!r}")
    for index, (before, after) in enumerate(zip(source.stages, target.stages)):
        try:
            check_direction(before, after, direction)  # each stage one way (a stage has no stages)
        except MixedChange as exc:  # the whole model's change, whose pipe `mixed_change_pipe` writes
            raise MixedChange(f"stage {index}: {exc.what}", source, target) from None
        except LgError as exc:
            raise LgError(f"stage {index}: {exc}") from None
    before, after = source.axis_sizes(), target.axis_sizes()
    before["heads"], after["heads"] = source.heads, target.heads
    before["kv_heads"], after["kv_heads"] = source.key_value_heads, target.key_value_heads
    for axis in (LAYER, EMBED, MLP, "heads", "kv_heads", HEAD_DIM):
        smaller, larger = after[axis] < before[axis], after[axis] > before[axis]
        if (direction == GROW and smaller) or (direction == SHRINK and larger):
            other = SHRINK if direction == GROW else GROW
            word = "smaller" if direction == GROW else "larger"
            raise MixedChange(f"{direction} cannot make {_axis_label(axis)} {word} ({before[axis]} -> "
                              f"{after[axis]})", source, target, other)


class MixedChange(LgError):
    """A request that makes some axes larger and others smaller: one command
    cannot, a shrink piped into a grow can (`lgcli.hints.mixed_change_pipe`)."""

    def __init__(self, what: str, source: ArchSpec, target: ArchSpec, other: str | None = None):
        # `what` cannot be done; `other`, the command that can make that
        # axis's change (the caller says whether it reaches every size).
        super().__init__(f"{what}: use `lg {other}`" if other else what)
        self.what, self.source, self.target = what, source, target


class WidthKept(LgError):
    """A request to a method that changes depth only (`Method.depth_only`)
    that changes the width, heads or MLP too: the method at the target depth
    piped into a width step can (`lgcli.hints.depth_then_width_pipe`)."""

    def __init__(self, method: str, source: ArchSpec, target: ArchSpec):
        changed = ", ".join(f"{label} {a} -> {b}" for label, a, b in _width_sizes(source, target) if a != b)
        then = ("grow the depth with it, then the width with another method"
                if depths_of(target) != depths_of(source) else "change the width with another method")
        super().__init__(f"method '{method}' changes the depth only, keeping the width, heads and MLP "
                         f"({changed} asked): {then}")
        self.method, self.source, self.target = method, source, target


def _width_sizes(source: ArchSpec, target: ArchSpec) -> list[tuple[str, int, int]]:
    """(label, source size, target size) of every size but depth, per stage of a Swin."""
    sizes = []
    for index, (a, b) in enumerate(zip(source.stages or (source,), target.stages or (target,))):
        where = f"stage {index} " if source.stages else ""
        names = [("width", "width"), ("heads", "heads"), ("MLP", "mlp_dim")]
        if a.kv_heads is not None or b.kv_heads is not None:
            names.insert(2, ("key/value heads", "key_value_heads"))
        sizes += [(where + label, getattr(a, name), getattr(b, name)) for label, name in names]
    return sizes


def keeps_width(source: ArchSpec, target: ArchSpec) -> bool:
    """Whether every stage's width, heads and MLP are the source's."""
    return all(a == b for _, a, b in _width_sizes(source, target))


def depths_of(spec: ArchSpec) -> tuple[int, ...]:
    """Each stage's depth (a plain model: its one depth)."""
    return tuple(stage.depth for stage in spec.stages) or (spec.depth,)


def at_depths_of(source: ArchSpec, target: ArchSpec) -> ArchSpec:
    """`source` at `target`'s depth (each stage's), its width kept."""
    if not source.stages:
        return source.with_sizes(depth=target.depth)
    return source.with_stages(tuple(a.with_sizes(depth=b.depth) for a, b in zip(source.stages, target.stages)))


# `lg shrink --params N` / `--memory BYTES` (docs/methods.md "Sizes as
# budgets"): narrow first, since Minitron (Muralidharan et al. 2024) found
# width pruning better than depth pruning once the pruned model is
# distilled (lg measured the same on its example ViT: docs/methods.md);
# drop layers only where a width that fits would leave more than
# 1 - BUDGET_FILL of the budget unused (widths come in whole heads, so their
# steps are coarse): lg's own choice, a tie where lg measured it.
BUDGET_FILL = 0.9


@dataclass(frozen=True)
class BudgetShape:
    """The shape `shape_for_budget` chose: the `--depth` and `--width` a
    shrink is then asked for (a Swin's depth: its deepest stage's), its
    parameters, and the budget in the unit it was given."""

    depth: int
    width: int
    parameters: int
    budget: int
    unit: str  # "parameters" or "bytes"
    bytes_per_parameter: int

    @property
    def used(self) -> int:
        return self.parameters * (self.bytes_per_parameter if self.unit == "bytes" else 1)


def shape_for_budget(source: ArchSpec, budget: int, *, unit: str = "parameters",
                     bytes_per_parameter: int = 4) -> BudgetShape:
    """The depth and width of the shrink of `source` that a budget of
    `budget` parameters (or bytes of weights at `bytes_per_parameter`)
    buys, by lg's rule:

    1. Shapes: every depth up to the source's, and every width of whole heads
       at the source's head dim (a Swin: its first stage's) whose heads keep
       the grouped-query group, the MLP at the source's ratio: what `lg
       shrink --depth D --width W` builds (`target_spec` decides).
    2. At each depth, the widest width within the budget.
    3. Of those, the deepest whose parameters are at least BUDGET_FILL of the
       most any of them has (narrow before dropping layers).

    A budget the source already meets, or that no shape meets, is refused."""
    scale = bytes_per_parameter if unit == "bytes" else 1
    adapter = get_adapter(source.family)
    top = own_depth(source)
    source_count = adapter.parameter_count(source)
    given = f"--memory {_count_text(budget, unit)}" if unit == "bytes" else f"--params {_short_count(budget)}"
    if source_count * scale <= budget:
        raise LgError(f"{given}: the source has {_count_text(source_count * scale, unit)} already; nothing to shrink")
    widest_at_depth: dict[int, tuple[int, int]] = {}  # depth -> (width, parameters)
    smallest: tuple[int, int, int] | None = None     # (parameters, depth 1, width)
    for heads in range(source.heads, 0, -1):
        if (source.width * heads) % source.heads:
            continue
        width = source.width * heads // source.heads
        try:
            one = adapter.parameter_count(target_spec(source, depth=1, width=width))
            # Every block of a depth has one size: the count is affine in it.
            per_layer = adapter.parameter_count(target_spec(source, depth=2, width=width)) - one if top > 1 else 0
        except LgError:
            continue  # no such shape (heads that break the key/value groups, a Swin stage of no whole width)
        if smallest is None or one < smallest[0]:
            smallest = (one, 1, width)
        for depth in range(1, top + 1):
            count = one + (depth - 1) * per_layer
            if count * scale <= budget and depth not in widest_at_depth:
                widest_at_depth[depth] = (width, count)
    if not widest_at_depth:
        low = f"; the smallest, depth 1 at width {smallest[2]}, has {_count_text(smallest[0] * scale, unit)}" \
            if smallest else ""
        raise LgError(f"{given}: no shape lg can shrink this {source.family} to is that small{low}")
    most = max(count for _, count in widest_at_depth.values())
    depth = max(d for d, (_, count) in widest_at_depth.items() if count >= BUDGET_FILL * most)
    width, count = widest_at_depth[depth]
    exact = adapter.parameter_count(target_spec(source, depth=depth, width=width))
    if exact != count:  # a family whose blocks differ in size: not affine after all
        raise RuntimeError(f"{source.family}: {exact} parameters at depth {depth}, {count} extrapolated")
    return BudgetShape(depth, width, count, budget, unit, bytes_per_parameter)


def _short_count(count: int, suffixes=((10**9, "B"), (10**6, "M"), (10**3, "K"))) -> str:
    """1234567 -> '1.23M' (K, M and B as `--params` takes them); past the
    largest suffix, whole numbers with commas (5e12 -> '5,000B'), never an exponent."""
    for size, suffix in suffixes:
        if count >= size:
            value = count / size
            return f"{value:.3g}{suffix}" if value < 1000 else f"{value:,.0f}{suffix}"
    return str(count)


def _count_text(count: int, unit: str) -> str:
    """A count of parameters ('1.23M parameters') or bytes ('1.23MB', '5TB', as `--memory` takes them)."""
    if unit != "bytes":
        return f"{_short_count(count)} parameters"
    return f"{_short_count(count, ((10**12, 'T'), (10**9, 'G'), (10**6, 'M'), (10**3, 'K')))}B"


def _axis_label(axis: str) -> str:
    return {LAYER: "the depth", EMBED: "the width", MLP: "the MLP dim", "heads": "the head count",
            "kv_heads": "the key/value head count", HEAD_DIM: "the head dim"}[axis]


def spec_sizes(spec: ArchSpec) -> dict[str, Any]:
    """A spec's sizes as the JSON reports of resize, expand and condense record them."""
    sizes: dict[str, Any] = {"depth": spec.depth, "width": spec.width, "heads": spec.heads,
                             "kv_heads": spec.key_value_heads, "head_dim": spec.head_dim, "mlp_dim": spec.mlp_dim}
    if spec.stages:  # a hierarchical model: its own sizes are the first stage's, its depth all blocks
        sizes["stages"] = [spec_sizes(stage) for stage in spec.stages]
    return sizes
