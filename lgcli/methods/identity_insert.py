"""Identity-block insertion (LLaMA-Pro, Wu et al. 2024), SPEC.md "Growth that
LLM users pick": split the L blocks into P groups and after each group insert
a copy of the group's last block whose output projections (attention o, MLP
fc2 / down, and their biases: clone's `BRANCH_OUTPUT_ROLES`) are zero. In a
pre-norm block, x + o(attn(norm1 x)) and x + fc2(mlp(norm2 x)), a zero output
projection makes the block the identity, so the model computes what the
source did; its other weights are the block it follows, so it learns that
block's features once fine-tuning moves o and fc2 off zero.

The target depth fixes P = D - L, 1 <= P <= L (one new block per group, at
most one per source block). LLaMA-Pro takes P dividing L (groups of L/P);
lg also takes any other P and spreads the groups as evenly as it can: after
source block l (1-based) comes a new one when floor(l P / L) steps up, so
groups hold floor(L/P) or ceil(L/P) blocks and the last ends at block L.
For P dividing L that is LLaMA-Pro's placement exactly. It is also where
`clone --insert interleave` puts its identity blocks (`clone.insertion_plan`):
at the source's width, with P <= L, the two methods write the same tensors.

Post-norm blocks (BERT: x <- LN(x + f(x))) still normalise when f is zero,
so no inserted block is an identity: the family's adapter says so
(`ArchSpec.post_norm`) and the method refuses it. On a Swin, where each stage
alternates plain and shifted windows by block position, a block inserted
inside a stage changes which of the following blocks shift: the function is
kept there only when each stage's new block comes last (P = 1 per stage).
"""

from __future__ import annotations

from typing import Any

from ..errors import LgError
from ..stack import ArchSpec, Stack
from .clone import BRANCH_OUTPUT_ROLES, insertion_plan
from .common import GROW, Method, MethodContext, MethodResult, copy_layers


def validate(options: dict[str, Any], source: ArchSpec, target: ArchSpec, direction: str) -> None:
    if source.post_norm:
        raise LgError(f"identity-insert needs pre-norm blocks: the {source.family} normalises after each "
                      f"residual sum (post-norm), so a block with zero output projections is no identity; "
                      f"grow it with stack, depth-upscale or clone instead")
    new = target.depth - source.depth
    if new > source.depth:
        raise LgError(f"identity-insert adds one block after each of P groups of the {source.depth} blocks, at most "
                      f"one per block: depth {target.depth} is beyond {2 * source.depth} (--method clone inserts "
                      f"any number of identity blocks)")


def group_sizes(plan: list[tuple[int, bool]]) -> list[int]:
    """The source blocks of each group (the blocks before each new one)."""
    sizes, count = [], 0
    for _, is_new in plan:
        if is_new:
            sizes.append(count)
            count = 0
        else:
            count += 1
    return sizes


def identity_insert(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
                    context: MethodContext) -> MethodResult:
    validate(options, source, target, context.direction)
    plan = insertion_plan(source.depth, target.depth, "interleave")
    new_layers = [i for i, (_, is_new) in enumerate(plan) if is_new]
    layers = [layer for layer, _ in plan]
    report = {"groups": group_sizes(plan), "new_layers": new_layers, "layers": layers}
    return MethodResult(copy_layers(stack, target, layers, BRANCH_OUTPUT_ROLES, new_layers), report)


METHOD = Method("identity-insert", identity_insert, (GROW,),
                "LLaMA-Pro: a block with zero output projections after each group (keeps the function)",
                validate=validate, depth_only=True)
