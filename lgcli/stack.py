"""The canonical view of a checkpoint: per-role tensors stacked over layers,
every axis named (SPEC.md, "A canonical view").

Methods see only `ArchSpec` and `Stack`; adapters (`lgcli.arch`) translate
between a family's state dict and this view. Role names are roles, not state
dict keys: `q`, `k`, `v` are always separate (adapters split fused qkv), and
matrices are in PyTorch layout `(out, in)`.

Axis names (SPEC.md table):

- ``layer``    the stacking axis of per-layer tensors (size = depth)
- ``embed``    the residual width D
- ``attn``     heads x head_dim (q rows; o columns)
- ``kv``       key/value heads x head_dim (k, v rows): ``attn`` without
               grouped-query attention, fewer heads with it
- ``mlp``      the MLP hidden width F
- ``head_dim`` one head's dimension d (q/k norm), fixed under width changes
- ``tokens``   position-embedding tokens (prefix tokens + patches)
- ``classes``  the outputs of a model's head: a classifier's classes, CLIP's
               projection dimension; never resized
- ``vocab``    a text model's vocabulary (token embeddings, LM head): never
               resized
- ``positions`` learned position embeddings of a text model (BERT, GPT-2):
               never resized
- ``heads``    the attention heads of a table indexed by head (Swin's
               relative position bias): follows the heads, H = attn / d
- ``stage_in`` the width a hierarchical model's stage reads from the stage
               before it (Swin's patch merging: 4 neighbours of that width)
- ``-``        an axis no method resizes (image channels, patch pixels, a
               size-1 batch axis, the blocks of a head's grouped input, a window's
               relative positions)

A hierarchical model (Swin) is a sequence of stages, each a canonical Stack
with its own ArchSpec (`ArchSpec.stages`, `Stack.stages`); every tensor
belongs to the stage whose width its axes are on (see `ArchSpec.stages`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from .lazy import torch

LAYER, EMBED, ATTN, KV, MLP, HEAD_DIM, TOKENS, CLASSES, VOCAB, POSITIONS, HEADS, STAGE_IN, FIXED = (
    "layer", "embed", "attn", "kv", "mlp", "head_dim", "tokens", "classes", "vocab", "positions", "heads",
    "stage_in", "-")
AXIS_NAMES = (LAYER, EMBED, ATTN, KV, MLP, HEAD_DIM, TOKENS, CLASSES, VOCAB, POSITIONS, HEADS, STAGE_IN, FIXED)

# The canonical per-layer roles of every family (SPEC.md tables "A canonical
# view" and "Text families"). An adapter has the subset its family has, under
# these names, so that methods and learngene kinds know what a role is (a
# gain, a branch output, an input axis) without knowing any family. The MLP is
# fc2(act(fc1 x)), or with SwiGLU fc2(silu(gate x) * fc1 x): fc1 is "up" and
# fc2 "down" there.
LAYER_ROLE_AXES: dict[str, tuple[str, ...]] = {
    "q": (LAYER, ATTN, EMBED),
    "k": (LAYER, KV, EMBED),
    "v": (LAYER, KV, EMBED),
    "o": (LAYER, EMBED, ATTN),
    "gate": (LAYER, MLP, EMBED),
    "fc1": (LAYER, MLP, EMBED),
    "fc2": (LAYER, EMBED, MLP),
    "q_bias": (LAYER, ATTN),
    "k_bias": (LAYER, KV),
    "v_bias": (LAYER, KV),
    "o_bias": (LAYER, EMBED),
    "gate_bias": (LAYER, MLP),
    "fc1_bias": (LAYER, MLP),
    "fc2_bias": (LAYER, EMBED),
    "norm1_weight": (LAYER, EMBED),
    "norm1_bias": (LAYER, EMBED),
    "norm2_weight": (LAYER, EMBED),
    "norm2_bias": (LAYER, EMBED),
    "ls1": (LAYER, EMBED),
    "ls2": (LAYER, EMBED),
    "q_norm_weight": (LAYER, HEAD_DIM),
    "q_norm_bias": (LAYER, HEAD_DIM),
    "k_norm_weight": (LAYER, HEAD_DIM),
    "k_norm_bias": (LAYER, HEAD_DIM),
    # Swin: a learned bias per relative position in the window and per head,
    # added to the attention logits ((2W - 1)^2 positions, never resized).
    "rel_pos_bias": (LAYER, FIXED, HEADS),
}

# Roles whose values are multiplicative gains (LayerNorm weights, layer scale):
# methods that pad, zero or average must know that "neutral" is 1 for these
# norms, not 0.
NORM_WEIGHT_ROLES = frozenset(
    {"norm1_weight", "norm2_weight", "q_norm_weight", "k_norm_weight",
     "norm_weight", "fc_norm_weight", "pre_norm_weight", "embed_norm_weight", "head_norm_weight",
     "patch_norm_weight", "merge_norm_weight"})

# The biases of those norms: clone sets them to 0 on the channels it pads, so
# that a norm outputs 0 there.
NORM_BIAS_ROLES = frozenset(
    {"norm1_bias", "norm2_bias", "q_norm_bias", "k_norm_bias", "norm_bias", "fc_norm_bias", "pre_norm_bias",
     "embed_norm_bias", "head_norm_bias", "patch_norm_bias", "merge_norm_bias"})

# Norms that the residual stream starts from (ArchSpec.normed_input): the
# stream's first value is a norm's output, not a sum of embeddings.
INPUT_NORM_ROLES = frozenset({"pre_norm_weight", "embed_norm_weight", "patch_norm_weight"})

# Global roles that are lookup tables (a row per token, position or token
# type), not linear maps: their `embed` axis is what they output, so a method
# that keeps the function (clone) tiles it without dividing. A tied LM head
# reads the token table as a linear map: see ArchSpec.tied_head_input.
EMBEDDING_ROLES = frozenset({"token_embed", "pos_embed", "token_type_embed"})


@dataclass
class Named:
    """A tensor with one name per axis."""

    data: torch.Tensor
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.data.dim() != len(self.axes):
            raise ValueError(
                f"tensor of shape {tuple(self.data.shape)} given {len(self.axes)} axis names {self.axes}")
        unknown = [a for a in self.axes if a not in AXIS_NAMES]
        if unknown:
            raise ValueError(f"unknown axis names {unknown}")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def size_of(self, axis: str) -> int:
        return self.data.shape[self.axes.index(axis)]

    def replace(self, data: torch.Tensor) -> "Named":
        return Named(data, self.axes)


@dataclass(frozen=True)
class ArchSpec:
    """Sizes of a transformer, and what its family needs to rebuild it.

    `extras` holds the family's own configuration (for timm ViTs: patch size,
    image size, input channels, classes, prefix tokens, pooling, qkv bias,
    layer scale, ...; for a Hugging Face model, its config.json). Methods may
    read `extras` but treat it as opaque; only adapters interpret it.

    `kv_heads` is the number of key/value heads of grouped-query attention
    (None: as many as query heads). `tied_head_input` names the roles of the
    norm whose output a tied LM head reads (the head being the token
    embedding, transposed), empty when there is no tied head: a method that
    keeps the function scales them when it tiles the width (clone).

    `post_norm` says the family's blocks normalise after the residual sum
    (BERT: x <- LN(x + f(x))) rather than before the branch (x <- x + f(LN x),
    every other family lg reads): a block whose output projections are zero
    is then not the identity, so a method that inserts identity blocks
    (identity-insert) refuses it. The adapter declares it.

    `rms_norm`: the norms on the residual stream are RMSNorms (Llama), not
    LayerNorms. `normed_input`: the residual stream starts at a norm's output
    (`INPUT_NORM_ROLES`: BERT's embedding LayerNorm, CLIP's and timm's
    norm_pre, Swin's patch norm) rather than at a sum of embeddings. Both
    decide whether the stream can take new channels that every norm ignores
    (clone at a width that is no whole multiple); the adapter declares the
    first and reads the second from the roles a checkpoint has.
    """

    family: str
    depth: int
    width: int
    heads: int
    head_dim: int
    mlp_dim: int
    extras: Mapping[str, Any] = field(default_factory=dict)
    heads_assumed: bool = False
    kv_heads: int | None = None
    tied_head_input: tuple[str, ...] = ()
    stages: tuple["ArchSpec", ...] = ()
    stage_input: int | None = None
    post_norm: bool = False
    rms_norm: bool = False
    normed_input: bool = False

    def __post_init__(self) -> None:
        if self.kv_heads is not None and self.kv_heads == self.heads:
            object.__setattr__(self, "kv_heads", None)  # one spelling of "no grouping"
        object.__setattr__(self, "tied_head_input", tuple(self.tied_head_input))
        object.__setattr__(self, "stages", tuple(self.stages))

    @classmethod
    def of_stages(cls, family: str, stages: tuple["ArchSpec", ...], extras: Mapping[str, Any]) -> "ArchSpec":
        """A hierarchical model's spec: its stages, and as its own sizes the
        first stage's (the width a user names), with every stage's blocks as
        its depth."""
        first = stages[0]
        return cls(family=family, depth=sum(s.depth for s in stages), width=first.width, heads=first.heads,
                   head_dim=first.head_dim, mlp_dim=first.mlp_dim, extras=extras, stages=tuple(stages))

    def with_stages(self, stages: tuple["ArchSpec", ...]) -> "ArchSpec":
        """A copy of a hierarchical spec with other stages."""
        return ArchSpec.of_stages(self.family, stages, self.extras)

    @property
    def attn_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def key_value_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def kv_dim(self) -> int:
        return self.key_value_heads * self.head_dim

    def heads_of(self, axis: str) -> int:
        """How many heads an `attn` or `kv` axis holds."""
        return self.key_value_heads if axis == KV else self.heads

    def axis_sizes(self) -> dict[str, int]:
        """The size of every resizable axis kind in a model of this spec."""
        sizes = {LAYER: self.depth, EMBED: self.width, ATTN: self.attn_dim, KV: self.kv_dim,
                 MLP: self.mlp_dim, HEAD_DIM: self.head_dim, HEADS: self.heads}
        if self.stage_input is not None:
            sizes[STAGE_IN] = self.stage_input
        return sizes

    def with_sizes(self, *, depth: int | None = None, width: int | None = None,
                   heads: int | None = None, head_dim: int | None = None,
                   mlp_dim: int | None = None, kv_heads: int | None = None,
                   stage_input: int | None = None) -> "ArchSpec":
        """A copy with some sizes replaced; `heads_assumed` survives only if
        heads are unchanged. Key/value heads follow the query heads unless
        given (a spec with grouped-query attention must be given them)."""
        changes: dict[str, Any] = {}
        for name, value in (("depth", depth), ("width", width), ("heads", heads),
                            ("head_dim", head_dim), ("mlp_dim", mlp_dim), ("kv_heads", kv_heads),
                            ("stage_input", stage_input)):
            if value is not None:
                changes[name] = int(value)
        if "heads" in changes and changes["heads"] != self.heads:
            changes["heads_assumed"] = False
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        if self.stages:
            return (f"{self.family} depths {','.join(str(s.depth) for s in self.stages)} widths "
                    f"{','.join(str(s.width) for s in self.stages)} heads {','.join(str(s.heads) for s in self.stages)}")
        kv = f", {self.kv_heads} key/value heads" if self.kv_heads is not None else ""
        return (f"{self.family} depth {self.depth} width {self.width} heads {self.heads} "
                f"(head dim {self.head_dim}{kv}) mlp {self.mlp_dim}")


class RoleMap(Mapping[str, Named]):
    """Roles whose tensors are made when asked, one at a time, and not kept.

    A lazy stack is what lets lg resize a checkpoint larger than memory: the
    adapter's reader builds a role's stack from the file when a method asks
    for it, and a method's result is itself a RoleMap whose roles are computed
    when the writer asks for them. Axes and shapes are known without making
    anything (`axes_and_shape`), so sizes are checked and the output's header
    is written before any tensor is computed. Each access makes the tensor
    again: hold the Named (or call `Stack.materialized`) to keep it.
    """

    def __init__(self, info: Mapping[str, tuple[tuple[str, ...], tuple[int, ...]]],
                 make: Callable[[str], torch.Tensor],
                 make_layers: Callable[[str, list[int]], torch.Tensor] | None = None) -> None:
        self._info = {role: (tuple(axes), tuple(int(n) for n in shape)) for role, (axes, shape) in info.items()}
        self._make = make
        # Only some layers of a per-layer role, when the maker can read them
        # alone (a shrink that keeps half the layers reads half the bytes).
        self.make_layers = make_layers

    def __getitem__(self, role: str) -> Named:
        axes, shape = self._info[role]
        data = self._make(role)
        if tuple(data.shape) != shape:  # a maker's bug, not a user error
            raise RuntimeError(f"role {role}: made a tensor of shape {tuple(data.shape)}, announced {shape}")
        return Named(data, axes)

    def __contains__(self, role: object) -> bool:  # Mapping's default would make the role
        return role in self._info

    def __iter__(self) -> Iterator[str]:
        return iter(self._info)

    def __len__(self) -> int:
        return len(self._info)

    def axes_and_shape(self, role: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        return self._info[role]


def index_along(tensor: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """``tensor.index_select(dim, index)``, the same values. Along the last
    axis of a stack of three or more axes, torch's CPU kernel is 6-60 times
    slower than the same gather on the stack flattened to two axes (0.74 s
    against 0.09 s for SmolLM2's 30 x 2048 x 576 MLP weights), so that case
    is gathered flattened."""
    index = index.to(tensor.device)
    dim %= tensor.dim()
    if tensor.dim() > 2 and dim == tensor.dim() - 1 and tensor.is_contiguous():
        return tensor.reshape(-1, tensor.shape[-1]).index_select(1, index).view(*tensor.shape[:-1], len(index))
    return tensor.index_select(dim, index)


def role_layers(roles: Mapping[str, Named], role: str, indices: list[int]) -> torch.Tensor:
    """Some layers of a per-layer role (in this order), reading no more than
    those when the lazy stack can, else selected from the whole role."""
    if isinstance(roles, RoleMap) and roles.make_layers is not None:
        return roles.make_layers(role, list(indices))
    data = roles[role].data
    return data.index_select(0, torch.as_tensor(list(indices), dtype=torch.long, device=data.device))


class SourceRole:
    """A source role as a method sees it: a Named whose axes and shape are
    known at once and whose tensor is made on first use of `.data` (and then
    held by this object only), or only some of its layers with `.layers()`.
    Handing the tensor over (`methods.common.release`) never touches the
    caller's stack."""

    def __init__(self, roles: Mapping[str, Named], role: str) -> None:
        self._roles, self._role = roles, role
        self.axes, self.shape = axes_and_shape(roles, role)
        self._data: torch.Tensor | None = None

    @property
    def data(self) -> torch.Tensor:
        if self._data is None:
            self._data = self._roles[self._role].data
        return self._data

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        self._data = value

    def size_of(self, axis: str) -> int:
        return self.shape[self.axes.index(axis)]

    def layers(self, indices: list[int]) -> torch.Tensor:
        return role_layers(self._roles, self._role, indices)


def axes_and_shape(roles: Mapping[str, Named], role: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A role's axes and shape, without making it when `roles` is lazy."""
    if isinstance(roles, RoleMap):
        return roles.axes_and_shape(role)
    named = roles[role]
    return named.axes, named.shape


def target_shape(axes: tuple[str, ...], shape: tuple[int, ...], target: "ArchSpec") -> tuple[int, ...]:
    """The shape a role takes in `target`: every resizable axis at the
    target's size, the others (channels, tokens, classes) unchanged."""
    sizes = target.axis_sizes()
    return tuple(sizes.get(axis, n) for axis, n in zip(axes, shape))


@dataclass
class Stack:
    """Per-layer tensors stacked over layers (axis 0 is ``layer``), and global
    tensors, each with named axes.

    `layers` maps a role from LAYER_ROLE_AXES to a Named whose first axis is
    ``layer``; `globals` maps a global role (``patch_embed_weight``,
    ``pos_embed``, ``cls_token``, ``head_weight``, ...) to a Named. Which
    roles are present depends on the architecture (biases, layer scale, ...).
    Either mapping may be a RoleMap (lazy: made when asked); everything here
    that only needs sizes reads them without making a tensor.

    A hierarchical model's stack holds nothing itself: its `stages` are one
    Stack per stage (`ArchSpec.stages`), each with the stage's blocks and the
    tensors on its width (patch embedding, patch merging, head).
    """

    layers: Mapping[str, Named] = field(default_factory=dict)
    globals: Mapping[str, Named] = field(default_factory=dict)
    stages: tuple["Stack", ...] = ()

    def shapes(self) -> Iterator[tuple[str, tuple[str, ...], tuple[int, ...], bool]]:
        """(role, axes, shape, is_per_layer) for every tensor, making none
        (a hierarchical stack's: every stage's, in order)."""
        for stage in self.stages:
            yield from stage.shapes()
        yield from self._own_shapes()

    def _own_shapes(self) -> Iterator[tuple[str, tuple[str, ...], tuple[int, ...], bool]]:
        for role in self.layers:
            yield (role, *axes_and_shape(self.layers, role), True)
        for role in self.globals:
            yield (role, *axes_and_shape(self.globals, role), False)

    @property
    def depth(self) -> int:
        first = next(iter(self.layers), None)
        return 0 if first is None else axes_and_shape(self.layers, first)[1][0]

    @property
    def lazy(self) -> bool:
        return (isinstance(self.layers, RoleMap) or isinstance(self.globals, RoleMap)
                or any(stage.lazy for stage in self.stages))

    def items(self) -> Iterator[tuple[str, Named]]:
        """All tensors, per-layer roles first, as (role, Named); a lazy role is
        made as it is reached."""
        yield from self.layers.items()
        yield from self.globals.items()

    def materialized(self) -> "Stack":
        """The same stack with every tensor made and held (a no-op copy of the
        mappings when nothing is lazy)."""
        return Stack(layers=dict(self.layers.items()), globals=dict(self.globals.items()),
                     stages=tuple(stage.materialized() for stage in self.stages))

    def check(self, spec: ArchSpec) -> None:
        """Raise ValueError unless every named axis has the size `spec` gives it
        (a hierarchical stack: each stage the size of its spec's stage)."""
        if len(self.stages) != len(spec.stages):
            raise ValueError(f"{len(self.stages)} stages, the spec says {len(spec.stages)}")
        for index, (stage, stage_spec) in enumerate(zip(self.stages, spec.stages)):
            try:
                stage.check(stage_spec)
            except ValueError as exc:
                raise ValueError(f"stage {index}: {exc}") from None
        sizes = spec.axis_sizes()
        for role, axes, shape, _ in self._own_shapes():
            for axis, size in zip(axes, shape):
                if axis in sizes and sizes[axis] != size:
                    raise ValueError(
                        f"{role}: axis '{axis}' has size {size}, the spec says {sizes[axis]}")

    def num_parameters(self) -> int:
        return sum(math.prod(shape) for _, _, shape, _ in self.shapes())

    def largest_role_elements(self) -> int:
        """Elements of the largest single role tensor: what bounds a resize's memory."""
        return max((math.prod(shape) for _, _, shape, _ in self.shapes()), default=0)


def copy_elements(source: torch.Tensor, out: torch.Tensor, start: int) -> None:
    """Fill `out` with elements ``start .. start + out.numel()`` of `source`,
    flattened (a tensor held in memory, read as a file's tensor is)."""
    with torch.no_grad():
        out.view(-1).copy_(source.reshape(-1)[start:start + out.numel()])


@dataclass
class TensorGroup:
    """State-dict tensors an adapter writes together (ViT: one role over all
    layers, or q, k and v fused per layer): their names and shapes, known
    before anything is computed so that a header can be written first, and
    `make()`, which yields (name, tensor) in exactly that order. Only the roles
    of one group are made at a time."""

    entries: list[tuple[str, tuple[int, ...]]]
    make: Callable[[], Iterator[tuple[str, torch.Tensor]]]
