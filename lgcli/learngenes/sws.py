"""SWS: stage-wise weight sharing (Xia et al., IJCAI 2024, "Exploring
Learngene via Stage-wise Weight Sharing for Initializing Variable-sized
Models"; SPEC.md "SWS").

The auxiliary model's blocks are divided into N stages of consecutive
layers; every layer of a stage uses that stage's one set of weights. The
learngene is those N sets (``S<s>.<role>``, s = 0..N-1, for every per-layer
role: q, k, v, o, fc1, fc2, their biases, the norms, layer scale) and the
globals. The reading lg takes of the paper and its public code
(AlphaXia/SWS), facts only:

- **Stages.** The reference auxiliary model has 16 blocks in 5 stages of
  3, 3, 4, 3, 3 layers. lg's rule, for N stages over L layers: stage s holds
  layers ``[b(s), b(s + 1))`` with ``b(s) = floor(s L / N + 1/2)`` (SWS rule
  below), which gives 3, 3, 4, 3, 3 for L = 16, N = 5. ``--stages N``
  (default 5, or the auxiliary depth when shallower; more is refused).
- **What is shared.** Every per-layer role is shared within its stage, as
  the reference code shares norm1, norm2, qkv, proj, fc1 and fc2; nothing
  is shared across stages. The globals (patch and position embedding, class
  token, final norm, head) are single tensors, inherited by descendants.
- **Expansion.** The reference code maps descendant layer i to a stage by a
  list given by hand (``--layers-source``). lg states one rule, the same as
  the auxiliary model's: a descendant of depth L' takes stage s for its
  layers ``[b'(s), b'(s + 1))``, ``b'(s) = floor(s L' / N + 1/2)``. At the
  auxiliary depth the descendant is the auxiliary model itself; deeper, each
  stage covers proportionally more layers. Shallower than N (2 <= L' < N),
  layer i takes stage ``floor(i (N - 1)/(L' - 1) + 1/2)``: the first and the
  last stage and evenly between (lg's choice, measured: the proportional
  rule there skips both ends, stages 1 and 3 of 0..4 at depth 2).

- **Stage map from data** (lg's, not the paper's: ``--stage-map angular``
  or ``block-influence``). From a pretrained teacher, evenly spaced stages
  break a language model: SmolLM2-135M's 20-layer descendant of a stage per
  layer starts at perplexity 5.9 x 10^4, where the 20 layers angular
  distance keeps start at 154 (docs/learngenes.md "On a real Llama"). With
  a stage map, condensing first measures the teacher on its data (one
  calibration pass, `lgcli.calibration`) and records, for every depth D up
  to the teacher's, the stage of each layer of the depth-D descendant: the
  stages that hold the D teacher layers the resize method of that name
  keeps (`methods.angular`, `methods.block_influence`), in order. Training
  at a drawn depth and growing use that map; deeper than the teacher, the
  rule above. With a stage per layer, the depth-D descendant at step 0 is
  then what ``lg shrink --method angular --depth D`` makes of the teacher
  calibrated on the same examples.

Condensing trains the stages' tensors and the globals through the auxiliary
model, by ``(1 - alpha) CE + alpha tau^2 KL`` (the reference script's
distillation weight 0.5 is the default). From the teacher (`--init
ancestry`), stage s starts as the mean of the teacher's layers that the rule
puts in stage s at the teacher's depth: the least-squares constant per
stage. With ``--widths`` it is trained at several widths by nested slices,
as TLEG (`widths.py`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..errors import LgError, UsageError
from ..lazy import torch
from ..methods import angular, block_influence
from ..options import Option
from ..stack import LAYER_ROLE_AXES, ArchSpec, Named, Stack
from .base import (ExpandContext, Learngene, LearngeneKind, distillation_options, drawn_depths, drawn_sizes,
                   depths_text, expected_globals, globals_as_tensors, globals_from_tensors, init_option, is_global,
                   trained_depths_text)
from .widths import NestedWidths, width_rule_option, check_trained_width, nested_slice, sliced_tensors, widths_text

# The reference auxiliary model: 16 blocks in 5 stages (3, 3, 4, 3, 3).
DEFAULT_STAGES = 5
INIT_STD = 0.02
PREFIX = "S"
# --stage-map: the rule, or the resize method whose kept teacher layers give
# each depth's stages (kept_layers(statistics, teacher depth, depth)).
RULE = "rule"
STAGE_MAPS: dict[str, Callable[[Any, int, int], list[int]]] = {
    "angular": angular.kept_layers, "block-influence": block_influence.kept_layers}


def stage_bounds(depth: int, stages: int) -> list[int]:
    """b(s) = floor(s L / N + 1/2), s = 0..N: stage s holds layers [b(s), b(s + 1))."""
    return [(2 * s * depth + stages) // (2 * stages) for s in range(stages + 1)]


def proportional_stages(depth: int, stages: int) -> list[int]:
    """The stage each of `depth` layers takes when stage s holds layers
    [b(s), b(s + 1)): the auxiliary model's rule at any depth."""
    bounds = stage_bounds(depth, stages)
    return [s for s in range(stages) for _ in range(bounds[s], bounds[s + 1])]


def stage_of_layers(depth: int, stages: int) -> list[int]:
    """The stage each layer of a descendant of `depth` layers takes (the SWS
    rule): proportional at N layers or more; with 2 <= L' < N, layer i takes
    stage floor(i (N - 1)/(L' - 1) + 1/2), so the first and last stage, next
    to the embeddings and to the head, are always used. The proportional
    rule there skipped both at depth 2 of 5 stages (stages 1 and 3), and that
    descendant started at 89 % of its auxiliary model where the others kept
    94 % or more (docs/learngenes.md, "Every kind's descendants at step 0")."""
    if not 2 <= depth < stages:
        return proportional_stages(depth, stages)
    return [(2 * i * (stages - 1) + depth - 1) // (2 * (depth - 1)) for i in range(depth)]


def _stage_name(stage: int, role: str) -> str:
    return f"{PREFIX}{stage}.{role}"


def _split(name: str) -> tuple[int, str] | None:
    """(stage, role) of a stage tensor's name, None for a global."""
    head, _, role = name.partition(".")
    if head[:1] == PREFIX and head[1:].isdigit() and role:
        return int(head[1:]), role
    return None


def stage_count(tensors: Mapping[str, Any]) -> int:
    return 1 + max(split[0] for split in map(_split, tensors) if split is not None)


class Sws(NestedWidths, LearngeneKind):
    name = "sws"
    summary = ("SWS: N stages of shared weights; a descendant of depth L' takes stage s for its layers "
               "floor(s L'/N + 1/2) .. floor((s+1) L'/N + 1/2) - 1, below N layers the first, the last and evenly "
               "between (any depth, the learngene's width)")
    condense_options = (
        *distillation_options(0.5, "the SWS reference script's 0.5"),
        Option("stages", int, None, "stages of shared weights (the paper: 5 stages of 3, 3, 4, 3, 3 layers over "
               "16); at most the auxiliary depth; from a pretrained teacher, its depth starts from the teacher "
               "itself, where fewer start from means of unlike layers (docs/learngenes.md) [default: 5, or the "
               "auxiliary depth when shallower]", minimum=1),
        Option("depths", str, None, "train at a depth drawn each step from these depths, e.g. 2-12 or 3,6,12, "
               "each by the SWS rule at that depth, so that every depth in it makes a good descendant at step 0 "
               "[default: the auxiliary depth only, as the paper]"),
        Option("widths", str, None, "train the learngene at a width drawn each step from this list, e.g. 64,128 "
               "(nested slices, as TLEG's --widths); the widest must be the auxiliary model's"),
        width_rule_option("sample"),
        init_option(),
        Option("stage_map", str, RULE, "which stage each layer of a descendant of depth D takes: rule (the SWS "
               "rule, evenly spaced), or the stages holding the D teacher layers that angular distance or block "
               "influence keeps, measured on --data before the first step (a start from the teacher only; "
               "docs/learngenes.md)", choices=(RULE, *STAGE_MAPS)),
    )
    expand_options = ()

    def _stages(self, aux: ArchSpec, options: Mapping[str, Any]) -> int:
        if options.get("stages") is None:
            return min(DEFAULT_STAGES, aux.depth)
        stages = int(options["stages"])
        if stages > aux.depth:
            raise UsageError(f"--stages {stages} is more than the auxiliary depth {aux.depth}: every stage needs a "
                             f"layer (give --stages {aux.depth} or fewer, or a deeper --aux-depth)")
        return stages

    def warm_start_note(self, aux: ArchSpec, teacher: ArchSpec, options: Mapping[str, Any]) -> str:
        # A pretrained model's layers are unlike: the mean of several is far
        # from any of them (SmolLM2 at 5 stages: perplexity 268 after 100
        # steps, 37.5 with a stage per layer; docs/learngenes.md "On a real Llama").
        stages = self._stages(aux, options)
        if stages >= aux.depth or aux.depth != teacher.depth:
            return ""
        return (f" (each of its {stages} stages the mean of the teacher's layers it holds, far from the teacher "
                f"where they are unlike, as a pretrained model's are; --stages {aux.depth} starts from the teacher "
                f"itself)")

    def teacher_measure(self, options: Mapping[str, Any]) -> str:
        chosen = options.get("stage_map", RULE)
        return "" if chosen == RULE else f"--stage-map {chosen}"

    def measured_sizes(self, aux: ArchSpec, teacher: ArchSpec, options: Mapping[str, Any],
                       statistics: Any) -> dict[str, Any]:
        """The stage map (module docstring): for each depth D = 1..the
        teacher's, the stage of each layer, those that hold the D teacher
        layers `--stage-map`'s method keeps on `statistics`."""
        method = options["stage_map"]
        owner = proportional_stages(teacher.depth, self._stages(aux, options))  # as `initial` puts them
        depths = {str(depth): [owner[layer] for layer in STAGE_MAPS[method](statistics, teacher.depth, depth)]
                  for depth in range(1, teacher.depth + 1)}
        return {"stage_map": {"method": method, "calibration": statistics.describe(), "depths": depths}}

    def measured_note(self, measured: Mapping[str, Any]) -> str:
        recorded = measured["stage_map"]
        return (f"stage map by {recorded['method']} on {recorded['calibration']['samples']} examples of "
                f"{recorded['calibration']['data']}: the descendant of each depth up to "
                f"{max(map(int, recorded['depths']))} takes the stages of the teacher layers {recorded['method']} "
                f"keeps there")

    def builder(self, sizes: Mapping[str, Any]) -> Callable[[Mapping[str, torch.Tensor], ArchSpec], Stack]:
        maps = stage_maps(sizes)
        if not maps:
            return self.build
        return lambda tensors, spec: self.build(tensors, spec, maps)

    def training_depths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        # The paper trains the auxiliary model alone and heals each descendant
        # by training it; drawn depths make the descendants good from step 0
        # (benchmarks/width_learngenes.md, the step-0 table).
        return drawn_depths(aux, options)

    def initial(self, aux: ArchSpec, aux_init: Stack, options: Mapping[str, Any],
                generator: torch.Generator, ancestry: Stack | None = None,
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """From random weights: every stage's matrices trunc-normal(0.02),
        biases 0, gains the family's initial value. From an `ancestry` (the
        teacher at this width): stage s is the mean of the teacher's layers
        the SWS rule puts in stage s at the teacher's depth, and the globals
        are the teacher's."""
        stages = self._stages(aux, options)
        tensors: dict[str, torch.Tensor] = {}
        if ancestry is not None:
            for role, named in ancestry.layers.items():
                layers = named.data.float()
                owner = torch.tensor(proportional_stages(layers.shape[0], stages))
                for s in range(stages):
                    members = (owner == s).nonzero().flatten()
                    # A teacher shallower than the stages: the nearest layer stands in.
                    chosen = members if len(members) else torch.tensor([round(s * (layers.shape[0] - 1)
                                                                              / max(1, stages - 1))])
                    tensors[_stage_name(s, role)] = layers.index_select(0, chosen).mean(0)
            tensors.update({name: t.float().clone() for name, t in globals_as_tensors(ancestry).items()})
            return tensors, {}
        for role, named in aux_init.layers.items():
            first = named.data[0].float()
            for s in range(stages):
                if first.dim() >= 2:
                    value = torch.empty_like(first)
                    torch.nn.init.trunc_normal_(value, std=INIT_STD, generator=generator)
                elif role.endswith("_bias"):
                    value = torch.zeros_like(first)
                else:
                    value = first.clone()
                tensors[_stage_name(s, role)] = value
        tensors.update(globals_as_tensors(aux_init))
        return tensors, {}

    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec,
              maps: Mapping[int, list[int]] | None = None) -> Stack:
        """The SWS rule at `spec`'s depth (each layer its stage's tensors), or
        the stage map `maps` records for that depth, on the nested slices of
        the tensors at a narrower width."""
        sizes = spec.axis_sizes()
        tensors = sliced_tensors(tensors, lambda name: LAYER_ROLE_AXES[_split(name)[1]][1:]
                                 if _split(name) else None, spec)
        stages = stage_count(tensors)
        owner = (maps or {}).get(spec.depth) or stage_of_layers(spec.depth, stages)
        roles = sorted({split[1] for split in map(_split, tensors) if split is not None})
        layers = {role: Named(torch.stack([tensors[_stage_name(s, role)] for s in owner]), LAYER_ROLE_AXES[role])
                  for role in roles}
        globals_ = {role: Named(nested_slice(named, sizes), named.axes)
                    for role, named in globals_from_tensors(tensors, spec.family).items()}
        return Stack(layers=layers, globals=globals_)

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(tensors)

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        stages = self._stages(aux, options)
        bounds = stage_bounds(aux.depth, stages)
        sizes: dict[str, Any] = {"aux_depth": aux.depth, "stages": stages,
                                 "stage_layers": [bounds[s + 1] - bounds[s] for s in range(stages)],
                                 "width": aux.width, "heads": aux.heads, "mlp_dim": aux.mlp_dim}
        sizes.update(drawn_sizes(aux, options, self.training_widths(aux, options), self.training_width_rule(options)))
        return sizes

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        check_trained_width("SWS", learngene.spec, self.trained_widths(learngene), target)

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        stages = learngene.sizes.get("stages")
        if not isinstance(stages, int) or isinstance(stages, bool) or not 1 <= stages <= template_depth(template):
            raise LgError("refused: this sws learngene's metadata lacks a valid 'stages' count")
        stage_maps(learngene.sizes, stages)  # a malformed map is refused on reading
        expected = expected_globals(template)
        for role, named in template.layers.items():
            for s in range(stages):
                expected[_stage_name(s, role)] = tuple(named.data.shape[1:])
        return expected

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        stack = self.built_descendant(learngene, target)
        mapped = stage_maps(learngene.sizes).get(target.depth)
        if mapped is not None:
            method, data = _map_source(learngene.sizes)
            return stack, {"rule": f"the stage map condensing measured: the stages holding the {target.depth} "
                                   f"teacher layers {method} keeps on {data}",
                           "depth": target.depth, "stage_of_layer": mapped}
        owner = stage_of_layers(target.depth, stage_count(learngene.tensors))
        return stack, {"rule": "SWS: layer l takes stage s for floor(s L/N + 1/2) <= l < floor((s+1) L/N + 1/2); "
                               "with 2 <= L < N, stage floor(l (N-1)/(L-1) + 1/2)",
                       "depth": target.depth, "stage_of_layer": owner}

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        own = learngene.spec
        stages = stage_count(learngene.tensors)
        roles = sorted({split[1] for split in map(_split, learngene.tensors) if split is not None})
        widths = list(self.trained_widths(learngene))
        shapes = widths_text(own, widths)
        described = {"holds": f"{stages} stages of shared weights for {len(roles)} per-layer roles "
                              f"(layers per stage at the auxiliary depth: "
                              f"{', '.join(map(str, learngene.sizes.get('stage_layers', [])))}), and "
                              f"{sum(map(is_global, learngene.tensors))} global tensors",
                     "roles": roles,
                     "depths": (described_depths := _depths_described(learngene.sizes)),
                     "widths": widths,
                     "becomes": f"depth 1, 2, 3, ... at width{'s' if len(widths) > 1 else ''} {shapes}"
                                + (f"; {described_depths}" if stage_maps(learngene.sizes) else "")}
        trained = trained_depths_text(learngene.sizes, own.depth)
        if "widths" in learngene.sizes:
            described["trained_at"] = {"widths": widths, "depths": trained,
                                       "width_rule": learngene.sizes.get("width_rule", "sample")}
        elif "trained_depths" in learngene.sizes:
            described["trained_at"] = {"depths": trained}
        return described


def stage_maps(sizes: Mapping[str, Any], stages: int | None = None) -> dict[int, list[int]]:
    """The stage map a learngene records (`Sws.measured_sizes`), by depth;
    {} when it has none. A malformed one (read from a file) is refused: each
    depth's list must hold that many stages, each one of the `stages`."""
    recorded = sizes.get("stage_map")
    if recorded is None:
        return {}
    depths = recorded.get("depths") if isinstance(recorded, dict) else None
    stages = stages if stages is not None else sizes.get("stages")
    maps: dict[int, list[int]] = {}
    for key, owner in (depths.items() if isinstance(depths, dict) else [(None, None)]):
        if not (type(stages) is int and isinstance(key, str) and key.isascii() and key.isdigit()
                and isinstance(owner, list) and len(owner) == int(key) >= 1
                and all(type(s) is int and 0 <= s < stages for s in owner)):
            raise LgError("refused: this sws learngene's stage map is malformed (each depth D must map to D stages "
                          "of the learngene's)")
        maps[int(key)] = owner
    return maps


def _depths_described(sizes: Mapping[str, Any]) -> str:
    maps = stage_maps(sizes)
    if not maps:
        return "any depth >= 1 (the SWS rule at the target depth)"
    method, data = _map_source(sizes)
    return (f"depths {depths_text(maps)} by the stage map condensing measured ({method} on {data}), the others "
            f"by the SWS rule")


def _map_source(sizes: Mapping[str, Any]) -> tuple[str, str]:
    """(the method, the data) a recorded stage map was measured by, as messages name them."""
    recorded = sizes["stage_map"]
    calibration = recorded.get("calibration")
    data = calibration.get("data") if isinstance(calibration, dict) else None
    return str(recorded.get("method", "?")), str(data) if data is not None else "its data"


def template_depth(template: Stack) -> int:
    return next(iter(template.layers.values())).data.shape[0]


KIND = Sws()
