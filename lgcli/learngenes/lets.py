"""LeTs: learnable transformations of a compact learngene (Xia et al.,
NeurIPS 2024, "Initializing Variable-sized Vision Transformers from
Learngene with Learnable Transformation"; SPEC.md "LeTs").

The learngene is a compact model: K layers (``G<k>.<role>``, k = 0..K-1,
every per-layer role) and the globals, all at a width s narrower than the
auxiliary model's. Learned linear maps (after LiGO) turn it into a model of
depth L and width D:

- **Width maps** add channels: along every axis of kind embed, attn, kv or
  mlp a tensor of n channels gains D_axis - n more, each a learned linear
  combination of its n, ``x' = [x; F x]`` with F of shape (D_axis - n, n);
  applied on every axis, a matrix becomes ``[I; F_out] W [I; F_in]^T``. One
  map for the embed axis (``width.embed``), shared by every tensor that reads
  or writes the residual stream (patch and position embeddings, norms, q, k,
  v, o, fc1, fc2, the head), and per learngene layer k one map for the
  attention channels (``width<k>.attn``: q's rows, o's columns), one for the
  key/value channels (``width<k>.kv``: k's and v's rows) and one for the MLP
  neurons (``width<k>.mlp``: fc1's and gate's rows, fc2's columns).
- **Depth maps** add layers: layer l of a descendant of depth L is
  ``sum_k M_L[l, k] * widen(G_k)``, with one learned (L, K) matrix per role
  and per trained depth L (``depth<L>.<role>``; biases are roles of their
  own, so they have their own coefficients, as the reference code's).

A descendant of width w takes the first w - s rows of every width map (the
reference code's "select specific parameters" at stage 2), so a narrower
descendant is exactly the nested slice of a wider one; condensing draws a
(depth, width) pair each step from ``--depths`` and ``--widths`` and trains
the learngene and every map by the descendant's loss ``(1 - alpha) CE +
alpha tau^2 KL``.

The reading lg takes of the paper's public code (eddiexia98/LeTs,
``transmodule.py`` and ``lets.py``; facts only, nothing copied):

- The expansion ``[W; F W]`` with the learngene's own channels first, one
  embedding map shared by every tensor of the residual stream, and per
  learngene layer maps of the attention and MLP channels: as the reference.
  The reference keeps separate maps for q, k and v (o's input taking v's)
  and a separate map for the head's input; lg has one map per axis kind (q
  and o share the attention map, k and v the key/value map, the head reads
  the residual stream through the embedding map), so one rule serves every
  family, grouped-query attention included.
- Depth: the reference mixes a fixed window of two learngene layers per
  auxiliary layer (8 learngene layers into 16), with coefficients shared by
  pairs of layers, and a descendant's layers pick windows and coefficients
  from a list given by hand. lg learns LiGO's full (L, K) map for every depth
  it trains, so `lg grow --depth L` needs no list: any trained depth is built
  by its own map; an untrained one is refused (or reached with --method).
- Initialisation as the reference's defaults: depth maps "stackbert_noisy"
  (row l one-hot at the learngene layer the SWS rule puts layer l in, plus
  uniform noise in [0, 0.03), normalised to sum 1), width maps "rand"
  (uniform, each row normalised to sum 1). The learngene starts from the
  family's random initialisation, or (``--init ancestry``) from the teacher:
  learngene layer k is the mean of the teacher layers the SWS rule groups
  into k, on the teacher's most important channels (the importance order
  `lg condense` measures before a width-trained run), and the width maps
  are fitted to the teacher by least squares (lg's own addition,
  `fitted_width_maps`).
- Defaults: a learngene of half the auxiliary depth at half its width (the
  reference: 8 layers of 384 for a 16 x 768 auxiliary model), or the
  narrowest of ``--widths``; depths 2 to twice the auxiliary depth, as TLEG.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import LgError, UsageError
from ..lazy import torch
from ..options import Option
from ..stack import ATTN, EMBED, KV, LAYER_ROLE_AXES, MLP, ArchSpec, Named, Stack
from .base import (ExpandContext, Learngene, LearngeneKind, depths_text, distillation_options, expected_globals,
                   globals_from_tensors, init_option, is_global)
from .sws import proportional_stages
from .widths import (nearest_trained_size, nested_slice, parse_widths, refuse_untrained, shape_text, trained_widths,
                     width_spec, widths_text)

GENE = "G"            # G<k>.<role>: learngene layer k
DEPTH_MAP = "depth"   # depth<L>.<role>: the (L, K) depth map of a trained depth L
WIDTH_MAP = "width"   # width.embed, width<k>.attn / .kv / .mlp: the width maps
LAYER_MAP_AXES = (ATTN, KV, MLP)  # the axes with a width map per learngene layer
# The reference's "stackbert_noisy" depth initialisation: noise in [0, 0.03).
DEPTH_INIT_NOISE = 0.03


# ---------------------------------------------------------------- names

def gene_name(layer: int, role: str) -> str:
    return f"{GENE}{layer}.{role}"


def depth_map_name(depth: int, role: str) -> str:
    return f"{DEPTH_MAP}{depth}.{role}"


def width_map_name(axis: str, layer: int | None = None) -> str:
    """``width.embed`` (shared), or ``width<k>.<axis>`` of learngene layer k."""
    return f"{WIDTH_MAP}.{axis}" if layer is None else f"{WIDTH_MAP}{layer}.{axis}"


def _parts(name: str) -> tuple[str, int | None, str] | None:
    """(prefix, number, rest) of a LeTs tensor's name, None for a global."""
    head, _, rest = name.partition(".")
    for prefix in (DEPTH_MAP, WIDTH_MAP, GENE):
        if head.startswith(prefix) and rest:
            digits = head[len(prefix):]
            if digits == "":
                return prefix, None, rest
            if digits.isdigit():
                return prefix, int(digits), rest
    return None


def gene_depth_of(tensors: Mapping[str, Any]) -> int:
    return 1 + max(p[1] for p in map(_parts, tensors) if p is not None and p[0] == GENE)


def gene_roles(tensors: Mapping[str, Any]) -> list[str]:
    return sorted({p[2] for p in map(_parts, tensors) if p is not None and p[0] == GENE})


# ---------------------------------------------------------------- the maps

def widen(tensor: torch.Tensor, axes: Sequence[str], maps: Mapping[str, torch.Tensor],
          sizes: Mapping[str, int]) -> torch.Tensor:
    """`tensor` with every axis that has a map in `maps` widened to `sizes`:
    ``[x; F[:m - n] x]`` along it (n channels held, m asked), the learngene's
    own channels first. Applied axis by axis, a matrix becomes
    ``[I; F_out] W [I; F_in]^T`` (the order does not matter)."""
    for dim, axis in enumerate(axes):
        if axis not in maps or axis not in sizes:
            continue
        held, asked = tensor.shape[dim], sizes[axis]
        if asked < held:  # check_target stands before every build
            raise RuntimeError(f"axis {axis} holds {held} channels, {asked} were asked: a LeTs map only adds")
        if asked == held:
            continue
        mixing = maps[axis][: asked - held]
        moved = tensor.movedim(dim, 0)
        added = (mixing @ moved.reshape(held, -1)).reshape(asked - held, *moved.shape[1:]).movedim(0, dim)
        tensor = torch.cat([tensor, added], dim)
    return tensor


def normalised_uniform(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """The reference's "rand" init of a width map: uniform, each row summing to 1."""
    values = torch.rand(shape, generator=generator)
    return values / values.sum(-1, keepdim=True)


def fitted_width_maps(shapes: Mapping[str, tuple[int, int]], grouped: Mapping[int, Sequence[Named]],
                      globals_: Sequence[Named]) -> dict[str, torch.Tensor]:
    """Width maps fitted to a teacher (lg's warm start; the reference starts
    from random weights): for each map, the ridge least-squares F with
    ``X[n:] ~ F X[:n]`` over every tensor the map widens, X the tensor's
    full-width values along the map's axis (the other axes flattened), n the
    learngene's channels. The embedding map fits every learngene layer's
    tensors (`grouped[k]`: the group means the learngene layers are sliced
    from) and the globals; learngene layer k's maps fit its own tensors."""
    fitted = {}
    for name, (added, held) in shapes.items():
        _, layer, axis = _parts(name)
        pool = [t for k in grouped for t in grouped[k]] + list(globals_) if layer is None else grouped[layer]
        gram = torch.zeros(held, held, dtype=torch.float64)
        cross = torch.zeros(added, held, dtype=torch.float64)
        for named in pool:
            for dim, tensor_axis in enumerate(named.axes):
                if tensor_axis != axis:
                    continue
                values = named.data.double().movedim(dim, 0).reshape(held + added, -1)
                gram += values[:held] @ values[:held].T
                cross += values[held:] @ values[:held].T
        # A ridge of 1e-3 of the mean diagonal keeps a rank-deficient fit finite.
        ridge = 1e-3 * float(gram.diagonal().mean()) + 1e-12
        fitted[name] = torch.linalg.solve(gram + ridge * torch.eye(held, dtype=torch.float64), cross.T).T.float()
    return fitted


def initial_depth_map(depth: int, gene_depth: int, generator: torch.Generator) -> torch.Tensor:
    """The reference's "stackbert_noisy": row l is one-hot at the learngene
    layer the proportional stage rule gives layer l (`sws.proportional_stages`:
    SWS's own rule from the auxiliary depth up), plus uniform noise in [0, 0.03),
    normalised to sum 1."""
    values = torch.rand((depth, gene_depth), generator=generator) * DEPTH_INIT_NOISE
    values[torch.arange(depth), torch.tensor(proportional_stages(depth, gene_depth))] = 1.0
    return values / values.sum(-1, keepdim=True)


# ---------------------------------------------------------------- the kind

class Lets(LearngeneKind):
    name = "lets"
    summary = ("LeTs: a compact learngene (K layers at width s) and learned linear maps to the depths and widths "
               "it was trained at; layer l of L is sum_k M_L[l, k] [I; F_out] G_k [I; F_in]^T")
    condense_options = (
        *distillation_options(1.0, "the LeTs reference run: 1, pure soft distillation"),
        Option("gene_depth", int, None, "LeTs: layers of the compact learngene [default: half the auxiliary depth, "
               "as the reference's 8 of 16]", minimum=1),
        Option("gene_width", int, None, "LeTs: width of the compact learngene, a whole number of heads at most the "
               "narrowest of --widths [default: the narrowest of --widths, else half the auxiliary width]",
               minimum=1),
        Option("depths", str, None, "train the auxiliary model at a depth drawn each step from these depths, "
               "e.g. 3-12 or 3,6,12 (LeTs: each depth gets its own learned depth map, and the learngene builds exactly "
               "these) [default: 2 to twice the auxiliary depth]"),
        Option("widths", str, None, "train the learngene at a width drawn each step from this list, e.g. 64,128 "
               "(LeTs: the first rows of its learned width maps); the widest must be the auxiliary model's"),
        init_option(),
        Option("width_maps", str, "auto", "LeTs: where the width maps start: rand (the reference's: uniform rows "
               "summing to 1), fit (least squares from the learngene's channels to the teacher's others; needs "
               "--init ancestry), or auto: fit when starting from the teacher, else rand",
               choices=("auto", "fit", "rand")),
    )
    expand_options = ()

    # ------------------------------------------------------------ sizes

    def training_depths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...]:
        """`--depths` read as TLEG reads it, with the auxiliary depth always
        in (condensing scores the auxiliary model at it)."""
        from .tleg import KIND as TLEG

        _refuse_stages(aux)
        return tuple(sorted(set(TLEG.training_depths(aux, options)) | {aux.depth}))

    def training_widths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...]:
        # Always a tuple: the learngene is narrower than the auxiliary model,
        # so a warm start slices the teacher's most important channels.
        _refuse_stages(aux)
        return parse_widths(options.get("widths"), aux) or (aux.width,)

    def _gene_spec(self, aux: ArchSpec, options: Mapping[str, Any]) -> ArchSpec:
        """The compact learngene as a model: `--gene-depth` x `--gene-width`."""
        widths = self.training_widths(aux, options)
        depth = options.get("gene_depth")
        depth = max(1, aux.depth // 2) if depth is None else int(depth)
        if depth > aux.depth:
            raise UsageError(f"--gene-depth {depth} is deeper than the auxiliary model ({aux.depth} layers): the "
                             f"learngene is the compact one (give --gene-depth {aux.depth} or fewer)")
        group = aux.head_dim * (aux.heads // aux.key_value_heads)  # one grouped-query group of heads
        width = options.get("gene_width")
        if width is None:
            width = widths[0] if len(widths) > 1 else max(group, aux.width // 2 // group * group)
        width = int(width)
        if width % group:
            raise UsageError(f"--gene-width {width} is not a whole number of heads of dim {aux.head_dim}"
                             f"{'' if group == aux.head_dim else ' in groups of ' + str(group // aux.head_dim)}")
        if width > widths[0]:
            raise UsageError(f"--gene-width {width} is wider than the narrowest trained width {widths[0]}: LeTs "
                             f"maps only add channels (give --gene-width {widths[0]} or less)")
        return width_spec(aux, width).with_sizes(depth=depth)

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        gene = self._gene_spec(aux, options)
        return {"aux_depth": aux.depth, "width": aux.width, "heads": aux.heads, "mlp_dim": aux.mlp_dim,
                "gene_depth": gene.depth, "gene_width": gene.width, "gene_heads": gene.heads,
                "gene_mlp_dim": gene.mlp_dim, "widths": list(self.training_widths(aux, options)),
                "depths": list(self.training_depths(aux, options))}

    def trained_widths(self, learngene: Learngene) -> tuple[int, ...]:
        return trained_widths(learngene.sizes, learngene.spec)

    def trained_depths(self, learngene: Learngene) -> tuple[int, ...]:
        return tuple(_int_list(learngene.sizes, "depths"))

    def _recorded_gene(self, learngene: Learngene) -> ArchSpec:
        sizes, own = learngene.sizes, learngene.spec
        depth, width = sizes.get("gene_depth"), sizes.get("gene_width")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (depth, width)) \
                or width % own.head_dim or not all(width <= w <= own.width for w in self.trained_widths(learngene)):
            raise LgError("refused: this lets learngene's metadata lacks a valid 'gene_depth', 'gene_width' and "
                          "'widths' (each trained width at least the learngene's)")
        return width_spec(own, width).with_sizes(depth=depth)

    # ------------------------------------------------------------ condensing

    def initial(self, aux: ArchSpec, aux_init: Stack, options: Mapping[str, Any],
                generator: torch.Generator, ancestry: Stack | None = None,
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The learngene: from random weights, layer k is the family's random
        initialisation of the first auxiliary layer the SWS rule groups into
        k, on its first channels; from an `ancestry` (the teacher at this
        width, its channels in order of importance), the mean of the teacher
        layers grouped into k, on its first channels. The depth maps start
        as the reference's ("stackbert_noisy", `initial_depth_map`); the
        width maps as the reference's ("rand", `normalised_uniform`) from
        random weights, and from an `ancestry` fitted to it
        (`fitted_width_maps`: the least-squares map from the kept channels to
        the others, so the auxiliary model starts as close to the teacher as
        a linear rebuild of its dropped channels gets)."""
        gene = self._gene_spec(aux, options)
        gene_sizes, aux_sizes = gene.axis_sizes(), aux.axis_sizes()
        source = ancestry if ancestry is not None else aux_init
        tensors: dict[str, torch.Tensor] = {}
        grouped: dict[int, list[Named]] = {k: [] for k in range(gene.depth)}  # group means at the full width
        for role, named in source.layers.items():
            layers = named.data.float()
            owner = torch.tensor(proportional_stages(layers.shape[0], gene.depth))
            for k in range(gene.depth):
                members = (owner == k).nonzero().flatten()
                if not len(members):  # a teacher shallower than the learngene: the nearest layer stands in
                    members = torch.tensor([round(k * (layers.shape[0] - 1) / max(1, gene.depth - 1))])
                value = layers.index_select(0, members).mean(0) if ancestry is not None else layers[members[0]]
                grouped[k].append(Named(value, LAYER_ROLE_AXES[role][1:]))
                tensors[gene_name(k, role)] = nested_slice(grouped[k][-1], gene_sizes).clone()
        for role, named in source.globals.items():
            tensors["global." + role] = nested_slice(Named(named.data.float(), named.axes), gene_sizes).clone()
        roles = sorted(source.layers)
        for depth in self.training_depths(aux, options):
            for role in roles:
                tensors[depth_map_name(depth, role)] = initial_depth_map(depth, gene.depth, generator)
        shapes = _width_map_shapes(roles, gene, aux_sizes)
        maps = options.get("width_maps") or "auto"
        if maps == "fit" and ancestry is None:
            raise UsageError("--width-maps fit fits the maps to the teacher: it needs --init ancestry (the auxiliary "
                             "model at the teacher's width)")
        if maps == "fit" or (maps == "auto" and ancestry is not None):
            tensors.update(fitted_width_maps(shapes, grouped, list(ancestry.globals.values())))
        else:
            tensors.update({name: normalised_uniform(shape, generator) for name, shape in shapes.items()})
        return tensors, {}

    def no_weight_decay(self, name: str) -> bool:
        # A depth map's row is the reference's 1-D coefficient vector, which
        # its optimiser (timm's) keeps out of weight decay; width maps decay.
        parts = _parts(name)
        return parts is not None and parts[0] == DEPTH_MAP

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(tensors)

    # ------------------------------------------------------------ building

    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec) -> Stack:
        """The model of `spec`: every learngene layer widened by the first
        rows of its width maps, then mixed over depth by the depth map of
        `spec.depth`; the globals widened by the embedding map."""
        sizes = spec.axis_sizes()
        depth_of_gene = gene_depth_of(tensors)
        embed_map = tensors.get(width_map_name(EMBED))
        shared = {EMBED: embed_map} if embed_map is not None else {}
        per_layer = []
        for k in range(depth_of_gene):
            maps = dict(shared)
            maps.update({axis: tensors[width_map_name(axis, k)] for axis in LAYER_MAP_AXES
                         if width_map_name(axis, k) in tensors})
            per_layer.append(maps)
        layers = {}
        for role in gene_roles(tensors):
            axes = LAYER_ROLE_AXES[role]
            widened = torch.stack([widen(tensors[gene_name(k, role)], axes[1:], per_layer[k], sizes)
                                   for k in range(depth_of_gene)])
            mixing = tensors[depth_map_name(spec.depth, role)]  # (L, K)
            built = (mixing @ widened.reshape(depth_of_gene, -1)).reshape(spec.depth, *widened.shape[1:])
            layers[role] = Named(built, axes)
        globals_ = {role: Named(widen(named.data, named.axes, shared, sizes), named.axes)
                    for role, named in globals_from_tensors(tensors, spec.family).items()}
        return Stack(layers=layers, globals=globals_)

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        """Refuse a size the learngene was not trained at, in one line naming
        the trained widths and depths and the way to the rest (--method)."""
        own = learngene.spec
        widths, depths = self.trained_widths(learngene), self.trained_depths(learngene)
        width_ok = any((target.width, target.heads, target.key_value_heads, target.mlp_dim) ==
                       (built.width, built.heads, built.key_value_heads, built.mlp_dim)
                       for built in (width_spec(own, w) for w in widths))
        if width_ok and target.depth in depths:
            return
        trained = widths_text(own, widths)
        asked = (f"this LeTs learngene was trained at width{'s' if len(widths) > 1 else ''} {trained} and "
                 f"depth{'s' if len(depths) > 1 else ''} {depths_text(depths, ', ')}; depth {target.depth}, width "
                 f"{shape_text(target)} was asked: build a trained size")
        nearest = nearest_trained_size(widths, depths, target.width, target.depth)
        if nearest is None:
            raise LgError(f"{asked}, then shrink one and grow the other in two steps")
        start_width, start_depth = nearest
        refuse_untrained(asked, width_spec(own, start_width).with_sizes(depth=start_depth), target,
                         f"depth {start_depth}, width {start_width}")

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        gene = self._recorded_gene(learngene)
        depths = _int_list(learngene.sizes, "depths")
        if not depths or learngene.spec.depth not in depths:
            raise LgError("refused: this lets learngene's metadata lacks a valid 'depths' list")
        gene_sizes = gene.axis_sizes()
        expected: dict[str, tuple[int, ...]] = {}
        for role, named in template.layers.items():
            shape = _sized(named.data.shape[1:], LAYER_ROLE_AXES[role][1:], gene_sizes)
            for k in range(gene.depth):
                expected[gene_name(k, role)] = shape
            for depth in depths:
                expected[depth_map_name(depth, role)] = (depth, gene.depth)
        for name, shape in expected_globals(template).items():
            expected[name] = _sized(shape, template.globals[name[len("global."):]].axes, gene_sizes)
        expected.update(_width_map_shapes(sorted(template.layers), gene, learngene.spec.axis_sizes()))
        return expected

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        stack = self.built_descendant(learngene, target)
        gene = self._recorded_gene(learngene)
        return stack, {"rule": "LeTs: layer l = sum_k M_L[l, k] [I; F_out] G_k [I; F_in]^T (learned maps)",
                       "depth": target.depth, "width": target.width,
                       "learngene": f"{gene.depth} layers at width {gene.width}"}

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        own = learngene.spec
        gene = self._recorded_gene(learngene)
        widths, depths = list(self.trained_widths(learngene)), list(self.trained_depths(learngene))
        roles = gene_roles(learngene.tensors)
        maps = sum(t.numel() for name, t in learngene.tensors.items()
                   if (parts := _parts(name)) is not None and parts[0] != GENE)
        shapes = widths_text(own, widths)
        return {"holds": f"a compact learngene of {gene.depth} layer{'s' if gene.depth != 1 else ''} at width "
                         f"{gene.width} ({gene.heads} head{'s' if gene.heads != 1 else ''}, "
                         f"MLP {gene.mlp_dim}) for {len(roles)} per-layer roles, "
                         f"{sum(map(is_global, learngene.tensors))} global tensors, and {maps:,} numbers of learned "
                         f"depth and width maps",
                "roles": roles,
                "depths": depths,
                "widths": widths,
                "trained_at": {"widths": widths, "depths": depths_text(depths, ", ")},
                "becomes": f"depths {depths_text(depths, ', ')} at width{'s' if len(widths) > 1 else ''} {shapes} (the "
                           f"sizes it was trained at; other sizes: lg grow --method M)"}


# ---------------------------------------------------------------- helpers

def _refuse_stages(aux: ArchSpec) -> None:
    if aux.stages:
        raise UsageError("lets builds a model of one stack of blocks; a model of stages (Swin) is not supported "
                         "(use tleg, wave, sws or peg)")


def _width_map_shapes(roles: Sequence[str], gene: ArchSpec, widest: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """Every width map a learngene of `gene` needs to reach the `widest`
    sizes: the embedding map, and per learngene layer one for each of
    attn, kv and mlp that some role has (none where nothing is added)."""
    gene_sizes = gene.axis_sizes()
    present = {axis for role in roles for axis in LAYER_ROLE_AXES[role][1:]}
    shapes: dict[str, tuple[int, int]] = {}
    if widest[EMBED] > gene_sizes[EMBED]:
        shapes[width_map_name(EMBED)] = (widest[EMBED] - gene_sizes[EMBED], gene_sizes[EMBED])
    for k in range(gene.depth):
        for axis in LAYER_MAP_AXES:
            if axis in present and widest[axis] > gene_sizes[axis]:
                shapes[width_map_name(axis, k)] = (widest[axis] - gene_sizes[axis], gene_sizes[axis])
    return shapes


def _sized(shape: Sequence[int], axes: Sequence[str], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """`shape` with every width axis at `sizes` (the compact learngene's)."""
    return tuple(sizes[axis] if axis in (EMBED, *LAYER_MAP_AXES) else n for n, axis in zip(shape, axes))


def _int_list(sizes: Mapping[str, Any], key: str) -> list[int]:
    values = sizes.get(key)
    if isinstance(values, list) and values and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                                   for v in values):
        return values
    return []


KIND = Lets()
