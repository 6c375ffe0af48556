"""Shrink and grow a checkpoint without training, or build a model of any
size from a learngene: what `lg shrink` and `lg grow` do, as functions for
notebooks and scripts.

    >>> from lgcli.resize import resize, resize_file
    >>> spec, stack, report = resize("deit_b.safetensors", direction="shrink", depth=6, width=384)
    >>> report = resize_file("deit_s.safetensors", "big.safetensors", direction="grow",
    ...                      depth=12, width=768, method="clone")
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, BinaryIO

from typing import Callable

from .api import Loaded, is_learngene, load, load_learngene, save
from .arch import get_adapter
from .checkpoint import STDIO, Checkpoint, check_output, read_checkpoint
from .errors import LgError, notify_stderr
from .methods import GROW, SHRINK, MethodContext, default_method, get_method, resolve_options
from .options import resolve_options as resolve_declared
from .stack import EMBED, HEAD_DIM, LAYER, MLP, ArchSpec, RoleMap, Stack, axes_and_shape

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
                max_params: float | None = None) -> ArchSpec:
    """The target architecture: unchanged axes keep their size; heads come
    from `heads`, else width / the source's head dim; the MLP keeps the
    source's ratio unless `mlp_dim` is given. Grouped-query attention keeps
    its group size (heads per key/value head) unless `kv_heads` is given
    (SPEC.md "Text families"); key/value heads must divide the heads.

    The target's size is checked before anything else (`check_size`): a
    request over `max_params` or over the memory available is refused."""
    for flag, value in (("--depth", depth), ("--width", width), ("--heads", heads),
                        ("--mlp-dim", mlp_dim), ("--kv-heads", kv_heads)):
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
            raise LgError(f"{flag} must be a whole number of at least 1, not {value}")
    new_width = source.width if width is None else int(width)
    new_depth = source.depth if depth is None else int(depth)
    new_mlp = int(mlp_dim) if mlp_dim is not None else round(source.mlp_dim * new_width / source.width)
    # Heads barely change the count (q/k norm only): bound it with one head.
    check_size(source.with_sizes(depth=new_depth, width=new_width, heads=1, head_dim=new_width,
                                 mlp_dim=max(new_mlp, 1), kv_heads=1), max_params)
    if source.attn_dim != source.width:
        new_heads, new_head_dim = _heads_apart_from_width(source, new_width, heads)
    else:
        if heads is not None:
            if new_width % heads:
                valid = _divisors(new_width)
                raise LgError(f"width {new_width} does not split into {heads} heads "
                              f"(head counts that divide it: {_short_list(valid)})")
            new_heads = int(heads)
        elif new_width == source.width:
            new_heads = source.heads
        else:
            head_dim = source.head_dim
            if new_width % head_dim:
                raise LgError(f"width {new_width} is not a whole number of heads of dimension {head_dim} "
                              f"(valid widths: {_valid_widths(new_width, head_dim)}; or pass --heads)")
            new_heads = new_width // head_dim
        new_head_dim = new_width // new_heads
    if new_mlp < 1:
        raise LgError(f"width {new_width} keeps an MLP of {new_mlp} units: give --mlp-dim")
    new_kv_heads = _kv_heads(source, new_heads, kv_heads)
    return source.with_sizes(depth=new_depth, width=new_width, heads=new_heads, head_dim=new_head_dim,
                             mlp_dim=new_mlp, kv_heads=new_kv_heads)


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


def _kv_heads(source: ArchSpec, heads: int, kv_heads: int | None) -> int:
    """The target's key/value heads: as asked, else the source's group size kept."""
    if kv_heads is None:
        group = source.heads // source.key_value_heads
        if heads % group:
            raise LgError(f"{heads} heads do not form groups of {group} (the source's {source.heads} heads share "
                          f"{source.key_value_heads} key/value heads): give --kv-heads, one that divides {heads}")
        return heads // group
    if heads % kv_heads:
        raise LgError(f"--kv-heads {kv_heads} does not divide the {heads} heads (key/value heads that do: "
                      f"{_short_list(_divisors(heads))})")
    return int(kv_heads)


def check_size(spec: ArchSpec, max_params: float | None = None) -> int:
    """Refuse a model over `max_params` parameters (default DEFAULT_MAX_PARAMS)
    or over the memory available, from its sizes alone; returns the count."""
    from .checkpoint import available_memory

    limit = DEFAULT_MAX_PARAMS if max_params is None else max_params
    adapter = get_adapter(spec.family)
    count = adapter.parameter_count(spec)
    if count > limit:
        raise LgError(f"the requested model (depth {spec.depth}, width {spec.width}, MLP {spec.mlp_dim}) has "
                      f"{count:.3g} parameters, over the limit of {limit:.3g} (--max-params raises it)")
    free = available_memory()
    need = PEAK_ROLE_COPIES * 4 * adapter.largest_role_elements(spec)
    if free is not None and need > free:
        raise LgError(f"the requested model (depth {spec.depth}, width {spec.width}, MLP {spec.mlp_dim}) has "
                      f"{count:.3g} parameters; resizing it one role at a time needs about {need / 2**30:,.1f} GiB "
                      f"of memory, and {free / 2**30:,.1f} GiB is available")
    return count


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _valid_widths(width: int, head_dim: int) -> str:
    below = max(1, width // head_dim - 2)
    return ", ".join(str(k * head_dim) for k in range(below, below + 6)) + ", ..."


def _short_list(values: list[int]) -> str:
    return ", ".join(map(str, values[:12])) + (", ..." if len(values) > 12 else "")


def check_direction(source: ArchSpec, target: ArchSpec, direction: str) -> None:
    """`grow` never makes an axis smaller and `shrink` never larger: a mixed
    change is two commands in a pipe."""
    if direction not in (GROW, SHRINK):
        raise ValueError(f"direction must be grow or shrink, not {direction!r}")
    before, after = source.axis_sizes(), target.axis_sizes()
    before["heads"], after["heads"] = source.heads, target.heads
    before["kv_heads"], after["kv_heads"] = source.key_value_heads, target.key_value_heads
    for axis in (LAYER, EMBED, MLP, "heads", "kv_heads", HEAD_DIM):
        smaller, larger = after[axis] < before[axis], after[axis] > before[axis]
        if (direction == GROW and smaller) or (direction == SHRINK and larger):
            other = SHRINK if direction == GROW else GROW
            word = "smaller" if direction == GROW else "larger"
            raise LgError(f"{direction} cannot make {_axis_label(axis)} {word} ({before[axis]} -> "
                          f"{after[axis]}): use `lg {other}`; for a mixed change pipe the two: "
                          f"lg shrink SRC ... -o - | lg grow - ... -o OUT")


def _axis_label(axis: str) -> str:
    return {LAYER: "the depth", EMBED: "the width", MLP: "the MLP dim", "heads": "the head count",
            "kv_heads": "the key/value head count", HEAD_DIM: "the head dim"}[axis]


def resize(loaded_or_path: Loaded | str | os.PathLike, *, direction: str, depth: int | None = None,
           width: int | None = None, heads: int | None = None, mlp_dim: int | None = None,
           kv_heads: int | None = None, method: str | None = None, seed: int | None = None,
           source_heads: int | None = None,
           stdin: BinaryIO | None = None, max_params: float | None = None, device: str | None = None,
           **method_options: Any) -> tuple[ArchSpec, Stack, dict[str, Any]]:
    """Resize a model checkpoint to a new depth / width with a training-free
    method. Returns the target spec, the target Stack and a JSON-ready report.

    The returned stack is lazy: a role is computed when it is asked for (by
    `save`, which streams them to the file, or `stack.layers["fc1"]`), from
    the source role read from the file then, so no more than one role of
    either model is ever in memory; `stack.materialized()` holds them all.
    Report entries that come from the computation (tleg-fit's residuals) are
    filled in as roles are made.

    `method_options` are the method's own (bot: wavelet, fit, qkv_axis,
    rescale; clone: insert); None means the method's default. `source_heads`
    is the source's head count when its file does not record it. `device`
    (cuda) is where the transforms run; the files are read and written on
    the CPU."""
    started = time.perf_counter()
    if method is None and direction in (GROW, SHRINK):
        method = default_method(direction)  # measured by lg bench (docs/methods.md "Defaults")
    chosen = get_method(method)
    if direction not in chosen.directions:
        raise LgError(f"method '{method}' cannot {direction} (it can: {', '.join(chosen.directions)})")
    options = resolve_options(chosen, method_options)
    loaded = (loaded_or_path if isinstance(loaded_or_path, Loaded)
              else load(loaded_or_path, heads=source_heads, stdin=stdin))
    plan = _plan(loaded, chosen, options, direction=direction, depth=depth, width=width, heads=heads,
                 mlp_dim=mlp_dim, kv_heads=kv_heads, max_params=max_params)
    source, target = plan
    adapter = get_adapter(source.family)
    context = MethodContext(direction=direction, seed=seed,
                            random_stack=lambda spec: adapter.random_stack(spec, seed=seed))
    # auto keeps the CPU's streamed path (one role in memory at a time): a
    # resize is bound by reading and writing, and a GPU copy would hold it all.
    stack = loaded.stack if device in (None, "cpu", "auto") else on_device(loaded.stack, device)
    result = chosen.run(stack, source, target, options, context)
    try:
        result.stack.check(target)
    except ValueError as exc:  # a method bug, not a user error
        raise RuntimeError(f"method {method} returned a wrongly sized stack: {exc}") from None
    report = {
        "command": direction,
        "method": method,
        "options": options,
        "seed": seed,
        "source": spec_sizes(source),
        "target": spec_sizes(target),
        "parameters": {"source": loaded.stack.num_parameters(),
                       "target": result.stack.num_parameters()},
        "details": result.report,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return target, result.stack, report


def on_device(stack: Stack, device: str) -> Stack:
    """The same lazy stack with each role moved to `device` as it is made:
    the methods' transforms then run there (torch ops, device-generic)."""
    import torch

    try:
        where = torch.device(device)
    except (RuntimeError, ValueError):
        raise LgError(f"--device: unknown device {device!r} (cpu, cuda, cuda:N)") from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise LgError(f"--device {device}: no CUDA device is available here; leave it out to use the CPU")

    def moved(roles):
        info = {role: axes_and_shape(roles, role) for role in roles}
        return RoleMap(info, lambda role: roles[role].data.to(where))

    return Stack(layers=moved(stack.layers), globals=moved(stack.globals))


def _plan(loaded: Loaded, chosen, options: dict[str, Any], *, direction: str, depth, width, heads,
          mlp_dim, kv_heads, max_params) -> tuple[ArchSpec, ArchSpec]:
    if all(v is None for v in (depth, width, heads, mlp_dim, kv_heads)):
        raise LgError(f"nothing to {direction}: give --depth, --width, --heads, --kv-heads or --mlp-dim")
    source = loaded.spec
    target = target_spec(source, depth=depth, width=width, heads=heads, mlp_dim=mlp_dim, kv_heads=kv_heads,
                         max_params=max_params)
    check_direction(source, target, direction)
    if chosen.validate is not None:
        chosen.validate(options, source, target, direction)
    return source, target


def spec_sizes(spec: ArchSpec) -> dict[str, int]:
    return {"depth": spec.depth, "width": spec.width, "heads": spec.heads, "kv_heads": spec.key_value_heads,
            "head_dim": spec.head_dim, "mlp_dim": spec.mlp_dim}


def expand(learngene, *, depth: int | None = None, width: int | None = None, heads: int | None = None,
           mlp_dim: int | None = None, kv_heads: int | None = None, seed: int = 0, notify: Callable[[str], None] | None = None,
           max_params: float | None = None, **options: Any) -> tuple[ArchSpec, Stack, dict[str, Any]]:
    """Build a model of the given size from a learngene, by the learngene's
    own rule (its kind's `expand`). `options` are the kind's expand options
    (WAVE: data, steps, teacher, ...). Returns the target spec, its Stack and a
    JSON-ready report."""
    from .learngenes import get_kind

    started = time.perf_counter()
    kind = get_kind(learngene.kind)
    resolved = resolve_declared(f"a {kind.name} learngene", kind.expand_options, options)
    if all(v is None for v in (depth, width, heads, mlp_dim)):
        raise LgError("give the size to build: --depth (and --width where the learngene can change it)")
    depth, width, heads, mlp_dim = kind.resolve_request(learngene, depth, width, heads, mlp_dim)
    target = target_spec(learngene.spec, depth=depth, width=width, heads=heads, mlp_dim=mlp_dim,
                         kv_heads=kv_heads, max_params=max_params)
    kind.check_target(learngene, target)
    stack, details = kind.expand(learngene, target, resolved, notify or notify_stderr, seed)
    try:
        stack.check(target)
    except ValueError as exc:  # a kind's bug, not a user error
        raise RuntimeError(f"learngene kind {kind.name} built a wrongly sized stack: {exc}") from None
    report = {"command": "expand", "method": kind.name, "options": resolved, "seed": seed,
              "source": {"learngene": kind.name, **spec_sizes(learngene.spec)}, "target": spec_sizes(target),
              "parameters": {"source": learngene.num_parameters(), "target": stack.num_parameters()},
              "details": details, "seconds": round(time.perf_counter() - started, 3)}
    return target, stack, report




def resize_file(source: Loaded | str | os.PathLike, output: str | os.PathLike, *, direction: str,
                force: bool = False, source_heads: int | None = None, stdin: BinaryIO | None = None,
                stdout: BinaryIO | None = None, method: str | None = None,
                notify: Callable[[str], None] | None = None, allow_nonfinite: bool = False,
                **kwargs: Any) -> dict[str, Any]:
    """`resize` (a model) or `expand` (a learngene), then write the result to
    `output` ('-' for stdout) with provenance chained to the source. Returns
    the report (with the output's name and sha256). The output is checked
    before any work.

    For a learngene, `grow` and `shrink` both mean "build a model of this
    size" by the learngene's own rule: no direction is checked and `method`
    must not be given (the learngene's kind is its method)."""
    inputs = () if isinstance(source, Loaded) else (str(source),)
    check_output(output, force=force, inputs=inputs)
    checkpoint = source.checkpoint if isinstance(source, Loaded) else read_checkpoint(source, stdin=stdin)
    checkpoint.allow_nonfinite = allow_nonfinite
    if is_learngene(checkpoint):
        return _expand_file(checkpoint, output, direction=direction, force=force, stdout=stdout, method=method,
                            source_heads=source_heads, notify=notify, **kwargs)
    loaded = source if isinstance(source, Loaded) else load(checkpoint, heads=source_heads)
    shard_size = kwargs.pop("shard_size", None)
    spec, stack, report = resize(loaded, direction=direction, method=method, **kwargs)
    recorded = {"direction": direction, **report["options"]}
    if report["seed"] is not None and report["method"] in ("heur-lg", "auto-lg"):
        recorded["seed"] = report["seed"]
    sha256 = save(output, spec, stack, method=report["method"], options=recorded, source=loaded,
                  force=force, stdout=stdout, shard_size=shard_size)
    report["output"] = "<stdout>" if str(output) == STDIO else str(output)
    report["sha256"] = sha256
    return report


def _expand_file(checkpoint: Checkpoint, output: str | os.PathLike, *, direction: str, force: bool,
                 stdout: BinaryIO | None, method: str | None, source_heads: int | None,
                 notify: Callable[[str], None] | None, **kwargs: Any) -> dict[str, Any]:
    learngene = load_learngene(checkpoint)
    if method is not None:
        raise LgError(f"a learngene is built by its own rule ({learngene.kind}): --method does not apply "
                      f"(resize the model it builds instead: lg {direction} LG ... -o - | lg {direction} - "
                      f"--method {method} ... -o OUT)")
    if source_heads is not None:
        raise LgError("--source-heads does not apply to a learngene: it records its own heads")
    seed = kwargs.pop("seed", None)
    shard_size = kwargs.pop("shard_size", None)
    spec, stack, report = expand(learngene, seed=0 if seed is None else seed, notify=notify, **kwargs)
    report["command"] = direction
    recorded = {"direction": direction, **{k: v for k, v in report["options"].items() if v is not None}}
    if report["seed"] is not None:
        recorded["seed"] = report["seed"]
    report["sha256"] = save(output, spec, stack, method=learngene.kind, options=recorded, source=checkpoint,
                            force=force, stdout=stdout, shard_size=shard_size)
    report["output"] = "<stdout>" if str(output) == STDIO else str(output)
    return report
