"""Learngenes at several widths (SPEC.md "Learngenes at several widths"):
what a kind needs to train, and build, every width of a list from one set
of tensors.

- Nested slices: the descendant of width w holds the first w channels of
  every ``embed`` axis, the first w / d whole heads of every ``attn`` /
  ``kv`` axis (d the teacher's head dim, which never changes) and the first
  F(w) neurons of every ``mlp`` axis, where F keeps the auxiliary model's MLP
  ratio (`sizing.target_spec`). The learngene's tensors are the widest; the
  globals (patch and position embeddings, norms, head) are sliced the same
  way, so one slice rule serves every role of every family.
- Importance order: slices keep the first channels, so before condensing
  from the ancestry its channels are permuted so that the most important
  come first, measured on the teacher by the calibration pass
  (`lgcli.calibration`, Minitron's activation importance). The permutation
  is the same on every tensor of the residual stream (embed), and per layer
  on the heads and the MLP neurons: a pure relabelling of channels, so the
  permuted teacher computes exactly what the teacher does.

- Widths per step (`--width-rule`): ``sample`` builds one drawn width per
  step (one forward and backward pass); ``widest`` adds the widest to a width
  drawn from the others, and ``sandwich`` trains the widest, the narrowest and
  one drawn from those between (Yu & Huang 2019, "Universally slimmable
  networks and improved training techniques": the sandwich rule), their
  losses summed, so one optimiser step has the gradient of the sum over the
  widths it names (`widths_of_step`, `summed_over_widths`). With two widths
  both ``widest`` and ``sandwich`` train both every step: two passes.
- Per-width norms (`--width-norms`, TLEG): each trained width narrower than
  the widest keeps its own gains and biases of every norm whose channels a
  width slices (slimmable networks' switchable norms), stored as
  ``width<W>.<name>`` beside the widest's and used in place of the slice when
  that width is built (`own_width_norms`).

A kind that trains at several widths records them in its sizes (``widths``)
and builds only those (`check_trained_width`); `lg grow --method M` resizes
the nearest trained width for the rest (`lgcli.resize`).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from ..errors import LgError, RefusedWithPipe, UsageError, counted, shown
from ..lazy import torch
from ..sizing import target_spec
from ..options import Option
from ..stack import ATTN, EMBED, HEADS, KV, MLP, NORM_WEIGHT_ROLES, ArchSpec, Named, Stack, index_along

# The axes a width change moves (layer, head_dim and the fixed axes never do).
SLICED_AXES = (EMBED, ATTN, KV, MLP, HEADS)


# ---------------------------------------------------------------- the widths trained

def width_spec(widest: ArchSpec, width: int) -> ArchSpec:
    """The model of `width` a learngene of `widest` builds: heads at the
    widest's head dim, key/value heads in the same groups, the MLP at the
    widest's ratio (`sizing.target_spec`)."""
    if width == widest.width:
        return widest
    return target_spec(widest, width=width)


def shape_text(spec: ArchSpec) -> str:
    """A width as messages name it: "64 (1 head, MLP 256)"."""
    return f"{spec.width} ({counted(spec.heads, 'head')}, MLP {spec.mlp_dim})"


def widths_text(widest: ArchSpec, widths) -> str:
    """The widths a learngene of `widest` builds, each as `shape_text`."""
    return ", ".join(shape_text(width_spec(widest, w)) for w in widths)


def parse_widths(text: str | None, aux: ArchSpec, flag: str = "--widths") -> tuple[int, ...] | None:
    """The widths of `--widths 64,128`, ascending; None when not given.

    Each must be a whole number of heads at the auxiliary model's head dim,
    and the widest must be the auxiliary model's own width: the learngene's
    tensors are the widest descendant's, which every narrower one slices."""
    if text is None or str(text).strip() == "":
        return None
    if aux.stages:
        raise UsageError(f"{flag} trains the widths of a model of one stack of blocks; a model of stages "
                         f"(Swin) is not width-trained yet")
    parts = [part.strip() for part in str(text).split(",")]
    if not all(re.fullmatch(r"[0-9]{1,9}", part, re.ASCII) for part in parts):
        raise UsageError(f"{flag} takes comma-separated widths such as 64,128, not {shown(repr(str(text)))}")
    widths = tuple(sorted({int(part) for part in parts}))
    for width in widths:
        if width < 1 or width % aux.head_dim:
            raise UsageError(f"{flag}: width {width} is not a whole number of heads of dim {aux.head_dim} "
                             f"(the auxiliary model's head dim)")
        groups = aux.heads // aux.key_value_heads
        if (width // aux.head_dim) % groups:
            raise UsageError(f"{flag}: width {width} is not a whole number of grouped-query groups "
                             f"({groups} heads of dim {aux.head_dim} each)")
    if widths[-1] != aux.width:
        raise UsageError(f"{flag} {','.join(map(str, widths))}: the widest must be the auxiliary model's width "
                         f"{aux.width} (the learngene's tensors are the widest): add {aux.width}, or give "
                         f"--aux-width {widths[-1]}")
    for width in widths:
        width_spec(aux, width)  # a width whose MLP or heads the family cannot have is refused here
    return widths


def trained_widths(sizes: Mapping[str, Any], own: ArchSpec) -> tuple[int, ...]:
    """The widths a learngene was trained at: its sizes' ``widths``, or its own width alone."""
    widths = sizes.get("widths")
    if isinstance(widths, list) and widths and all(isinstance(w, int) and not isinstance(w, bool) for w in widths):
        return tuple(widths)
    return (own.width,)


def check_trained_width(kind: str, own: ArchSpec, widths: Sequence[int], target: ArchSpec) -> None:
    """Refuse a target that is not one of the trained widths (with its
    heads and MLP), in one line naming them and the way to the rest."""
    for width in widths:
        built = width_spec(own, width)
        if (target.width, target.heads, target.key_value_heads, target.mlp_dim) == (
                built.width, built.heads, built.key_value_heads, built.mlp_dim):
            return
    trained = widths_text(own, widths)
    start = nearest_trained(widths, target.width)
    refuse_untrained(f"this {kind} learngene was trained at width{'s' if len(widths) > 1 else ''} {trained}, at any "
                     f"depth; width {shape_text(target)} was asked: build a trained width",
                     width_spec(own, start).with_sizes(depth=target.depth), target, f"width {start}")


def refuse_untrained(asked: str, start: ArchSpec, target: ArchSpec, named: str) -> None:
    """Refuse `target`, a size the learngene was not trained at, saying
    (after `asked`) the way from `start`, the trained size it is `named`
    nearest: `--method M` where one resize reaches it, else the pipe of the
    trained size into a shrink and a grow (a `RefusedWithPipe`)."""
    from ..hints import learngene_pipe
    from ..sizing import MixedChange, check_direction

    way = "shrink" if (start.width, start.depth) > (target.width, target.depth) else "grow"
    try:
        check_direction(start, target, way)
    except MixedChange as mixed:  # --method alone goes one way: the pipe makes it (as `lg grow --method` says)
        pipe = learngene_pipe(start, target, build=f"--depth {start.depth} --width {start.width}")
        if pipe is None:
            raise LgError(f"{asked}; no resize of {named} reaches it ({mixed.what})") from None
        raise RefusedWithPipe(f"{asked}, or build {named} and resize it by a shrink and a grow ({mixed.what}): ",
                              pipe) from None
    raise LgError(f"{asked}, or add --method {'select' if way == 'shrink' else 'bot'} (or another method that can "
                  f"{way}) to resize {named} to it")


def nearest_trained(widths: Sequence[int], width: int) -> int:
    """The trained width a resize to `width` starts from: the narrowest one
    at least as wide (a shrink keeps what was trained), else the widest (a grow)."""
    wider = [w for w in widths if w >= width]
    return min(wider) if wider else max(widths)


def nearest_trained_size(widths: Sequence[int], depths: Sequence[int] | None, width: int,
                         depth: int) -> tuple[int, int] | None:
    """The trained (width, depth) a resize to (`width`, `depth`) starts from,
    for a kind that builds only its trained depths too (`depths`; None: any
    depth): both at least the asked (a shrink, which keeps what was
    trained), else both at most (a grow); None when only a grow of one and
    a shrink of the other reach it."""
    def up(values: Sequence[int] | None, asked: int) -> int | None:
        wider = [v for v in values if v >= asked] if values else [asked]
        return min(wider) if wider else None

    def down(values: Sequence[int] | None, asked: int) -> int | None:
        narrower = [v for v in values if v <= asked] if values else [asked]
        return max(narrower) if narrower else None

    for pick in (up, down):
        start_width, start_depth = pick(widths, width), pick(depths, depth)
        if start_width is not None and start_depth is not None:
            return start_width, start_depth
    return None


# ---------------------------------------------------------------- the widths of one step

# --width-rule: which widths one condense step trains (module docstring).
WIDTH_RULES = ("sample", "widest", "sandwich")


def width_rule_option(default: str) -> Option:
    """`--width-rule` of a kind trained at nested widths (TLEG, WAVE, SWS)."""
    return Option("width_rule", str, default, "with --widths, the widths each condense step trains: sample (one "
                  "drawn width, one forward and backward pass), widest (the widest and one drawn from the others: "
                  "two passes), sandwich (the widest, the narrowest and one drawn between them: the sandwich rule "
                  "of universally slimmable networks, two passes for two widths, three for more); the passes' "
                  "losses are summed, each at its own drawn depth", choices=WIDTH_RULES)


def widths_of_step(widths: Sequence[int], rule: str, draw: Callable[[int], int]) -> tuple[int, ...]:
    """The widths one step trains under `rule`, widest first; `draw(n)` picks
    an index below n (the training loop's seeded torch RNG). `sample` draws
    as the loop always has (one draw over every width), so a run of it
    repeats the runs before --width-rule existed."""
    widths = tuple(widths)
    if rule == "sample" or len(widths) == 1:
        return (widths[draw(len(widths))],)
    if rule == "widest":
        others = widths[:-1]
        return widths[-1], others[draw(len(others))]
    if rule == "sandwich":
        between = widths[1:-1]
        return (widths[-1], widths[0]) + ((between[draw(len(between))],) if between else ())
    raise ValueError(f"unknown width rule {rule!r}")


def passes_per_step(widths: Sequence[int], rule: str) -> int:
    """Forward and backward passes one step costs under `rule` (one per width it trains)."""
    return len(widths_of_step(widths, rule, lambda n: 0)) if widths else 1


def summed_over_widths(loss_fn: Callable, passes: int) -> Callable:
    """The loss of a step that trained `passes` widths: the model's output is
    their logits stacked along the batch axis (`GeneratedModel`), widest
    first, each against the same labels and teacher logits; the loss is the
    sum of the per-width losses, so one backward pass accumulates every
    width's gradient (the sandwich rule's gradient of the summed loss)."""
    if passes == 1:
        return loss_fn

    def loss(logits, labels, teacher_logits):
        return sum(loss_fn(chunk, labels, teacher_logits) for chunk in logits.chunk(passes, dim=0))

    return loss


# ---------------------------------------------------------------- per-width norms

WIDTH_PREFIX = "width"


def width_norms_option() -> Option:
    return Option("width_norms", bool, False, "with --widths, each narrower width keeps its own norm gains and "
                  "biases (slimmable networks' switchable norms), trained when that width is and used when it is "
                  "built; stored in the learngene beside the widest's [default: the slice of the widest's]")


def is_width_norm(role: str, axes: Sequence[str]) -> bool:
    """A norm's gain or bias whose channels a width change slices (LayerNorm
    and RMSNorm over the residual stream; q/k norms over a head's dims are not)."""
    gain = role[:-len("_bias")] + "_weight" if role.endswith("_bias") else role
    return gain in NORM_WEIGHT_ROLES and EMBED in axes


def width_norm_name(width: int, name: str) -> str:
    """The name of width `width`'s own copy of learngene tensor `name`."""
    return f"{WIDTH_PREFIX}{width}.{name}"


def width_norm_tensors(tensors: Mapping[str, torch.Tensor], axes_of: Callable[[str], tuple[str, ...] | None],
                       widest: ArchSpec, widths: Sequence[int]) -> dict[str, torch.Tensor]:
    """Each narrower width's own norm tensors at the start: the slices of the
    widest's (so a step-0 descendant is what it was without them)."""
    out = {}
    for width in widths:
        if width == widest.width:
            continue
        sizes = width_spec(widest, width).axis_sizes()
        for name, tensor in tensors.items():
            axes = axes_of(name)
            if axes is not None and is_width_norm(name.split(".")[-1], axes):
                out[width_norm_name(width, name)] = nested_slice(Named(tensor, axes), sizes).clone()
    return out


def own_width_norms(tensors: Mapping[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
    """The learngene's tensors as the model of `width` uses them: width
    `width`'s own norm tensors in place of the widest's, every other
    width's left out."""
    prefix = f"{WIDTH_PREFIX}{width}."
    out = {name: tensor for name, tensor in tensors.items() if not name.startswith(WIDTH_PREFIX)}
    out.update({name[len(prefix):]: tensor for name, tensor in tensors.items() if name.startswith(prefix)})
    return out


def width_norm_widths(tensors: Mapping[str, torch.Tensor]) -> list[int]:
    """The widths that hold their own norms in `tensors`."""
    return sorted({int(name[len(WIDTH_PREFIX):].split(".")[0]) for name in tensors if name.startswith(WIDTH_PREFIX)})


# ---------------------------------------------------------------- nested slices

def nested_slice(named: Named, sizes: Mapping[str, int]) -> torch.Tensor:
    """The first `sizes[axis]` elements along every sliced axis of `named`
    (a differentiable view: gradients reach the learngene's tensor)."""
    data = named.data
    for dim, axis in enumerate(named.axes):
        if axis in SLICED_AXES and axis in sizes and data.shape[dim] != sizes[axis]:
            if data.shape[dim] < sizes[axis]:  # check_trained_width stands before every build
                raise RuntimeError(f"axis {axis} holds {data.shape[dim]} elements, {sizes[axis]} were asked")
            data = data.narrow(dim, 0, sizes[axis])
    return data


def sliced_tensors(tensors: Mapping[str, torch.Tensor], axes_of: Callable[[str], tuple[str, ...] | None],
                   spec: ArchSpec) -> dict[str, torch.Tensor]:
    """Every tensor whose axes `axes_of(name)` gives, sliced to `spec`'s
    sizes; the others as they are."""
    sizes = spec.axis_sizes()
    out = {}
    for name, tensor in tensors.items():
        axes = axes_of(name)
        out[name] = tensor if axes is None else nested_slice(Named(tensor, axes), sizes)
    return out


# ---------------------------------------------------------------- importance order

def importance_orders(statistics, spec: ArchSpec) -> dict[str, torch.Tensor]:
    """The permutation of each sliced axis that puts the most important
    channels first (descending importance; ties keep the earlier channel):
    embed (D,) shared by every tensor, and per layer (L, n) for attn, kv,
    heads and mlp. With grouped-query attention a key/value head moves with
    the query heads it serves (a group's score is the sum of its heads'), so
    query head h still reads key/value head h // g."""
    def descending(scores: torch.Tensor) -> torch.Tensor:
        return torch.sort(-scores.double(), dim=-1, stable=True).indices

    layers = statistics.heads.shape[0]
    group = spec.heads // spec.key_value_heads
    groups = descending(statistics.heads.reshape(layers, spec.key_value_heads, group).sum(-1))  # (L, kv)
    heads = (groups[..., None] * group + torch.arange(group)).reshape(layers, spec.heads)

    def channels(head_order: torch.Tensor) -> torch.Tensor:
        return (head_order[..., None] * spec.head_dim + torch.arange(spec.head_dim)).reshape(layers, -1)

    return {EMBED: descending(statistics.embed), MLP: descending(statistics.mlp), HEADS: heads,
            ATTN: channels(heads), KV: channels(groups)}


def permuted_stack(stack: Stack, orders: Mapping[str, torch.Tensor]) -> Stack:
    """`stack` with every sliced axis permuted by `orders` (`importance_orders`):
    a (n,) order applies to every tensor, an (L, n) one per layer. The same
    relabelling on every tensor that reads or writes a channel, so the model
    computes the same function (LayerNorm and RMSNorm statistics are sums
    over the channels, which a permutation does not change)."""
    def permute(named: Named, per_layer: bool) -> Named:
        data = named.data
        for dim, axis in enumerate(named.axes):
            if axis not in orders:
                continue
            order = orders[axis]
            if order.dim() == 1:
                data = index_along(data, dim, order)
            elif per_layer and dim > 0:
                data = torch.stack([data[layer].index_select(dim - 1, order[layer])
                                    for layer in range(data.shape[0])])
            else:  # a global with a per-layer axis: no family has one
                raise RuntimeError(f"a global tensor has a per-layer axis {axis}")
        return Named(data, named.axes)

    return Stack(layers={role: permute(named, True) for role, named in stack.layers.items()},
                 globals={role: permute(named, False) for role, named in stack.globals.items()})


class NestedWidths:
    """What a learngene kind trained at nested widths (`--widths`) says of
    them: TLEG, WAVE and SWS alike (`base.LearngeneKind`'s members)."""

    def training_widths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        widths = parse_widths(options.get("widths"), aux)
        if (widths is None or len(widths) < 2) and options.get("width_rule", "sample") != "sample":
            raise UsageError(f"--width-rule {options['width_rule']} chooses among the widths of --widths: give two "
                             f"or more, e.g. --widths {aux.width // 2},{aux.width}")
        if (widths is None or len(widths) < 2) and options.get("width_norms"):
            raise UsageError(f"--width-norms keeps a norm per trained width: give two or more, e.g. --widths "
                             f"{aux.width // 2},{aux.width}")
        return widths

    def trained_widths(self, learngene) -> tuple[int, ...] | None:
        return trained_widths(learngene.sizes, learngene.spec)

    def training_width_rule(self, options: Mapping[str, Any]) -> str:
        """--width-rule; `sample` for a kind that does not declare it."""
        return options.get("width_rule") or "sample"


__all__ = ["NestedWidths", "WIDTH_RULES", "width_rule_option", "widths_of_step", "passes_per_step",
           "summed_over_widths", "width_norms_option", "is_width_norm", "width_norm_name", "width_norm_tensors",
           "own_width_norms", "width_norm_widths", "width_spec", "parse_widths", "trained_widths",
           "check_trained_width", "refuse_untrained", "nearest_trained", "nearest_trained_size", "nested_slice",
           "sliced_tensors", "importance_orders", "permuted_stack"]
