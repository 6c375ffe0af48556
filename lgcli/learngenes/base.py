"""What every learngene kind shares: the learngene record, the protocol a
kind implements, and the model a learngene's tensors are trained through.

A learngene is a set of tensors named by role (TLEG ``A.q`` / ``B.q``, WAVE
``T.qkv``, and ``global.<role>`` for the embeddings, final norm and head)
plus the family configuration of the auxiliary model it was condensed as. A
kind (one module each: `tleg.py`, `wave.py`) says how those tensors become a
canonical `Stack` at any target `ArchSpec`; everything that trains, condensing
and fitting alike, goes through one `GeneratedModel` (`generated.py`) and
`lgcli.train.train`,
called by the commands above (`lgcli.condense`, `lgcli.fitting`): a kind
neither reads data nor trains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..arch import get_adapter
from ..checkpoint import Checkpoint
from ..errors import LgError, UsageError, counted, shown
from ..lazy import torch
from ..options import Option
from ..preprocessing import INTERPOLATIONS
from ..sizing import check_size, spec_at_depth
from ..stack import ArchSpec, Named, Stack

if TYPE_CHECKING:
    from .generated import GeneratedModel

GLOBAL_PREFIX = "global."


@dataclass
class Learngene:
    """A learngene held in memory (what a learngene file stores).

    `spec` is the auxiliary model it was condensed as: the family
    configuration every descendant is built from. `sizes` are the kind's own
    sizes (JSON), `condensed` what condensing recorded (settings, steps,
    seconds, the auxiliary model's test accuracy), `checkpoint` the file it
    was read from (for provenance; None when it has just been condensed).
    """

    kind: str
    spec: ArchSpec
    tensors: dict[str, torch.Tensor]
    sizes: dict[str, Any] = field(default_factory=dict)
    condensed: dict[str, Any] = field(default_factory=dict)
    checkpoint: Checkpoint | None = None

    def num_parameters(self) -> int:
        return sum(t.numel() for t in self.tensors.values())


class LearngeneKind:
    """The protocol of a learngene kind. A kind module defines one subclass
    and an instance ``KIND``; nothing outside it knows the kind's tensors.

    - `condense_options` / `expand_options`: declared options (the CLI builds
      `lg condense` and `lg grow` flags from them). A kind that trains
      declares ``alpha`` and ``tau``: condensing's loss is then
      ``(1 - alpha) CE + alpha tau^2 KL`` (SPEC.md "TLEG", WAVE Eq. 6).
    - `initial(aux, aux_init, options, generator, ancestry=None)`: the tensors
      to train while condensing, as (trainable, frozen), from the auxiliary
      spec and the family's random initialisation of it; with `ancestry` (the
      teacher's stack, at the auxiliary model's width), a warm start fitted
      to the teacher's weights instead (`--init ancestry`).
    - `build(tensors, spec)`: the canonical Stack of a model of `spec`, as a
      differentiable function of the tensors; `builder(sizes)` binds what
      a learngene's sizes record for it (SWS's stage map).
    - `teacher_measure(options)` / `measured_sizes(...)` /
      `measured_note(...)`: a kind whose options ask for the teacher's
      statistics on the data (the command measures them; a kind reads no
      data) records what it takes from them beside its sizes, and says so.
    - `keep(tensors)`: which trained tensors the learngene keeps.
    - `sizes(aux, options)`: the kind's own sizes, recorded in the file.
    - `check_target(learngene, target)`: refuse a size the learngene cannot
      become, with an LgError naming what it can.
    - `expand(learngene, target, options, context)`: the descendant's Stack
      and a JSON-ready report; `context` (`ExpandContext`) holds the seed,
      the notify and the fitting on data a kind may call.
    - `describe(learngene)`: what it is and which depths and widths it can become.
    - `no_weight_decay(name)`: tensors AdamW must not decay.
    - `training_depths(aux, options)`: depths to train the auxiliary model
      at, one drawn per step (kinds whose rule is depth-free, like TLEG).
    - `training_widths(aux, options)`: widths drawn per step likewise, each
      built from the learngene's (widest) tensors by nested slices
      (`widths.py`); `trained_widths(learngene)`: those a learngene builds
      directly, for `lg grow --method` to resize the nearest one to the
      rest (None: the kind takes no --method); `trained_depths(learngene)`
      likewise for a kind that builds only the depths it was trained at
      (LeTs; None: any depth).
    """

    name: str = ""
    summary: str = ""
    condense_options: tuple[Option, ...] = ()
    expand_options: tuple[Option, ...] = ()
    # False for a kind condensed without training (PEG samples its tensors):
    # `sample` replaces initial / build / keep / sizes while condensing.
    trains: bool = True
    # A kind that fits part of each descendant on data (WAVE: its scalers;
    # PEG: the map φ) names that part, says what a descendant built without
    # data is, and implements `prepare` and `prepared_report`; None: the
    # descendant is a formula of the learngene alone (TLEG).
    fitted_part: str | None = None
    unfitted_note: str = ""

    def sample(self, ancestry: ArchSpec, stack: Stack, options: Mapping[str, Any],
               generator: torch.Generator) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """A training-free kind's tensors and sizes, drawn from the ancestry."""
        raise NotImplementedError

    def resolve_request(self, learngene: "Learngene", depth, width, heads, mlp_dim):
        """The (depth, width, heads, mlp_dim) a grow request means for this
        kind (PEG: --heads sets the width); by default what was asked."""
        return depth, width, heads, mlp_dim

    def initial(self, aux: ArchSpec, aux_init: Stack, options: Mapping[str, Any],
                generator: torch.Generator, ancestry: Stack | None = None,
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        raise NotImplementedError

    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec) -> Stack:
        raise NotImplementedError

    def builder(self, sizes: Mapping[str, Any]) -> Callable[[Mapping[str, torch.Tensor], ArchSpec], Stack]:
        """`build` for a learngene of these `sizes`: a kind whose build reads
        what condensing measured on the teacher (SWS's stage map) binds it
        here; by default `build` itself."""
        return self.build

    def teacher_measure(self, options: Mapping[str, Any]) -> str:
        """The flag in `options` that has condensing measure the teacher on
        its data first (`lgcli.calibration`), for `measured_sizes`, as
        messages name it ("--stage-map angular"); "" when none does."""
        return ""

    def measured_sizes(self, aux: ArchSpec, teacher: ArchSpec, options: Mapping[str, Any],
                       statistics: Any) -> dict[str, Any]:
        """What the kind records of the teacher's `statistics` (a
        `lgcli.calibration.Calibration`), beside its `sizes`, for `builder`."""
        return {}

    def measured_note(self, measured: Mapping[str, Any]) -> str:
        """What `lg condense` says of `measured_sizes`' record, when it is not empty."""
        return ""

    def built_descendant(self, learngene: Learngene, target: ArchSpec) -> Stack:
        """`build` at `target` from the learngene's tensors (in float32, no
        gradients), for a kind whose descendant is what it trains: the
        globals cloned, since slices are views of the learngene's tensors and
        the descendant owns its own."""
        with torch.no_grad():
            built = self.builder(learngene.sizes)({k: v.float() for k, v in learngene.tensors.items()}, target)
        return Stack(layers=built.layers, globals={role: Named(named.data.clone(), named.axes)
                                                   for role, named in built.globals.items()})

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        raise NotImplementedError

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        """Every tensor a learngene of this kind holds, with its shape, given
        its auxiliary model's `template` stack (a meta-device model: roles and
        shapes, no memory): `load_learngene` refuses a file that differs."""
        raise NotImplementedError

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        raise NotImplementedError

    def prepare(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
                seed: int = 0) -> "GeneratedModel":
        """A fitting kind's descendant before fitting: the part it fits
        trainable, the learngene frozen (`fitted_part`)."""
        raise NotImplementedError

    def prepared_report(self, model: "GeneratedModel") -> dict[str, Any]:
        """What `expand` reports of a prepared descendant (its rule, the size of the fitted part)."""
        raise NotImplementedError

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        raise NotImplementedError

    def no_weight_decay(self, name: str) -> bool:
        return False

    def warm_start_note(self, aux: ArchSpec, teacher: ArchSpec, options: Mapping[str, Any]) -> str:
        """What `lg condense` adds to "started from the teacher" when the
        kind's start is not the teacher's function ("" when there is nothing to say)."""
        return ""

    def training_depths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Depths to draw from while condensing (None: the auxiliary depth only)."""
        return None

    def training_widths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Widths to draw from while condensing (None: the auxiliary width only)."""
        return None

    def trained_widths(self, learngene: Learngene) -> tuple[int, ...] | None:
        """The widths `learngene` builds directly, when other widths are
        reached by a resize of the nearest (None: the kind's own rule only)."""
        return None

    def trained_depths(self, learngene: Learngene) -> tuple[int, ...] | None:
        """The depths `learngene` builds directly, when other depths are
        reached by a resize of the nearest (None: its rule builds any depth)."""
        return None


# ---------------------------------------------------------------- warm starts

INIT_CHOICES = ("auto", "ancestry", "random")


def init_option() -> Option:
    """`--init` of the kinds that train while condensing (TLEG, WAVE)."""
    return Option("init", str, "auto", "where condensing starts: ancestry (the learngene fitted to the "
                  "teacher's weights by least squares, and the teacher's embeddings and head), random (the "
                  "papers' protocol), or auto: ancestry when the auxiliary model has the teacher's width, "
                  "else random", choices=INIT_CHOICES)


def starts_from_ancestry(init: str, aux: ArchSpec, teacher: ArchSpec) -> bool:
    """Whether condensing starts from the teacher's weights (`--init`): they
    fit only an auxiliary model of the teacher's width, heads and MLP, so
    `auto` takes them exactly then, and `ancestry` refuses any other."""
    fits = (aux.family, aux.width, aux.heads, aux.key_value_heads, aux.mlp_dim, aux.head_dim) == (
        teacher.family, teacher.width, teacher.heads, teacher.key_value_heads, teacher.mlp_dim, teacher.head_dim)
    if init == "ancestry" and not fits:
        raise LgError(f"--init ancestry needs the auxiliary model at the teacher's width ({teacher.width}, "
                      f"{counted(teacher.heads, 'head')}, MLP {teacher.mlp_dim}); it is {aux.width} wide "
                      f"({counted(aux.heads, 'head')}, MLP {aux.mlp_dim}): drop --aux-width or use --init random")
    return init == "ancestry" or (init == "auto" and fits)


# ---------------------------------------------------------------- depths drawn while condensing

# Far deeper than any model fits (the deepest is checked to fit in memory):
# bounds the list a hostile --depths would make before that check.
MAX_DRAWN_DEPTHS = 100_000

def parsed_depths(text: str) -> tuple[int, ...]:
    """`--depths`: every depth a condensing step may draw, ascending. A range
    MIN-MAX (3-12), one depth (6), or a list of depths and ranges (3,6,12 or
    2-4,8): a list trains exactly the depths a user will build."""
    depths: set[int] = set()
    for item in str(text).split(","):
        match = re.fullmatch(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", item.strip(), re.ASCII)
        if not match:
            raise UsageError(f"--depths takes a range MIN-MAX such as 3-12, or depths and ranges such as 3,6,12, "
                             f"not {shown(repr(str(text)))}")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 1 <= first <= last:
            raise UsageError(f"--depths {shown(text)}: need 1 <= MIN <= MAX")
        if last - first >= MAX_DRAWN_DEPTHS or len(depths) + last - first >= MAX_DRAWN_DEPTHS:
            raise UsageError(f"--depths {shown(text)}: more than {MAX_DRAWN_DEPTHS:,} depths to draw from")
        depths.update(range(first, last + 1))
    return tuple(sorted(depths))


def depths_text(depths, separator: str = ",") -> str:
    """Depths as `--depths` takes them: runs of consecutive depths as ranges
    (3-12; 3,6,12; 2-4,8), so the text parses back to the same depths."""
    depths = sorted(set(depths))
    runs: list[list[int]] = []
    for depth in depths:
        if runs and depth == runs[-1][-1] + 1:
            runs[-1].append(depth)
        else:
            runs.append([depth])
    return separator.join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)


def depth_range(aux: ArchSpec, text: str) -> tuple[int, ...]:
    """`parsed_depths` for the auxiliary model `aux` (a whole model: a model
    of stages draws its deepest stage's depth), the deepest checked to fit in memory."""
    depths = parsed_depths(text)
    check_size(spec_at_depth(aux, depths[-1]))  # the deepest model a step trains
    return depths


def drawn_depths(aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
    """`training_depths` of a kind that trains its auxiliary depth unless
    given `--depths` (SWS, WAVE, as their papers): None without it."""
    text = options.get("depths")
    return depth_range(aux, text) if text else None


def drawn_sizes(aux: ArchSpec, options: Mapping[str, Any], widths: tuple[int, ...] | None,
                width_rule: str) -> dict[str, Any]:
    """What such a kind records of the sizes it drew (its `sizes`): with
    `--widths` the widths, the depths [first, last] (its own without
    `--depths`) and the width rule; with `--depths` alone the depths;
    nothing else. The depths are parsed only: `aux` may be one stage of a
    model of stages, whose `sizes` run per stage."""
    drawn = options.get("depths")
    depths = parsed_depths(drawn) if drawn else (aux.depth,)
    if widths:
        return {"widths": list(widths), **depths_record(depths), "width_rule": width_rule}
    return depths_record(depths) if drawn else {}


def depths_record(depths: tuple[int, ...]) -> dict[str, list[int]]:
    """How a learngene's sizes record the depths it drew: `trained_depths`
    [first, last], as files from before depth lists did, and `depth_list`,
    every depth, where they are not one range."""
    record = {"trained_depths": [depths[0], depths[-1]]}
    if len(depths) != depths[-1] - depths[0] + 1:
        record["depth_list"] = list(depths)
    return record


def trained_depths_text(sizes: Mapping[str, Any], own_depth: int) -> str:
    """The depths a learngene was trained at, as `lg inspect` shows them for
    every kind: '6' for one depth, '2-12' for a range (`trained_depths`
    [first, last] in its sizes; `own_depth` where none is recorded), '3,6,12'
    for a list (`depth_list`); '?' for a malformed record."""
    listed = sizes.get("depth_list")
    if listed is not None:
        if not (isinstance(listed, list) and listed and all(type(d) is int and d >= 1 for d in listed)):
            return "?"
        return depths_text(listed)
    depths = sizes.get("trained_depths", [own_depth, own_depth])
    if not (isinstance(depths, list) and len(depths) == 2):
        return "?"
    return f"{depths[0]}" if depths[0] == depths[1] else f"{depths[0]}-{depths[1]}"


# ---------------------------------------------------------------- expanding, with or without data

def fit_options(*, lr: float, batch_size: int) -> tuple[Option, ...]:
    """The expand options of a kind that fits part of a descendant on data
    before materialising it (WAVE: its scalers; PEG: the map φ). The kinds
    share these flags, so their help names both."""
    fitted = "the part fitted per size (WAVE: the scalers; PEG: the map φ)"
    return (
        Option("data", str, None, f"fit {fitted} on this data (an image folder or a built-in name); "
               f"without it the descendant is built unfitted"),
        Option("steps", int, 300, "fitting steps", minimum=0),
        Option("lr", float, lr, "peak learning rate of the fitting", minimum=0.0),
        Option("batch_size", int, batch_size, "batch size of the fitting", minimum=1),
        Option("subset", str, None, "train images to fit on: a count or a fraction"),
        Option("teacher", str, None, "add knowledge distillation from this checkpoint while fitting"),
        Option("alpha", float, 0.5, "with --teacher: (1 - alpha) CE + alpha tau^2 KL", minimum=0.0, maximum=1.0),
        Option("tau", float, 1.0, "distillation temperature", minimum=1e-6),
        Option("device", str, "auto", "auto, cpu or cuda: where a learngene's part is fitted (auto: CUDA when "
               "present); for a model, where the resize transforms run (auto: the CPU's streamed path)",
               panel="Method"),
        # Over the preprocessing the learngene records (its teacher's); the descendant records what it was fitted with.
        Option("mean", str, None, "with --data: the images' mean per channel (0.485,0.456,0.406, or one number) "
               "over the learngene's own"),
        Option("std", str, None, "with --data: the images' std per channel, over the learngene's own"),
        Option("interpolation", str, None, "with --data: the resampling of the images, over the learngene's own",
               choices=INTERPOLATIONS),
    )


def distillation_options(alpha: float, why: str) -> tuple[Option, Option]:
    """The `alpha` and `tau` every condensing kind declares: (1 - alpha) CE +
    alpha tau^2 KL, `alpha`'s default as the kind's paper or reference run
    has it (`why` says which)."""
    return (Option("alpha", float, alpha, f"weight of the distillation term: (1 - alpha) CE + alpha tau^2 KL ({why})",
                   minimum=0.0, maximum=1.0),
            Option("tau", float, 1.0, "distillation temperature", minimum=1e-6))


@dataclass
class ExpandContext:
    """What a kind's `expand` may need besides the learngene, the target and
    its options, handed in by the command that expands (as `MethodContext`
    is to a resize method): the seed, where to say what it did, and `fit`.

    `fit(model, learngene, options, what, unfitted)` fits `what` (the
    descendant's trainable part) on options["data"] when given, else says
    `unfitted`; it returns the report's fitting entries. Fitting reads data
    and trains, which the command layer does (`lgcli.fitting`), not a kind."""

    seed: int
    notify: Callable[[str], None]
    fit: Callable[["GeneratedModel", Learngene, Mapping[str, Any], str, str], dict[str, Any]]


# ---------------------------------------------------------------- globals

def globals_as_tensors(stack: Stack) -> dict[str, torch.Tensor]:
    """A stack's global tensors under learngene names (``global.<role>``)."""
    return {GLOBAL_PREFIX + role: named.data for role, named in stack.globals.items()}


def expected_globals(template: Stack) -> dict[str, tuple[int, ...]]:
    """The ``global.<role>`` tensors of a learngene whose auxiliary model is `template`."""
    return {GLOBAL_PREFIX + role: tuple(named.data.shape) for role, named in template.globals.items()}


def check_tensors(learngene: Learngene, expected: Mapping[str, tuple[int, ...]], name: str) -> None:
    """The learngene's tensors are exactly `expected` (names and shapes), in a
    floating-point dtype: a file whose metadata disagrees with its tensors is
    refused naming what disagrees."""
    found = learngene.tensors
    for key in sorted(set(expected) ^ set(found)):
        where = "lacks" if key in expected else "holds an unexpected"
        raise LgError(f"{shown(name)}: refused: this {learngene.kind} learngene {where} tensor {shown(key)} "
                      f"(for its recorded configuration)")
    for key, shape in expected.items():
        tensor = found[key]
        if tuple(tensor.shape) != tuple(shape):
            raise LgError(f"{shown(name)}: refused: learngene tensor {shown(key)} has shape {tuple(tensor.shape)}, "
                          f"its recorded configuration needs {tuple(shape)}")
        if not tensor.is_floating_point():
            raise LgError(f"{shown(name)}: refused: learngene tensor {shown(key)} is not floating point")


def globals_from_tensors(tensors: Mapping[str, torch.Tensor], family: str) -> dict[str, Named]:
    """The inverse of `globals_as_tensors`, with each role's axes from the family's adapter."""
    axes = get_adapter(family).global_role_axes()
    return {name[len(GLOBAL_PREFIX):]: Named(tensor, axes[name[len(GLOBAL_PREFIX):]])
            for name, tensor in tensors.items() if name.startswith(GLOBAL_PREFIX)}


def is_global(name: str) -> bool:
    return name.startswith(GLOBAL_PREFIX)
