"""The hidden-state term of `lg distill --hidden-weight W` (SPEC.md
"Distillation"): the student's hidden states pulled towards the teacher's at
matched depths, beside the logits' KL.

    L = L_logits + W * (1 / L_s) * sum_i MSE(n(h_s^i), n(h_t^m(i)))

h^i is the residual stream leaving block i (what block i + 1 reads; the last
block's output before any final norm), n the normalisation SPEC.md asks for:
each position's vector made zero-mean and unit-variance over its channels
(a layer norm without gain or bias, eps 1e-5), MSE the mean over the batch,
the positions (tokens, image patches and class token) and the channels, and
m the layer map below. This is TinyBERT's hidden-state loss (Jiao et al. 2020,
Eq. 8: MSE(H^S W_h, H^T)) with W_h the identity: lg distils hidden states
only between equal widths, as a learned W_h would be a tensor the written
student has no place for. Minitron (Muralidharan et al. 2024, Sec. 3) adds
the same kind of intermediate-state term to the logits' KL when healing a
depth-pruned model. lg averages over the student's blocks (TinyBERT sums) so
that W means the same at every depth, and normalises the states (SPEC.md
"Distillation") so that it means the same on every model: a residual
stream's scale grows with depth and differs between families (about 3 on
the example ViT's, 0.15 on the example Llama's, as plain MSEs), and
normalised states make the term at most about 4 whatever it is.

The layer map m: when the student's provenance says which of the teacher's
blocks each of its blocks is (a data-aware depth shrink records the layers it
kept; `select` and `activation` keep the first blocks; `lg distill` keeps
them all), block i is matched with the block it came from; otherwise with
TinyBERT's uniform map g(m) = m * N / M: student block i (from 0) of L_s to
teacher block round((i + 1) * L_t / L_s) - 1, rounded half up, so the last
is matched with the last.

The states come from the family's own forward (timm or transformers), with
forward hooks on the blocks the family's adapter names (`layer_modules`, as
the calibration pass finds them): no per-family code, and the hooks sit on
the model inside any DDP wrapper, so they fire under torchrun too.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .arch import get_adapter
from .checkpoint.metadata import MAX_PROVENANCE
from .errors import LgError
from .lazy import F, nn, torch
from .stack import ArchSpec

# How the map was found, as the report and the file record it.
FROM_PROVENANCE = "provenance"
NORM_EPS = 1e-5  # the normalisation's, as torch's layer norm's default
UNIFORM = "uniform"
# A provenance step that keeps every block where it was.
KEEPS_EVERY_LAYER = ("distill",)


def uniform_layer_map(student_depth: int, teacher_depth: int) -> list[int]:
    """TinyBERT's uniform map: student block i (from 0) to teacher block
    round((i + 1) * L_t / L_s) - 1, rounded half up (integer arithmetic: no
    float ties), at least block 0 when the student is the deeper."""
    return [max(0, (2 * (i + 1) * teacher_depth + student_depth) // (2 * student_depth) - 1)
            for i in range(student_depth)]


def provenance_layer_map(provenance: Mapping[str, Any] | None, student_depth: int, teacher_sha256: str | None,
                         teacher_depth: int) -> list[int] | None:
    """The teacher block each student block came from, read from the
    student's provenance (`lg.*` metadata: each step's method, options and
    source's sha256) back to the step whose source is the teacher; None when
    a step on the way does not say where its blocks came from, or no step's
    source is the teacher."""
    from .methods import METHODS

    if not provenance or teacher_sha256 is None:
        return None
    mapping = list(range(student_depth))  # student block -> block of the step's own file
    node: Any = provenance
    for _ in range(MAX_PROVENANCE + 1):
        if not isinstance(node, Mapping) or node.get("kind", "model") != "model":
            return None
        method, options = node.get("method"), node.get("options")
        options = options if isinstance(options, Mapping) else {}
        chosen = options.get("chosen")
        kept = chosen.get("kept_layers") if isinstance(chosen, Mapping) else None
        if kept is not None:  # a method that chose its layers (block influence, angular distance)
            if not (isinstance(kept, list) and all(type(k) is int and k >= 0 for k in kept)
                    and all(i < len(kept) for i in mapping)):
                return None
            mapping = [kept[i] for i in mapping]
        elif method in KEEPS_EVERY_LAYER or (method in METHODS and METHODS[method].keeps_first_layers
                                              and options.get("direction") == "shrink"):
            pass
        else:
            return None
        if node.get("source_sha256") == teacher_sha256:
            return mapping if all(i < teacher_depth for i in mapping) else None
        node = node.get("source")
    return None


def layer_map(student_depth: int, teacher_depth: int, provenance: Mapping[str, Any] | None,
              teacher_sha256: str | None) -> tuple[list[int], str]:
    """(teacher block of each student block, how it was found: FROM_PROVENANCE or UNIFORM)."""
    found = provenance_layer_map(provenance, student_depth, teacher_sha256, teacher_depth)
    if found is not None:
        return found, FROM_PROVENANCE
    return uniform_layer_map(student_depth, teacher_depth), UNIFORM


def check_shapes(student: ArchSpec, teacher: ArchSpec, student_where: str, teacher_where: str) -> None:
    """Hidden states compare only between one stack of blocks of equal width:
    refused in one line otherwise."""
    for where, spec in ((student_where, student), (teacher_where, teacher)):
        if spec.stages:
            raise LgError(f"--hidden-weight matches one stack of blocks; {where} is a {spec.family} model of "
                          f"stages of different widths (distil it with --hidden-weight 0)")
    if student.width != teacher.width:
        raise LgError(f"--hidden-weight needs the student's width to be the teacher's: the student "
                      f"({student_where}) is {student.depth} x {student.width} and the teacher ({teacher_where}) "
                      f"{teacher.depth} x {teacher.width}, so their hidden states do not compare (distil with "
                      f"--hidden-weight 0)")


def block_modules(model: nn.Module, spec: ArchSpec) -> list[nn.Module]:
    """`model`'s blocks, in order, as its family's adapter names them."""
    names = get_adapter(spec.family).layer_modules(spec, model).get("block")
    if not names:
        raise LgError(f"--hidden-weight: lg does not know where the blocks of a {spec.family} model are "
                      f"(distil it with --hidden-weight 0)")
    modules = dict(model.named_modules())
    missing = [name for name in names if name not in modules]
    if missing:  # a family declaration that does not match its library's model: lg's bug
        raise RuntimeError(f"{spec.family}: no module {missing[0]} in the model")
    return [modules[name] for name in names]


def normalised(states: torch.Tensor) -> torch.Tensor:
    """Each position's hidden vector, zero-mean and unit-variance over its
    channels (the last axis), in float32: the n of the module docstring."""
    return F.layer_norm(states.float(), states.shape[-1:], eps=NORM_EPS)


def _block_output(output: Any) -> torch.Tensor:
    """A block's hidden states: its output, or the first of the outputs it returns."""
    if torch.is_tensor(output):
        return output
    if isinstance(output, (tuple, list)) and output and torch.is_tensor(output[0]):
        return output[0]
    raise RuntimeError("a block returned no tensor")


class HiddenStateTerm:
    """W times the mean over the student's blocks of the MSE between its
    hidden states and the teacher's at `mapping`, read through forward hooks
    while it is entered (`with HiddenStateTerm(...) as term:`). Each forward
    of either model keeps its blocks' latest outputs; `layer_mse` compares
    the two latest, and `loss(base)` adds the term to a logits' loss
    (`train.LossFn`), which `train` calls after both forwards of a step."""

    def __init__(self, weight: float, student: nn.Module, student_spec: ArchSpec, teacher: nn.Module,
                 teacher_spec: ArchSpec, mapping: Sequence[int]):
        self.weight, self.mapping = float(weight), list(mapping)
        self.student_blocks = block_modules(student, student_spec)
        self.teacher_blocks = block_modules(teacher, teacher_spec)
        if len(self.mapping) != len(self.student_blocks) or \
                not all(0 <= i < len(self.teacher_blocks) for i in self.mapping):
            raise RuntimeError(f"a layer map {self.mapping} for {len(self.student_blocks)} student and "
                               f"{len(self.teacher_blocks)} teacher blocks")
        self.student_states: dict[int, torch.Tensor] = {}
        self.teacher_states: dict[int, torch.Tensor] = {}
        self._hooks: list[Any] = []

    def __enter__(self) -> "HiddenStateTerm":
        def keep(states: dict[int, torch.Tensor], index: int) -> Callable:
            def hook(module, args, output):
                states[index] = _block_output(output)
            return hook

        for index, block in enumerate(self.student_blocks):
            self._hooks.append(block.register_forward_hook(keep(self.student_states, index)))
        for index in sorted(set(self.mapping)):
            self._hooks.append(self.teacher_blocks[index].register_forward_hook(keep(self.teacher_states, index)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        self.student_states.clear()
        self.teacher_states.clear()

    def layer_mse(self) -> torch.Tensor:
        """(L_s,): MSE(n(h_s^i), n(h_t^m(i))) of the latest forwards, in float32."""
        if len(self.student_states) != len(self.student_blocks) or \
                any(i not in self.teacher_states for i in self.mapping):
            raise RuntimeError("the hidden-state term was read before both models ran")
        errors = []
        for index, matched in enumerate(self.mapping):
            ours, theirs = self.student_states[index], self.teacher_states[matched]
            if ours.shape != theirs.shape:
                raise LgError(f"--hidden-weight: the student's block {index} gives hidden states of shape "
                              f"{tuple(ours.shape)} and the teacher's block {matched} {tuple(theirs.shape)}, which "
                              f"do not compare (distil with --hidden-weight 0)")
            errors.append(F.mse_loss(normalised(ours), normalised(theirs.detach())))
        return torch.stack(errors)

    def value(self) -> torch.Tensor:
        """W * the mean of `layer_mse` (then the states are let go)."""
        term = self.weight * self.layer_mse().mean()
        self.student_states.clear()
        self.teacher_states.clear()
        return term

    def loss(self, base: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`base` (a `train.LossFn`) plus the term."""
        def loss(logits: torch.Tensor, labels: torch.Tensor, teacher_logits: torch.Tensor | None) -> torch.Tensor:
            return base(logits, labels, teacher_logits) + self.value()
        return loss


__all__ = ["HiddenStateTerm", "layer_map", "uniform_layer_map", "provenance_layer_map", "check_shapes",
           "FROM_PROVENANCE", "UNIFORM"]
