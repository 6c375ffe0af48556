"""WAVE: weight templates shared by every layer and size, combined per layer
by small scalers (SPEC.md "WAVE", wave.txt, wave-appendix.txt).

    W_role^(l) = sum_t T_role^(t) (x) S_role^(l,t)                      (WAVE Eq. 4)

with the Kronecker layout ``(T (x) S)[r s1 + a, c s2 + b] = T[r, c] S[a, b]``
(templates interleave, they do not tile) and ``s_i = M_i / w_i`` for a target
matrix M1 x M2 and templates w1 x w2. Vectors (biases, norm weights) follow
the same rule in 1-D.

Roles: every per-layer tensor of the canonical stack, with q, k, v fused into
``qkv`` (and their biases into ``qkv_bias``) in the family's fused row order,
as the paper's W_qkv. Template configuration (Table C.2), for an auxiliary
model of width D and a template dimension D0 (default D): matrix templates
D0 x D0, counts qkv 6, o 2, fc1 8, fc2 8 (two per D x D block of the
auxiliary model; with D0 < D, two per D0 x D0 block, so that Eq. B.1 reaches
every block); vector templates @ 4 of their auxiliary length scaled by
D0 / D along width axes. `--templates` overrides any role
(``qkv=64x64@6,norm1_weight=64@4``).

Condensing starts from random templates (the paper), or with `--init
ancestry` (the default when the auxiliary model has the teacher's width)
from the templates that rebuild the teacher best under Eq. B.1's scalers
(`padding_templates`).

Condensing trains T and S together by ``(1 - alpha) CE + alpha tau^2 KL``
(Eq. 6 is KL + CE: alpha = 0.5, twice smaller, which AdamW's update does not
see); the learngene keeps T and the globals. Growing: S initialised by Eq. B.1
for the target depth and width, T frozen, S (and the globals) fitted for a few
hundred steps when data is given, then ``W = sum T (x) S`` is materialised.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Mapping

from ..checkpoint import check_memory
from ..errors import LgError
from ..lazy import torch
from ..options import Option
from ..sizing import DEFAULT_MAX_PARAMS, at_width
from ..stack import ATTN, EMBED, FIXED, KV, LAYER_ROLE_AXES, MLP, ArchSpec, Named, Stack
from .base import (ExpandContext, Learngene, LearngeneKind, distillation_options, drawn_depths, drawn_sizes,
                   expected_globals, fit_options, globals_as_tensors, globals_from_tensors, init_option, is_global,
                   trained_depths_text)
from .widen import widen_globals
from .widths import NestedWidths, width_rule_option, nested_slice, width_spec

if TYPE_CHECKING:
    from .generated import GeneratedModel

# Table C.2 counts per matrix role; vectors take 4.
MATRIX_COUNTS = {"qkv": 6, "o": 2, "fc1": 8, "fc2": 8, "gate": 8}  # SwiGLU's gate as its up projection
OTHER_MATRIX_COUNT = 2
VECTOR_COUNT = 4
# Eq. B.1's noise scale epsilon.
SCALER_NOISE = 1e-6
INIT_STD = 0.02
WIDTH_AXES = (EMBED, ATTN, KV, MLP)
# Where a descendant's scalers start (`lg grow --scalers`).
SCALER_STARTS = ("auto", "eq-b1")
EQ_B1_START = "WAVE Eq. B.1 (linear padding)"
# q, k and v (and their biases) are one WAVE role: the paper's W_qkv.
FUSED = {"qkv": ("q", "k", "v"), "qkv_bias": ("q_bias", "k_bias", "v_bias")}
FUSED_PART_OF = {part: fused for fused, parts in FUSED.items() for part in parts}


# ---------------------------------------------------------------- Eq. 4 and Eq. B.1

def kronecker_sum(templates: torch.Tensor, scalers: torch.Tensor) -> torch.Tensor:
    """WAVE Eq. 4 for every layer at once: ``W[l] = sum_t T[t] (x) S[l, t]``.

    templates (N, w1, w2) and scalers (L, N, s1, s2) give (L, w1 s1, w2 s2);
    vectors: templates (N, w) and scalers (L, N, s) give (L, w s). The layout
    is ``W[l, r s1 + a, c s2 + b] = sum_t T[t, r, c] S[l, t, a, b]``
    (torch.kron's, SPEC.md "WAVE")."""
    if templates.dim() == 2:
        depth, _, s = scalers.shape
        return torch.einsum("tr,lta->lra", templates, scalers).reshape(depth, -1)
    depth, _, s1, s2 = scalers.shape
    _, w1, w2 = templates.shape
    return torch.einsum("trc,ltab->lracb", templates, scalers).reshape(depth, w1 * s1, w2 * s2)


def linear_padding_scalers(depth: int, count: int, scale: tuple[int, ...],
                           generator: torch.Generator | None = None) -> torch.Tensor:
    """WAVE appendix Eq. B.1: ``S^(l,t) = alpha_t 1(i, j) + eps N(0, 1)`` with
    ``alpha_t = 1`` for ``t <= N / 2`` else ``l / L`` (l = 1..L),
    ``i = floor(((t - 1) mod (s1 s2)) / s2)``, ``j = (t - 1) mod s2``.
    Returns (L, N, *scale); a vector's scale is (s,) (s2 = 1)."""
    s1, s2 = (scale[0], 1) if len(scale) == 1 else scale
    scalers = SCALER_NOISE * torch.randn(depth, count, s1, s2, generator=generator)
    for t in range(1, count + 1):
        i = ((t - 1) % (s1 * s2)) // s2
        j = (t - 1) % s2
        for layer in range(1, depth + 1):
            alpha = 1.0 if t <= count / 2 else layer / depth
            scalers[layer - 1, t - 1, i, j] += alpha
    return scalers.reshape(depth, count, *scale)


def keeps_scalers(learngene: Learngene) -> bool:
    """Whether a WAVE learngene holds its auxiliary model's trained scalers
    (`S.<role>`); files written before lg kept them have none."""
    return any(name.startswith("S.") for name in learngene.tensors)


def resampled_scalers(scalers: torch.Tensor, depth: int) -> torch.Tensor:
    """Trained scalers (L, N, ...) at another depth L': layer l' takes the
    linear interpolation of the trained layers at the same relative depth,
    x = (l' - 1) / (L' - 1) of the way from the first layer to the last (the
    first and last layers kept; at L' = L the scalers themselves). Eq. B.1
    starts the scalers linear in l / L; this keeps whatever training made of
    that line when the depth changes."""
    source = scalers.shape[0]
    if depth == source:
        return scalers.clone()
    # On the scalers' device: condensing on a GPU resamples them at every step.
    if depth == 1 or source == 1:
        position = torch.zeros(depth, dtype=torch.float64, device=scalers.device)
    else:
        position = torch.arange(depth, dtype=torch.float64, device=scalers.device) * (source - 1) / (depth - 1)
    low = position.floor().long().clamp(max=source - 1)
    high = (low + 1).clamp(max=source - 1)
    weight = (position - low).to(scalers.dtype).view(-1, *([1] * (scalers.dim() - 1)))
    return scalers[low] * (1 - weight) + scalers[high] * weight


def padding_templates(weights: torch.Tensor, count: int, scale: tuple[int, ...]) -> torch.Tensor:
    """The templates that best rebuild `weights` (L, m1, m2) or (L, m), in
    least squares, under Eq. B.1's scalers at depth L without their noise:
    the warm start of `--init ancestry`.

    Eq. B.1 puts template t at one block (i_t, j_t) of every layer with
    weight alpha_t(l) (1 or l / L), so each block (a, b) of layer l is
    ``sum over t at (a, b) of alpha_t(l) T_t`` (Eq. 4): one small regression
    over the layers per block, for all its elements at once. With templates
    as wide as the model (Table C.2), every block gets one template at 1 and
    one at l / L: a least-squares line over depth, TLEG's (appendix Prop. 1).
    A block no template reaches (counts below twice the blocks) stays
    outside the fit; a template no layer distinguishes gets the minimum-norm
    share (the pseudo-inverse)."""
    s1, s2 = (scale[0], 1) if len(scale) == 1 else scale
    depth = weights.shape[0]
    w1, w2 = weights.shape[1] // s1, (weights.shape[2] // s2 if weights.dim() == 3 else 1)
    # blocks[l, a, b] is the (w1, w2) matrix at rows r s1 + a, columns c s2 + b.
    blocks = weights.double().reshape(depth, w1, s1, w2, s2).permute(0, 2, 4, 1, 3)
    layers = torch.arange(1, depth + 1, dtype=torch.float64)
    templates = torch.zeros(count, w1 * w2, dtype=torch.float64)
    for a in range(s1):
        for b in range(s2):
            placed = [t for t in range(1, count + 1) if ((t - 1) % (s1 * s2)) // s2 == a and (t - 1) % s2 == b]
            if not placed:
                continue
            design = torch.stack([torch.ones(depth, dtype=torch.float64) if t <= count / 2 else layers / depth
                                  for t in placed], dim=1)
            solved = torch.linalg.pinv(design) @ blocks[:, a, b].reshape(depth, -1)
            templates[[t - 1 for t in placed]] = solved
    shape = (count, w1, w2) if weights.dim() == 3 else (count, w1)
    return templates.reshape(shape).float()


# ---------------------------------------------------------------- roles and shapes

def role_axes(role: str) -> tuple[str, ...]:
    """The axes of one layer's tensor of a WAVE role (the fused qkv's first
    axis is three attention axes end to end)."""
    return LAYER_ROLE_AXES[FUSED[role][0] if role in FUSED else role][1:]


def role_shape(role: str, spec: ArchSpec, fixed: tuple[int, ...] | list[int] | None = None) -> tuple[int, ...]:
    """One layer's shape of a WAVE role in a model of `spec`. An axis no
    size of the spec sets (a Swin block's window positions, FIXED) is never
    resized: its length is taken from `fixed`, a shape of the role (the
    auxiliary model's, or the templates', which span it whole)."""
    sizes = spec.axis_sizes()
    shape = [sizes[axis] if axis != FIXED else (fixed or ())[index] if fixed else None
             for index, axis in enumerate(role_axes(role))]
    if None in shape:
        raise LgError(f"WAVE needs the length of {role}'s fixed axis")
    if role in FUSED:
        shape[0] *= 3
    return tuple(shape)


def wave_roles(layer_roles: list[str], spec: ArchSpec) -> list[str]:
    """The stack's per-layer roles with q, k, v (and their biases) fused,
    as the paper's W_qkv; under grouped-query attention k and v have fewer
    rows than q, so the three stay apart."""
    fuse = spec.key_value_heads == spec.heads
    roles: list[str] = []
    for role in layer_roles:
        name = FUSED_PART_OF.get(role, role) if fuse else role
        if name not in roles:
            roles.append(name)
    return roles


def parse_templates(text: str | None) -> dict[str, tuple[tuple[int, ...], int]]:
    """``qkv=64x64@6,norm1_weight=64@4`` -> {role: (shape, count)}."""
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        try:
            role, rest = part.split("=")
            shape_text, count_text = rest.split("@")
            shape = tuple(int(n) for n in shape_text.lower().split("x"))
            count = int(count_text)
        except ValueError:
            raise LgError(f"--templates takes ROLE=W1xW2@N or ROLE=W@N, comma-separated "
                          f"(e.g. qkv=64x64@6,norm1_weight=64@4), not {part.strip()!r}") from None
        if count < 1 or any(n < 1 for n in shape) or len(shape) not in (1, 2):
            raise LgError(f"--templates {part.strip()!r}: sizes and counts must be positive")
        out[role.strip()] = (shape, count)
    return out


def template_config(aux: ArchSpec, roles: list[str], template_dim: int | None,
                    overrides: Mapping[str, tuple[tuple[int, ...], int]],
                    fixed: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, dict[str, Any]]:
    """Table C.2 scaled to the auxiliary width: {role: {"shape", "count"}}.
    `fixed`: the auxiliary model's shape of each role with an axis no size
    sets (a Swin's position tables); the templates span that axis whole."""
    fixed = fixed or {}
    dim = template_dim or aux.width
    unknown = sorted(set(overrides) - set(roles))
    if unknown:
        raise LgError(f"--templates: no role {unknown[0]!r} in this model (roles: {', '.join(roles)})")
    config: dict[str, dict[str, Any]] = {}
    for role in roles:
        axes = role_axes(role)
        if role in overrides:
            shape, count = overrides[role]
            if len(shape) != len(axes):
                raise LgError(f"--templates {role}: a {'matrix' if len(axes) == 2 else 'vector'} role needs "
                              f"{len(axes)} sizes, not {len(shape)}")
        elif len(axes) == 2:
            # Table C.2's D0 x D0 blocks; an axis D0 does not divide (an MLP
            # of 344 at width 128, GQA's k and v of 64 rows) gets a template
            # as long as the axis scaled by D0 / D, so it grows with the width.
            full = role_shape(role, aux, fixed.get(role))
            shape = tuple(length if axis == FIXED else dim if length % dim == 0
                          else _scaled(role, length, dim, aux.width, "W1xW2@2")
                          for axis, length in zip(axes, full))
            # Table C.2 gives every D0 x D0 block of the auxiliary model two
            # templates (one at weight 1, one at l / L under Eq. B.1) when
            # D0 = D; with smaller templates there are more blocks, and lg
            # keeps two per block, so Eq. B.1 reaches every block (the
            # learngene holds as many numbers as at D0 = D).
            blocks = math.prod(m // w for m, w in zip(full, shape))
            count = max(MATRIX_COUNTS.get(role, OTHER_MATRIX_COUNT), 2 * blocks)
        else:
            (length,) = role_shape(role, aux, fixed.get(role))
            if axes[0] in WIDTH_AXES:
                length = _scaled(role, length, dim, aux.width, "W@4")
            shape, count = (length,), VECTOR_COUNT
        config[role] = {"shape": list(shape), "count": int(count)}
    _check_template_size(config)
    return config


def _scaled(role: str, length: int, dim: int, width: int, form: str) -> int:
    """`length` scaled by template dim / width, which must be whole."""
    if (length * dim) % width:
        raise LgError(f"template dim {dim} does not scale {role} (length {length}) to a whole "
                      f"length: give it with --templates {role}={form}")
    return length * dim // width


def _check_template_size(config: Mapping[str, Mapping[str, Any]]) -> None:
    """Templates are sized before they are allocated: their count times their
    shape, with the optimiser's two moments, must fit the parameter limit and
    the memory available (`--templates qkv=64x64@1000000000` is refused)."""
    elements = sum(entry["count"] * math.prod(entry["shape"]) for entry in config.values())
    if elements > DEFAULT_MAX_PARAMS:
        raise LgError(f"the templates hold {elements:.3g} values, over lg's limit of {DEFAULT_MAX_PARAMS:.3g}")
    check_memory(elements * 4 * 3, "the templates (with the optimiser's state)")


def scales_at(config: Mapping[str, Mapping[str, Any]], spec: ArchSpec) -> dict[str, tuple[int, ...]] | str:
    """s = M / w per role at `spec`, or the first reason it is not whole."""
    scales = {}
    for role, entry in config.items():
        shape = role_shape(role, spec, entry["shape"])
        if any(m % w for m, w in zip(shape, entry["shape"])):
            return (f"{role} of shape {'x'.join(map(str, shape))} is no whole multiple of its "
                    f"{'x'.join(map(str, entry['shape']))} templates")
        scales[role] = tuple(m // w for m, w in zip(shape, entry["shape"]))
    return scales


# ---------------------------------------------------------------- the kind

class Wave(NestedWidths, LearngeneKind):
    name = "wave"
    summary = "WAVE: weight templates shared by all layers, combined by per-layer scalers (any depth; widths " \
              "that are whole multiples of the templates)"
    condense_options = (
        *distillation_options(0.5, "WAVE Eq. 6, KL + CE, is alpha 0.5 up to a factor 2"),
        Option("template_dim", int, None, "matrix templates are D0 x D0, vectors scaled by D0 / width "
               "[default: the auxiliary width]; descendants' widths are multiples of it", minimum=1),
        Option("templates", str, None, "per-role override, ROLE=W1xW2@N or ROLE=W@N, comma-separated "
               "(roles: qkv, o, fc1, fc2, qkv_bias, o_bias, fc1_bias, fc2_bias, norm1_weight, ...)"),
        Option("widths", str, None, "train the learngene at a width drawn each step from this list, e.g. 64,128: "
               "the first channels, heads and MLP neurons of the built weights (TLEG's --widths); the widest "
               "must be the auxiliary model's"),
        width_rule_option("sample"),
        Option("depths", str, None, "train at a depth drawn each step from these depths, e.g. 2-12 or 3,6,12, "
               "its scalers the auxiliary model's resampled over depth (as lg grow starts them), so that every "
               "depth in it makes a good descendant at step 0 [default: the auxiliary depth only, as the paper]"),
        init_option(),
    )
    fitted_part = "the scalers"
    unfitted_note = ("wave: scalers not fitted (no --data): the descendant keeps them where they start (the "
                     "auxiliary model's, or Eq. B.1's)")
    # 32, not the probe's 64: a fitting step costs a full training step of
    # the descendant (the backward pass must reach every layer's scalers), and
    # a few thousand scalers need no larger batch; this keeps 300 steps of a
    # 6 x 192 target near a minute on two CPU cores (benchmarks/wave_fit_speed.py).
    expand_options = (
        *fit_options(lr=1e-3, batch_size=32),
        Option("fit_globals", bool, True, "fit the globals (embeddings, final norm, head) with the scalers"),
        Option("widen", str, "interleave", "how the globals reach a new width: interleave (the "
               "Kronecker layout's order) or tile", choices=("interleave", "tile")),
        Option("scalers", str, "auto", "where the descendant's scalers start: auto (the auxiliary model's, "
               "which the learngene keeps, resampled over depth; Eq. B.1 where it has none or the width differs) "
               "or eq-b1 (the paper's, WAVE Eq. B.1)", choices=SCALER_STARTS),
    )

    # -------------------------------------------------------- condensing
    def template_config_for(self, aux: ArchSpec, aux_init: Stack,
                            options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        roles = wave_roles(list(aux_init.layers), aux)
        config = template_config(aux, roles, options.get("template_dim"), parse_templates(options.get("templates")),
                                 fixed=fixed_shapes(aux_init, roles))
        scales = scales_at(config, aux)
        if isinstance(scales, str):
            raise LgError(f"the auxiliary model cannot be built from these templates: {scales}")
        return config

    def initial(self, aux: ArchSpec, aux_init: Stack, options: Mapping[str, Any],
                generator: torch.Generator, ancestry: Stack | None = None,
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Scalers by Eq. B.1 at the auxiliary depth; templates at random
        (scaled so W has std 0.02) with the gains' first templates at the
        family's initial value, or, from an `ancestry` (the teacher at this
        width), the least-squares templates under those scalers
        (`padding_templates`) and the teacher's globals."""
        config = self.template_config_for(aux, aux_init, options)
        scales = scales_at(config, aux)
        assert not isinstance(scales, str)
        tensors: dict[str, torch.Tensor] = {}
        for role, entry in config.items():
            count, shape, scale = entry["count"], tuple(entry["shape"]), scales[role]
            templates = torch.zeros(count, *shape)
            if ancestry is not None:
                templates = padding_templates(_fused(ancestry, role), count, scale)
            elif len(shape) == 2:
                # Each block of W starts as the sum of count / (s1 s2) templates
                # (Eq. B.1): scale so W has the family's usual std 0.02.
                per_block = max(1, count // math.prod(scale))
                torch.nn.init.trunc_normal_(templates, std=INIT_STD / math.sqrt(per_block), generator=generator)
            elif not role.endswith("_bias"):
                # Gains (norm weights, layer scale): the first templates, which
                # Eq. B.1 places once each at weight 1, hold the family's
                # initial value, so every layer starts with it.
                initial = _fused_initial(aux_init, role).reshape(shape[0], -1)
                for t in range(min(count // 2 or 1, initial.shape[1])):
                    templates[t] = initial[:, t]
            tensors[f"T.{role}"] = templates
            tensors[f"S.{role}"] = linear_padding_scalers(aux.depth, count, scale, generator)
        source = aux_init if ancestry is None else ancestry
        tensors.update({name: t.float().clone() for name, t in globals_as_tensors(source).items()})
        return tensors, {}

    def trained_widths(self, learngene: Learngene) -> tuple[int, ...] | None:
        """Only a learngene condensed with --widths: without, WAVE's own
        widths are the multiples of its templates (`valid_widths`)."""
        return super().trained_widths(learngene) if "widths" in learngene.sizes else None

    def _sliced_width(self, learngene: Learngene, target: ArchSpec) -> bool:
        """Whether `target` is a trained width narrower than the learngene,
        built as the nested slice of its widest (SPEC.md "Learngenes at
        several widths") rather than by templates at that width."""
        widths = self.trained_widths(learngene) or ()
        if target.width == learngene.spec.width or target.width not in widths:
            return False
        built = width_spec(learngene.spec, target.width)
        return (target.heads, target.key_value_heads, target.mlp_dim) == (
            built.heads, built.key_value_heads, built.mlp_dim)

    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec) -> Stack:
        """Eq. 4 at the scalers' width and `spec`'s depth (scalers of another
        depth resampled to it, `resampled_scalers`); for a narrower `spec` (a width drawn
        by --widths, or a trained width grown), its nested slice: the first
        channels, heads and MLP neurons of every built weight and global."""
        sizes = spec.axis_sizes()
        layers: dict[str, Named] = {}
        for name, templates in tensors.items():
            if not name.startswith("T."):
                continue
            role = name[2:]
            scalers = tensors[f"S.{role}"]
            if scalers.shape[0] != spec.depth:  # a depth drawn by --depths: the scalers resampled to it
                scalers = resampled_scalers(scalers, spec.depth)
            built = kronecker_sum(templates, scalers)
            parts = zip(FUSED[role], built.chunk(3, dim=1)) if role in FUSED else ((role, built),)
            for part, data in parts:
                named = Named(data, LAYER_ROLE_AXES[part])
                layers[part] = Named(nested_slice(named, sizes), named.axes)
        globals_ = {role: Named(nested_slice(named, sizes), named.axes)
                    for role, named in globals_from_tensors(tensors, spec.family).items()}
        return Stack(layers=layers, globals=globals_)

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # The paper's learngene is the templates and globals; lg keeps the
        # auxiliary model's trained scalers too (a few thousand numbers), so
        # that its own size grows back into the model condensing trained and
        # other depths start from them resampled (`prepare`).
        return dict(tensors)

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        sizes = {"aux_depth": aux.depth, "aux_width": aux.width,
                 "template_dim": options.get("template_dim") or aux.width}
        # The widths `lg grow` builds as slices and `lg inspect` lists, and the depths drawn.
        sizes.update(drawn_sizes(aux, options, self.training_widths(aux, options), self.training_width_rule(options)))
        return sizes

    def training_depths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        return drawn_depths(aux, options)

    def no_weight_decay(self, name: str) -> bool:
        # Scalers are weights of order 1 (Eq. B.1), not parameters to shrink.
        return name.startswith("S.")

    # -------------------------------------------------------- growing
    def _config(self, learngene: Learngene) -> dict[str, dict[str, Any]]:
        # By role name: a refusal names the same role however the tensors were read.
        return {name[2:]: {"shape": list(t.shape[1:]), "count": int(t.shape[0])}
                for name, t in sorted(learngene.tensors.items()) if name.startswith("T.")}

    def valid_widths(self, learngene: Learngene, limit: int = 8) -> list[int]:
        own, config, found = learngene.spec, self._config(learngene), []
        for width in range(own.head_dim, 16 * own.width + 1, own.head_dim):
            try:
                spec = at_width(own, width)
            except LgError:  # a head count the key/value heads do not divide
                continue
            if not isinstance(scales_at(config, spec), str):
                found.append(width)
                if len(found) == limit:
                    break
        return found

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        if self._sliced_width(learngene, target):
            return
        problem = scales_at(self._config(learngene), target)
        if isinstance(problem, str):
            widths = ", ".join(map(str, self.valid_widths(learngene)))
            trained = self.trained_widths(learngene)
            also = (f"; trained at widths {', '.join(map(str, trained))}, built as slices; other widths: add "
                    f"--method (e.g. bot) to resize the nearest trained width") if trained else ""
            raise LgError(f"WAVE cannot build width {target.width} (MLP {target.mlp_dim}) from this learngene: "
                          f"{problem}. Valid widths: {widths}, ...{also}")

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        """Templates for every fused role, each (count, *shape) with a shape
        that tiles the auxiliary model's tensor of that role (counts are the
        file's own: Table C.2 is a default, not a rule)."""
        expected = expected_globals(template)
        roles = wave_roles(list(template.layers), learngene.spec)
        fixed = fixed_shapes(template, roles)
        for role in roles:
            found = learngene.tensors.get(f"T.{role}")
            full = role_shape(role, learngene.spec, fixed.get(role))
            shape = tuple(found.shape) if found is not None and found.dim() == 1 + len(full) else (1, *full)
            if found is not None and (shape[0] < 1 or any(w < 1 or m % w for m, w in zip(full, shape[1:]))):
                shape = (max(shape[0], 1), *full)  # not a tiling: report the auxiliary model's own shape
            expected[f"T.{role}"] = shape
        if keeps_scalers(learngene):
            scales = scales_at({role: {"shape": list(expected[f"T.{role}"][1:])} for role in roles}, learngene.spec)
            for role in roles:  # the auxiliary model's: (depth, count, *s) per role
                scale = scales[role] if isinstance(scales, dict) else (1,)
                expected[f"S.{role}"] = (learngene.spec.depth, expected[f"T.{role}"][0], *scale)
        return expected

    def prepare(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
                seed: int = 0) -> GeneratedModel:
        """The descendant before fitting: its scalers (the auxiliary model's
        kept ones resampled to the target depth, `starts_from_kept`, else Eq.
        B.1's for the target depth and width), templates frozen (buffers),
        globals widened (trainable with `fit_globals`), as a model that builds
        ``W = sum T (x) S`` (Eq. 4)."""
        config = self._config(learngene)
        own = learngene.spec
        # A trained width narrower than the learngene is the slice of the
        # widest (`build` slices): scalers and globals at the learngene's width.
        sliced = self._sliced_width(learngene, target)
        built = own.with_sizes(depth=target.depth) if sliced else target
        if self.starts_from_kept(learngene, config, built, options):
            scalers = {f"S.{role}": resampled_scalers(learngene.tensors[f"S.{role}"].float(), target.depth)
                       for role in config}
            start = ("the auxiliary model's, as condensed" if target.depth == own.depth else
                     f"the auxiliary model's, resampled from depth {own.depth} to {target.depth}")
        else:
            scales = scales_at(config, built)
            assert not isinstance(scales, str)  # check_target ran
            generator = torch.Generator().manual_seed(seed)
            scalers = {f"S.{role}": linear_padding_scalers(target.depth, entry["count"], scales[role], generator)
                       for role, entry in config.items()}
            start = EQ_B1_START
        templates = {name: t.float() for name, t in learngene.tensors.items() if name.startswith("T.")}
        globals_ = widen_globals(globals_from_tensors(learngene.tensors, own.family), own.width, built.width,
                                 options["widen"], stage_in=(own.stage_input, built.stage_input)
                                 if own.stage_input is not None and built.stage_input is not None else None)
        global_tensors = globals_as_tensors(Stack(globals=globals_))
        fit_globals = options["fit_globals"]
        trainable = {**scalers, **(global_tensors if fit_globals else {})}
        frozen = {**templates, **({} if fit_globals else global_tensors)}
        from .generated import GeneratedModel  # an nn.Module: torch is imported here

        model = GeneratedModel(target, self.build, trainable, frozen, self.no_weight_decay)
        model.scaler_start = start  # what prepared_report says
        return model

    @staticmethod
    def starts_from_kept(learngene: Learngene, config: Mapping[str, Mapping[str, Any]], built: ArchSpec,
                         options: Mapping[str, Any]) -> bool:
        """Whether a descendant built at `built`'s width starts from the
        auxiliary model's kept scalers: the learngene has them, `--scalers`
        allows it, and they have the shapes this width needs (the learngene's
        own width, or a trained width sliced from it); `config` is the
        learngene's templates (`_config`)."""
        if options.get("scalers", "auto") != "auto" or not keeps_scalers(learngene):
            return False
        return scales_at(config, built) == scales_at(config, learngene.spec.with_sizes(depth=built.depth))

    def prepared_report(self, model: GeneratedModel) -> dict[str, Any]:
        return {"scalers": getattr(model, "scaler_start", EQ_B1_START),
                "scaler_parameters": sum(t.numel() for name, t in model.tensors().items() if name.startswith("S."))}

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        started = time.perf_counter()
        model = self.prepare(learngene, target, options, context.seed)
        report: dict[str, Any] = {**self.prepared_report(model), "widen": options["widen"]}
        report.update(context.fit(model, learngene, options, self.fitted_part, self.unfitted_note))
        report["seconds"] = round(time.perf_counter() - started, 3)
        return model.materialise(), report

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        config, widths = self._config(learngene), self.valid_widths(learngene)
        scalers, start = (", and the auxiliary model's scalers", "the auxiliary model's, resampled") \
            if keeps_scalers(learngene) else \
            ("", "initialised by Eq. B.1")
        described = {"holds": f"templates for {len(config)} roles "
                              f"({sum(e['count'] for e in config.values())} in all), "
                              f"{sum(map(is_global, learngene.tensors))} global tensors{scalers}",
                     "templates": {role: f"{'x'.join(map(str, e['shape']))} @ {e['count']}"
                                   for role, e in config.items()},
                     "depths": f"any depth >= 1 (scalers {start}; fitted with --data)",
                     "widths": widths,
                     "becomes": f"any depth, widths {', '.join(map(str, widths))}, ..."}
        trained = self.trained_widths(learngene)
        drawn = trained_depths_text(learngene.sizes, learngene.spec.depth)
        if "trained_depths" in learngene.sizes and not trained:
            described["trained_at"] = {"depths": drawn}
        if trained:
            described["widths"] = sorted(set(widths) | set(trained))
            described["trained_at"] = {"widths": list(trained), "depths": drawn,
                                       "width_rule": learngene.sizes.get("width_rule", "sample")}
            described["becomes"] += (f" (trained at widths {', '.join(map(str, trained))}: the narrower ones are "
                                     f"slices of the widest)")
        return described


def fixed_shapes(stack: Stack, roles: list[str]) -> dict[str, tuple[int, ...]]:
    """One layer's shape of each WAVE role with a FIXED axis (no size of the
    spec sets it: a Swin block's window positions), read from `stack`."""
    return {role: tuple(stack.layers[role].data.shape[1:]) for role in roles
            if role not in FUSED and FIXED in role_axes(role)}


def _fused(stack: Stack, role: str) -> torch.Tensor:
    """A WAVE role over every layer, (L, ...) (fused roles concatenated along their first axis)."""
    if role in FUSED:
        return torch.cat([stack.layers[part].data.float() for part in FUSED[role]], dim=1)
    return stack.layers[role].data.float()


def _fused_initial(stack: Stack, role: str) -> torch.Tensor:
    """One layer's initial value of a WAVE role (fused roles concatenated)."""
    return _fused(stack, role)[0]


KIND = Wave()
