"""A method on a hierarchical model (Swin): each stage resized as a model of
its own.

A hierarchical spec and stack are sequences of stages (`ArchSpec.stages`,
`Stack.stages`), each a canonical Stack with its own depth, width, heads and
MLP. Every tensor belongs to the stage whose width its axes are on: the
patch embedding to the first, the patch merging before a stage to that stage
(its `stage_in` axis is the previous stage's width), the final norm and head
to the last. Running the method on each stage with that stage's source and
target sizes therefore resizes every tensor by the method's own rule for its
axes, the inter-stage ones included, and the method never knows it is one
stage of several.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import LgError
from ..stack import ArchSpec, Stack
from .common import Method, MethodContext, MethodResult


def stage_pairs(source: ArchSpec, target: ArchSpec) -> list[tuple[ArchSpec, ArchSpec]]:
    """(source, target) spec of each stage; a plain model is one stage."""
    if not source.stages:
        return [(source, target)]
    return list(zip(source.stages, target.stages))


def check_defined(method: Method, source: ArchSpec) -> None:
    """Refuse a method that has no per-stage meaning on a hierarchical model."""
    if source.stages and method.not_per_stage is not None:
        raise LgError(f"method '{method.name}' is not defined on a {source.family} (a model of stages): "
                      f"{method.not_per_stage}")


def validate_per_stage(method: Method, options: dict[str, Any], source: ArchSpec, target: ArchSpec,
                       direction: str) -> None:
    """The method's own checks, stage by stage (naming the stage it refuses)."""
    if method.validate is None:
        return
    for index, (before, after) in enumerate(stage_pairs(source, target)):
        try:
            method.validate(options, before, after, direction)
        except LgError as exc:
            raise (LgError(f"stage {index}: {exc}") if source.stages else exc) from None


def run_per_stage(method: Method, stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
                  context: MethodContext) -> MethodResult:
    """`method.run` on a plain model; on a hierarchical one, on each stage with
    that stage's sizes, the report holding one entry per stage."""
    if not source.stages:
        return method.run(stack, source, target, options, context)
    check_defined(method, source)
    # timm draws a model's initialisation in one sequence: the random target
    # is made whole, once, when a stage first asks for its part.
    random_model: list[Stack] = []

    def random_stage(index: int) -> Callable[[ArchSpec], Stack]:
        def make(_: ArchSpec) -> Stack:
            if not random_model:
                random_model.append(context.random_stack(target))
            return random_model[0].stages[index]
        return make

    results = []
    for index, (part, (before, after)) in enumerate(zip(stack.stages, stage_pairs(source, target))):
        # A data-aware method reads its stage's own statistics (`lgcli.calibration`).
        stage_context = MethodContext(direction=context.direction, seed=context.seed,
                                      random_stack=random_stage(index) if context.random_stack else None,
                                      calibration=context.calibration.stages[index] if context.calibration else None,
                                      notify=_in_stage(context.notify, index))
        results.append(method.run(part, before, after, options, stage_context))
    return MethodResult(Stack(stages=tuple(r.stack for r in results)),
                        {"stages": [r.report for r in results]})


def _in_stage(notify: Callable[[str], None] | None, index: int) -> Callable[[str], None] | None:
    """A method's progress lines on a stage, each naming it as lg inspect
    does, from 1 ("stage 1: block-ablation: round 1 of 1 ...")."""
    return None if notify is None else (lambda message: notify(f"stage {index + 1}: {message}"))
