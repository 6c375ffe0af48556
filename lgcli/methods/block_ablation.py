"""Block ablation (SPEC.md "Data-aware resizing"): drop the blocks whose
removal changes the whole model's output least, measured by removing them.

Block influence and angular distance score a block by how much it changes
its own input. A block that changes its input little can still be one the
later blocks depend on, and one that turns its
input a lot can still be one the output ignores; what matters is what the
model's output loses without it. This method measures that directly
(`lgcli.calibration.Ablation`): a block is skipped (its output replaced by
its input, so the model computes as if it were not there) and the model's
output on the calibration examples is compared with the full model's:

    s(S) = E_positions[ KL(p_full || p_without S) ]        logits (a classifier,
                                                           a language model's
                                                           next-token or masked
                                                           distributions)
    s(S) = E_positions[ 1 - cos(h_full, h_without S) ]      features (no head;
                                                           h after the final norm)

Two ways to choose the L - D blocks to drop (`--ablation`):

- ``one-shot`` (Shortened LLaMA, Kim et al. 2024, its perplexity criterion):
  each block removed alone, s({l}); the D blocks of largest s are kept.
  L + 1 forward passes over the calibration examples (the full model's
  once).
- ``greedy`` (SLEB, Song et al. 2024): remove the block whose removal, with
  the blocks already removed, gives the smallest s; measure again; repeat
  L - D times. A round scores each block left, L + (L - 1) + ... + (D + 1)
  passes in all, plus per round one of the full model and (after the
  first) one of the model without the removed blocks. It sees that a block harmless alone can be
  harmful once other blocks are gone (or the reverse), which one-shot
  cannot; like one-shot, it cannot see two blocks that are harmful only
  alone (each undoing the other).

Ties go to the earlier block (one-shot: keep the earlier; greedy: remove the
earlier), so the choice is a pure function of the data and seed. Depth only:
a width change at the same time keeps weight selection's uniform elements.
On a Swin each stage chooses its own blocks, each skipped with the other
stages whole; a skipped block is skipped in place, its windows as in the
source (`methods.stages`, docs/methods.md).

Where block influence or angular distance is the better choice: where a
pass of the model is dear (they need one pass, this L + 1 or more), and
where the model's head will be replaced (this scores the output the model
has now; docs/methods.md "block-ablation").
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..lazy import torch
from ..options import Option
from ..pace import ANNOUNCE_PASS_ABOVE_SECONDS, duration_text
from ..stack import ArchSpec, Stack
from .calibrated import CALIBRATION_OPTIONS, most_important, selected_stack, uniform
from .common import SHRINK, Method, MethodContext, MethodResult

ONE_SHOT, GREEDY = "one-shot", "greedy"
# Greedy by default: on SmolLM2-135M 30 -> 20 it kept a held-out perplexity
# of 69.3 where one-shot kept 100.6, on the same 8 calibration windows, and on
# the real DINOv2-S classifier 12 -> 6 it found blocks whose removal moves the
# output less (KL 5.8 against 9.3); one-shot costs about an eighth of the
# passes (benchmarks/real/BLOCK_ABLATION.md).
DEFAULT_ABLATION = GREEDY

OPTIONS = (
    *CALIBRATION_OPTIONS,
    Option("ablation", str, DEFAULT_ABLATION,
           "greedy: remove the least harmful block, measure again, repeat (SLEB; L+(L-1)+...+(D+1) passes and two a round); "
           "one-shot: each block removed alone, keep the most harmful (Shortened LLaMA; L+1 passes).",
           choices=(GREEDY, ONE_SHOT)),
)


def one_shot(ablation, keep: int, say: Callable[[str], None]) -> tuple[list[int], dict[str, Any]]:
    """Keep the `keep` blocks whose removal alone costs the output most."""
    say(f"block-ablation: {ablation.depth + 1} passes over the calibration examples (each block skipped alone)")
    scores = ablation.divergences([(block,) for block in range(ablation.depth)],
                                  first_batch=_how_long(ablation, [ablation.depth + 1], say))
    kept = most_important(torch.tensor(scores, dtype=torch.float64), keep).tolist()
    return kept, {"ablation_scores": [_rounded(v) for v in scores]}


def greedy(ablation, keep: int, say: Callable[[str], None]) -> tuple[list[int], dict[str, Any]]:
    """Remove, one at a time, the block whose removal with those already
    removed costs the output least (SLEB). Each round is said as it ends:
    a round costs a pass per block left, so a large model's runs long."""
    removed: list[int] = []
    rounds: list[list[float | None]] = []
    total = ablation.depth - keep
    started = time.perf_counter()
    while ablation.depth - len(removed) > keep:
        candidates = [block for block in range(ablation.depth) if block not in removed]
        scores = ablation.divergences([tuple(sorted([*removed, block])) for block in candidates],
                                      base=tuple(sorted(removed)),
                                      first_batch=None if removed else _how_long(ablation, _greedy_passes(
                                          ablation.depth, keep), say))
        best = min(range(len(candidates)), key=lambda i: (scores[i], candidates[i]))  # the earlier on ties
        removed.append(candidates[best])
        by_block = dict(zip(candidates, scores))
        rounds.append([_rounded(by_block[b]) if b in by_block else None for b in range(ablation.depth)])
        elapsed = time.perf_counter() - started
        say(f"block-ablation: round {len(removed)} of {total}: block {candidates[best]} removed "
            f"({ablation.measure} {scores[best]:.4g}); {elapsed:.0f} s, about "
            f"{_rounds_left_seconds(elapsed, ablation.depth, keep, len(removed)):.0f} s left")
    kept = [block for block in range(ablation.depth) if block not in removed]
    return kept, {"ablation_rounds": rounds, "removal_order": removed}


def _greedy_passes(depth: int, keep: int) -> list[int]:
    """Each greedy round's passes over the examples: the full model's, the
    model without the blocks removed so far (after the first round), and
    one per block scored."""
    return [1 + (r > 0) + depth - r for r in range(depth - keep)]


def _how_long(ablation, passes: list[int], say: Callable[[str], None]) -> Callable[[float, int], None]:
    """Told the first batch's time (the first round's passes over one
    batch), say how long the whole run will take when that is long: a
    greedy run on a CPU takes many minutes before its first round ends, and
    looks stuck. Later passes replay more of the model and cost less, so
    this tends to overstate. A quarter of the examples is offered while it
    leaves 8 or more."""
    def first_batch(seconds: float, batches: int) -> None:
        round_seconds = seconds * batches
        total = round_seconds * sum(passes) / passes[0]
        if total - seconds <= ANNOUNCE_PASS_ABOVE_SECONDS:
            return
        samples = len(ablation.examples)
        fewer = [f"--calibrate-samples {samples // 4}: about {duration_text(total / 4)}"] if samples >= 32 else []
        if len(passes) > 1:
            fewer.append(f"--ablation {ONE_SHOT}: about {duration_text(round_seconds)}")
        rounds = f"{len(passes)} rounds, " if len(passes) > 1 else ""
        say(f"block-ablation: {rounds}{sum(passes)} passes over {samples} examples: about "
            f"{duration_text(total)}" + (f" ({'; '.join(fewer)})" if fewer else ""))
    return first_batch


def _rounds_left_seconds(elapsed: float, depth: int, keep: int, done: int) -> float:
    """The rest of a greedy run at the pace so far: round r scores depth - r
    + 1 blocks, so the time left is in proportion to the passes left."""
    passes = [depth - r for r in range(depth - keep)]  # blocks scored in each round
    return elapsed * sum(passes[done:]) / sum(passes[:done])


def _rounded(value: float) -> float:
    # Six significant digits, as block influence's report (a KL can be 1e-9).
    return float(f"{value:.6g}")


def block_ablation(stack: Stack, source: ArchSpec, target: ArchSpec, options: dict[str, Any],
                   context: MethodContext) -> MethodResult:
    calibration = context.calibration
    ablation = calibration.ablation
    if target.depth == source.depth:
        kept, scores = list(range(source.depth)), {}
    else:
        choose = greedy if options["ablation"] == GREEDY else one_shot
        kept, scores = choose(ablation, target.depth, context.notify or (lambda message: None))
    report = {"calibration": calibration.describe(), "ablation": options["ablation"], "measure": ablation.measure,
              **scores, "kept_layers": kept, "dropped_layers": sorted(set(range(source.depth)) - set(kept))}
    return MethodResult(selected_stack(stack, source, target, kept, uniform), report)


def ablation_passes(source: ArchSpec, target: ArchSpec, options: dict[str, Any]) -> int:
    """The passes with blocks skipped that shrinking `source` to `target`
    takes (each stage of a Swin its own), for a dry run's estimate."""
    pairs = (list(zip([s.depth for s in source.stages], [t.depth for t in target.stages])) if source.stages
             else [(source.depth, target.depth)])
    one_shot_chosen = options.get("ablation", DEFAULT_ABLATION) == ONE_SHOT
    return sum(depth + 1 if one_shot_chosen else sum(_greedy_passes(depth, keep))
               for depth, keep in pairs if keep < depth)


METHOD = Method("block-ablation", block_ablation, (SHRINK,),
                "Shortened LLaMA / SLEB: drop the blocks whose removal changes the model's output least on "
                "calibration data", options=OPTIONS, calibrated=True, extra_passes=ablation_passes)
