"""The model a learngene's tensors are trained through: a stock model of the
family whose weights are computed from the tensors on every forward pass.

Apart from `base` because it is an `nn.Module`: defining it imports torch,
which the kinds' registry must not (`lg grow --help` builds its flags from
the kinds' declared options; `lgcli.lazy`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from ..arch import get_adapter
from ..sizing import spec_at_depth
from ..stack import ArchSpec, Named, Stack
from .base import GLOBAL_PREFIX, is_global


def _module_name(name: str) -> str:
    # nn.Module attribute names may not contain '.', role names do ("A.q").
    return name.replace(".", ":")


def _tensor_name(module_name: str) -> str:
    return module_name.replace(":", ".")


class GeneratedModel(nn.Module):
    """A stock model of the family, whose every weight is computed from a
    learngene's tensors on each forward pass (SPEC.md: TLEG Eq. 1, WAVE Eq. 4).

    `trainable` become parameters, `frozen` persistent buffers (they move
    with `.to()` and are saved in training checkpoints, so a resumed run is
    exact). The family's own model, built on the meta device (no memory, no
    initialisation), runs with the built weights through
    `torch.func.functional_call`: the forward pass is timm's own code, one
    code path for every kind.
    """

    def __init__(self, spec: ArchSpec, build: Callable[[Mapping[str, torch.Tensor], ArchSpec], Stack],
                 trainable: Mapping[str, torch.Tensor], frozen: Mapping[str, torch.Tensor] | None = None,
                 no_weight_decay: Callable[[str], bool] = lambda name: False,
                 depths: Sequence[int] | None = None, widths: Sequence[int] | None = None,
                 width_rule: str = "sample"):
        super().__init__()
        self.spec = spec
        # In training, each forward pass builds the model at a depth drawn from
        # `depths` (torch's RNG, which the training loop seeds per step, so a
        # resumed run draws the same depths); in eval, at spec.depth.
        self.depths = tuple(depths) if depths else ()
        # And at a width drawn from `widths` after the depth (SPEC.md
        # "Learngenes at several widths"): the kind's build slices the
        # learngene's (widest) tensors to it. No widths: no draw, so a run
        # without them draws the same depths as before.
        self.widths = tuple(widths) if widths else ()
        # Which widths one training forward builds (`widths.widths_of_step`):
        # one drawn (`sample`), or several whose logits are stacked along the
        # batch axis, widest first, for `widths.summed_over_widths`.
        self.width_rule = width_rule
        self._build = build
        self._no_decay = no_weight_decay
        self.adapter = get_adapter(spec.family)
        self.learngene = nn.ParameterDict(
            {_module_name(k): nn.Parameter(v.detach().float().clone()) for k, v in trainable.items()})
        for name, tensor in (frozen or {}).items():
            self.register_buffer(_module_name(name), tensor.detach().float().clone(), persistent=True)
        # The spec each drawn depth builds: a model of stages (Swin) draws its
        # deepest stage's depth, as `--depth N` sets it (sizing.stage_depths).
        if self.widths:
            from .widths import width_spec

            by_width = {width: width_spec(spec, width) for width in self.widths}
        else:
            by_width = {spec.width: spec}
        object.__setattr__(self, "_specs", {(depth, width): spec_at_depth(at_width, depth)
                                            for depth in self.depths or (spec.depth,)
                                            for width, at_width in by_width.items()})
        # Not registered submodules: their (meta) parameters are placeholders
        # that functional_call replaces, never trained or saved. The family's
        # buffers are computed once per depth built, on first use.
        object.__setattr__(self, "_skeletons", {})
        object.__setattr__(self, "_family_buffers", {})

    @property
    def input_size(self) -> tuple[int, int, int]:
        """(channels, height, width) of an image family's input."""
        return self.adapter.input_size(self.spec)

    def trainable_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors trained (parameters), by role name."""
        return {_tensor_name(k): v.detach() for k, v in self.learngene.items()}

    def frozen_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors held fixed (buffers), by role name."""
        return {_tensor_name(k): v for k, v in self.named_buffers()}

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every learngene tensor, trainable and frozen, by its role name."""
        out = {_tensor_name(k): v for k, v in self.learngene.items()}
        out.update({_tensor_name(k): v for k, v in self.named_buffers()})
        return out

    def build_stack(self, spec: ArchSpec | None = None) -> Stack:
        return self._build(self.tensors(), spec or self.spec)

    def _skeleton(self, spec: ArchSpec) -> nn.Module:
        """The family's model of `spec` on the meta device (no memory, no init)."""
        shape = _shape(spec)  # only the (deepest stage's) depth and the width differ between specs
        if shape not in self._skeletons:
            with torch.device("meta"):
                self._skeletons[shape] = self.adapter.create_model(spec)
        skeleton = self._skeletons[shape]
        skeleton.train(self.training)  # dropout / drop-path follow the wrapper
        return skeleton

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """What the family's model returns for these inputs (a timm model's
        logits for images; a transformers model's output, `.logits`
        included, for `input_ids=`)."""
        spec = self.spec
        if self.training and self.widths and self.width_rule != "sample":
            from .widths import widths_of_step

            outputs = [self._forward(self._specs[self._draw_depth(), width], args, kwargs)
                       for width in widths_of_step(self.widths, self.width_rule, _draw)]
            return _stacked(outputs)
        if self.training and (self.depths or self.widths):
            depth = self._draw_depth()
            width = self.widths[_draw(len(self.widths))] if self.widths else spec.width
            spec = self._specs[depth, width]
        return self._forward(spec, args, kwargs)

    @property
    def passes_per_step(self) -> int:
        """Forward and backward passes one training step costs (one per width it builds)."""
        from .widths import passes_per_step

        return passes_per_step(self.widths, self.width_rule) if self.widths else 1

    def _draw_depth(self) -> int:
        return self.depths[_draw(len(self.depths))] if self.depths else self.spec.depth

    def _forward(self, spec: ArchSpec, args: tuple, kwargs: dict) -> Any:
        state = self.adapter.model_state(spec, self.build_stack(spec))
        shape = _shape(spec)
        if shape not in self._family_buffers:
            self._family_buffers[shape] = self.adapter.model_buffers(spec)
        device = next(iter(state.values())).device
        state.update({name: buffer.to(device) for name, buffer in self._family_buffers[shape].items()})
        return torch.func.functional_call(self._skeleton(spec), state, args, kwargs, strict=True)

    @property
    def task(self) -> str:
        """What the family's model does (`lgcli.arch.base.TASKS`)."""
        return self.adapter.task(self.spec)

    @property
    def config(self) -> Any:
        """The family model's configuration (a transformers config, whose
        vocabulary and positions text evaluation reads); None for timm."""
        return getattr(self._skeleton(self.spec), "config", None)

    def no_weight_decay(self) -> set[str]:
        """Names (as `named_parameters` gives them) AdamW must not decay."""
        # The family's own choice for its globals (timm: position embedding
        # and prefix tokens), and the kind's for its tensors (WAVE scalers).
        family_roles = self.adapter.no_weight_decay_roles()
        return {f"learngene.{k}" for k in self.learngene.keys()
                if self._no_decay(_tensor_name(k))
                or (is_global(_tensor_name(k)) and _tensor_name(k)[len(GLOBAL_PREFIX):] in family_roles)}

    @torch.no_grad()
    def materialise(self) -> Stack:
        """The built weights as a plain Stack (detached, float32, on the CPU)."""
        return _detached(self.build_stack())

    def trained_tensors(self) -> dict[str, torch.Tensor]:
        return {name: tensor.detach().cpu().clone() for name, tensor in self.tensors().items()}


def _draw(count: int) -> int:
    """An index below `count` from torch's RNG (seeded per step by the training loop)."""
    return int(torch.randint(count, ()))


def _stacked(outputs: list[Any]) -> Any:
    """Several passes' outputs as one, their logits stacked along the batch
    axis (a timm model's logits tensor, or a transformers output whose
    `.logits` is replaced; its other fields are the first pass's)."""
    if isinstance(outputs[0], torch.Tensor):
        return torch.cat(outputs, dim=0)
    first = outputs[0]
    first.logits = torch.cat([output.logits for output in outputs], dim=0)
    return first


def _shape(spec: ArchSpec) -> tuple[int, int]:
    return spec.depth, spec.width


def _detached(stack: Stack) -> Stack:
    """`stack` detached on the CPU, stage by stage for a model of stages."""
    return Stack(layers={r: Named(n.data.detach().cpu(), n.axes) for r, n in stack.layers.items()},
                 globals={r: Named(n.data.detach().cpu(), n.axes) for r, n in stack.globals.items()},
                 stages=tuple(_detached(stage) for stage in stack.stages))
