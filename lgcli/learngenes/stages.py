"""A learngene of a model of stages (Swin): one learngene of the kind per
stage, each condensed, stored and expanded as the kind does for a plain model.

A Swin is a sequence of stages, each a canonical Stack with its own depth,
width and heads (`ArchSpec.stages`; docs/methods.md "Models of stages"). The
kinds' formulas are per model of one depth and width, and a stage is exactly
that, so a staged learngene applies them stage by stage, as the PEG paper
does on Swin (peg.txt §4.2.3: the MSA and FFN learngenes of every stage):

- TLEG Eq. 1 per stage: stage s's block l of L_s is B_s + ((l - 1) / L_s) A_s;
- PEG Eqs. 3-6 per stage: the stage's heads and FFNs mixed, grown by φ;
- WAVE Eq. 4 per stage: the stage's templates and scalers.

Each stage's tensors are stored under ``stage<i>.`` (``stage2.A.q``), its
sizes as ``sizes["stages"][i]``. Condensing trains every stage's tensors at
once, through the whole model's forward pass (`GeneratedModel`), and so does
fitting a descendant's per-size part (PEG's φ, WAVE's scalers): the wrapper
builds the model from the stages' parts and trains it as one.

A depth drawn while condensing (TLEG `--depths`) is the deepest stage's, as
`--depth N` is (`sizing.stage_depths`): that is where Swin variants differ.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import LgError, RefusedWithPipe, UsageError
from ..lazy import torch
from ..sizing import target_spec
from ..stack import ArchSpec, Stack
from .base import ExpandContext, Learngene, LearngeneKind

STAGE = re.compile(r"stage([0-9]+)\.(.+)", re.ASCII)


def stage_prefix(index: int) -> str:
    return f"stage{index}."


class StagedKind(LearngeneKind):
    """`inner`, a kind for models of one depth and width, applied per stage."""

    def __init__(self, inner: LearngeneKind):
        self.inner = inner
        self.name, self.summary, self.trains = inner.name, inner.summary, inner.trains
        self.condense_options, self.expand_options = inner.condense_options, inner.expand_options

    # -------------------------------------------------------- splitting and joining
    @staticmethod
    def split(tensors: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
        """`tensors` by stage, their ``stage<i>.`` prefixes dropped."""
        parts: list[dict[str, Any]] = [{} for _ in range(count)]
        for name, tensor in tensors.items():
            match = STAGE.fullmatch(name)
            if match is None or int(match.group(1)) >= count:
                raise LgError(f"learngene tensor {name!r} belongs to no stage of {count}")
            parts[int(match.group(1))][match.group(2)] = tensor
        return parts

    @staticmethod
    def join(parts: list[Mapping[str, Any]]) -> dict[str, Any]:
        return {stage_prefix(index) + name: tensor for index, part in enumerate(parts) for name, tensor in part.items()}

    def stage_sizes(self, learngene: Learngene) -> list[dict[str, Any]]:
        sizes = learngene.sizes.get("stages")
        count = len(learngene.spec.stages)
        if not isinstance(sizes, list) or len(sizes) != count or not all(isinstance(s, dict) for s in sizes):
            raise LgError(f"a {self.name} learngene of a {learngene.spec.family} records one object of sizes per "
                          f"stage ({count}) as lg.learngene sizes.stages")
        return sizes

    def stage_learngenes(self, learngene: Learngene) -> list[Learngene]:
        """The learngene of each stage, as the inner kind reads a plain one."""
        specs = learngene.spec.stages
        return [Learngene(kind=learngene.kind, spec=spec, tensors=tensors, sizes=sizes,
                          condensed=learngene.condensed, checkpoint=learngene.checkpoint)
                for spec, tensors, sizes in zip(specs, self.split(learngene.tensors, len(specs)),
                                                self.stage_sizes(learngene))]

    @staticmethod
    def per_stage(function, pairs, *args) -> list:
        """`function(*pair, *args)` per stage, an LgError naming its stage."""
        out = []
        for index, pair in enumerate(pairs):
            try:
                out.append(function(*pair, *args))
            except LgError as exc:
                raise LgError(f"stage {index}: {exc}") from None
        return out

    # -------------------------------------------------------- condensing
    def sample(self, ancestry: ArchSpec, stack: Stack, options: Mapping[str, Any],
               generator: torch.Generator) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Each stage sampled from the ancestry's stage, one generator drawn in stage order."""
        drawn = self.per_stage(self.inner.sample, zip(ancestry.stages, stack.stages), options, generator)
        return self.join([tensors for tensors, _ in drawn]), {"stages": [sizes for _, sizes in drawn]}

    def initial(self, aux: ArchSpec, aux_init: Stack, options: Mapping[str, Any],
                generator: torch.Generator, ancestry: Stack | None = None,
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        ancestries = ancestry.stages if ancestry is not None else [None] * len(aux.stages)
        made = self.per_stage(lambda spec, init, warm: self.inner.initial(spec, init, options, generator, warm),
                              zip(aux.stages, aux_init.stages, ancestries))
        return self.join([t for t, _ in made]), self.join([f for _, f in made])

    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec) -> Stack:
        parts = self.split(tensors, len(spec.stages))
        return Stack(stages=tuple(self.inner.build(part, stage) for part, stage in zip(parts, spec.stages)))

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        count = 1 + max((int(m.group(1)) for m in map(STAGE.fullmatch, tensors) if m), default=-1)
        return self.join([self.inner.keep(part) for part in self.split(tensors, count)])

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        return {"stages": [self.inner.sizes(stage, options) for stage in aux.stages]}

    def no_weight_decay(self, name: str) -> bool:
        match = STAGE.fullmatch(name)
        return self.inner.no_weight_decay(match.group(2) if match else name)

    def teacher_measure(self, options: Mapping[str, Any]) -> str:
        # A model of stages is calibrated per stage, but no kind measures one yet (SWS's map is per whole stack).
        flag = self.inner.teacher_measure(options)
        if flag:
            raise UsageError(f"{flag} is for a model of one stack of blocks; a model of stages (Swin) takes its "
                             f"{self.name} stages by the rule: drop {flag.split()[0]}")
        return ""

    def training_depths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The depths the deepest stage is drawn at (the others keep theirs;
        the inner kind reads a model of stages' depth as its deepest stage's)."""
        return self.inner.training_depths(aux, options)

    def training_widths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The inner kind's, which refuses widths for a model of stages (not width-trained yet)."""
        return self.inner.training_widths(aux, options)

    # -------------------------------------------------------- growing
    def resolve_request(self, learngene: Learngene, depth, width, heads, mlp_dim):
        return depth, width, heads, mlp_dim  # a model of stages is sized by --depth and --width alone

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        """Every stage can be built at its target size; else, when only the
        width is out of reach, the first-stage widths that are not and the
        pipe through the nearest (a resize method changes the width)."""
        genes = self.stage_learngenes(learngene)
        try:
            self._check_stages(genes, target)
        except LgError as exc:
            depths = [stage.depth for stage in target.stages]
            widths = self.first_widths(learngene, depths, genes)
            if not widths:
                raise exc from None
            nearest = min(widths, key=lambda w: (abs(w - target.width), w))
            depth = ",".join(map(str, depths))
            build = f"lg grow {{src}} --depth {depth}" + (f" --width {nearest}" if nearest != learngene.spec.width
                                                           else "")
            direction = "grow" if target.width > nearest else "shrink"
            # The caller writes in the learngene, the output and its flags (RefusedWithPipe).
            raise RefusedWithPipe(f"this {self.name} learngene builds first-stage widths "
                                  f"{', '.join(map(str, widths))}, not {target.width}: build one, then change the "
                                  f"width with a resize method: ",
                                  f"{build} -o - | lg {direction} - --width {target.width} -o {{out}}{{written}}"
                                  ) from None

    def _check_stages(self, genes: list[Learngene], target: ArchSpec) -> None:
        self.per_stage(self.inner.check_target, zip(genes, target.stages))

    def first_widths(self, learngene: Learngene, depths: list[int] | None = None,
                     genes: list[Learngene] | None = None) -> list[int]:
        """The first-stage widths (each later stage at its ratio) every stage
        of the learngene builds, from those its first stage builds alone;
        `genes`: its stages' learngenes, when the caller has them."""
        genes = genes or self.stage_learngenes(learngene)
        found = []
        for width in self.inner.describe(genes[0])["widths"]:
            try:
                self._check_stages(genes, target_spec(learngene.spec, depth=depths, width=width))
            except LgError:
                continue
            found.append(width)
        return found

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        if len(template.stages) != len(learngene.spec.stages):
            raise LgError(f"the recorded configuration has {len(learngene.spec.stages)} stages, its model "
                          f"{len(template.stages)}")
        try:
            genes = self.stage_learngenes(learngene)
        except LgError as exc:
            label = learngene.checkpoint.label if learngene.checkpoint is not None else "the learngene"
            raise LgError(f"{label}: refused: {exc}") from None
        return self.join(self.per_stage(self.inner.expected_tensors, zip(genes, template.stages)))

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        genes = self.stage_learngenes(learngene)
        if self.inner.fitted_part is None:  # built by a formula alone (TLEG)
            built = self.per_stage(lambda gene, stage: self.inner.expand(gene, stage, options, context),
                                   zip(genes, target.stages))
            return Stack(stages=tuple(s for s, _ in built)), {"stages": [r for _, r in built]}
        model = self.prepare(learngene, target, options, context.seed)
        report: dict[str, Any] = {"stages": [self.inner.prepared_report(m) for m in model.stage_models]}
        report.update(context.fit(model, learngene, options, self.inner.fitted_part, self.inner.unfitted_note))
        return model.materialise(), report

    def prepare(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any] | None = None,
                seed: int = 0):
        """A fitting kind's descendant (PEG's φ, WAVE's scalers): every
        stage's part in one model, fitted through the whole model's forward
        pass, as the inner kind fits a plain one."""
        prepared = self.per_stage(lambda gene, stage: self.inner.prepare(gene, stage, options or {}, seed),
                                  zip(self.stage_learngenes(learngene), target.stages))
        from .generated import GeneratedModel  # an nn.Module: torch is imported here

        model = GeneratedModel(target, self.build, self.join([m.trainable_tensors() for m in prepared]),
                               self.join([m.frozen_tensors() for m in prepared]), self.no_weight_decay)
        object.__setattr__(model, "stage_models", prepared)  # for the report; not submodules
        return model

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        genes = self.stage_learngenes(learngene)
        described = [self.inner.describe(gene) for gene in genes]
        first = described[0]
        return {"holds": "; ".join(f"stage {i}: {d['holds']}" for i, d in enumerate(described)),
                "depths": f"per stage, {first['depths']} (--depth 2,2,6,2; one number sets the deepest stage)",
                # The first stage's widths at which every stage builds (the later ones at their ratio).
                "widths": self.first_widths(learngene, genes=genes),
                "becomes": f"each stage as {self.name} builds a model: its first stage {first['becomes']}; "
                           f"--depth per stage or one number for the deepest, --width the first stage's (the "
                           f"others keep their ratio to it)"}

