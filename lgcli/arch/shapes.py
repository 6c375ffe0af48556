"""A model's size from the shapes of its state dict: the one way every
family counts its parameters and bounds a resize's memory (no family of its
own). A family gives `model_shapes(spec)`: the state dict its library builds
for `spec`, as shapes, computed from the sizes where that is cheap (a timm
ViT's, a Swin's: nothing is built, so a request of absurd sizes is refused
at once) or read off the model built on the meta device (a Hugging Face
family's).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from .declared import Layout

Shape = tuple[int, ...]


@dataclass(frozen=True)
class LayerShapes:
    """`depth` layers of one layout (a model of stages has one per stage),
    under `prefix`: one layer's tensors, by their suffix."""

    layout: Layout
    prefix: str
    depth: int
    layer: Mapping[str, Shape]

    def key(self, index: int, suffix: str) -> str:
        return f"{self.prefix}{self.layout.layers}.{index}.{suffix}"


@dataclass(frozen=True)
class ModelShapes:
    """A state dict as shapes: its layers (`LayerShapes`) and its other tensors by key."""

    layers: tuple[LayerShapes, ...]
    globals: Mapping[str, Shape]

    @classmethod
    def of_state(cls, shapes: Mapping[str, Shape], layouts: list[tuple[Layout, str]]) -> "ModelShapes":
        """A whole state dict's shapes sorted by `layouts` ((layout, prefix) each)."""
        layers = [dict() for _ in layouts]
        depths = [0] * len(layouts)
        other = {}
        patterns = [re.compile(rf"^{re.escape(prefix + layout.layers)}\.([0-9]+)\.(.+)$") for layout, prefix in layouts]
        for key, shape in shapes.items():
            for index, ((layout, _), pattern) in enumerate(zip(layouts, patterns)):
                match = pattern.match(key)
                if match and (match.group(2) in layout.layer_keys or match.group(2) in layout.fused_keys):
                    layers[index][match.group(2)] = shape
                    depths[index] = max(depths[index], int(match.group(1)) + 1)
                    break
            else:
                other[key] = shape
        return cls(tuple(LayerShapes(layout, prefix, depth, layer)
                         for (layout, prefix), depth, layer in zip(layouts, depths, layers)), other)

    def state(self) -> dict[str, Shape]:
        """Every key of the state dict, with its shape."""
        state = dict(self.globals)
        for part in self.layers:
            state.update({part.key(i, suffix): shape for i in range(part.depth) for suffix, shape in part.layer.items()})
        return state

    def parameter_count(self) -> int:
        """Parameters of the model (every layer's tensors and the others)."""
        return (sum(part.depth * sum(map(math.prod, part.layer.values())) for part in self.layers)
                + sum(map(math.prod, self.globals.values())))

    def largest_role_elements(self) -> int:
        """Elements of the largest role stack (what bounds the memory of a
        resize, which makes one role at a time): a per-layer role stacked over
        its layout's layers, one role of a fused tensor as its share (one of
        q, k, v, not the fused qkv), and each other tensor."""
        stacks = [part.depth * math.prod(shape) // len(part.layout.fused_keys.get(suffix, ("",)))
                  for part in self.layers for suffix, shape in part.layer.items()]
        return max([*stacks, *map(math.prod, self.globals.values())], default=0)


def window_of_table(rows: int, extra: int = 0) -> int | None:
    """W of a relative position table of (2W - 1)^2 + `extra` rows (Swin's
    per window, BEiT's with 3 more for its class token): None, no such W."""
    side = math.isqrt(max(rows - extra, 0))
    return (side + 1) // 2 if side * side == rows - extra and side % 2 == 1 else None
