"""PEG: a learngene sampled as probabilistic mixtures of the ancestry's heads
and FFNs, grown by a small learnable map φ (SPEC.md "PEG", peg.txt Eqs. 3-6).

Sampling (training-free, `lg condense --method peg`), from an ancestry of
`L_a` layers, `H_a` heads of dimension `d`, width `D`:

- MSA learngene, per ancestry layer `a`: `H_b` heads, head `h` =
  ``Σ_i p_ih A_i`` over the layer's `H_a` heads (Eq. 3), `A_i` being head `i`'s
  rows of q, k, v (and their biases) and its columns of the output projection
  `o`. The layer's other MSA-side tensors (norm1, o's bias, layer scale, q/k
  norms) are inherited as they are.
- FFN learngene: `L_b` FFNs, ``F_l = Σ_k p_lk F_k`` over the `L_a` ancestry
  FFNs (Eq. 5), ``F_k = (W1, b1, W2, b2)``. lg mixes each FFN's own norm2 (and
  layer scale) with the same weights: they belong to that FFN's input and
  output, and SPEC.md names no other layer they could be inherited from.
- Mixture weights: non-negative rows that sum to one, seeded: ``gaussian``
  (SPEC.md's reading of the paper: ``|z| / Σ|z|``, z ~ N(0, 1)), ``uniform``
  (u ~ U(0, 1) normalised), ``dirichlet`` (Dirichlet(1), by normalised
  exponentials) or ``softmax`` (of z): the paper's Table 4 ablation.
- Embeddings, the final norm and the head are inherited (``global.*``).

The file keeps the weights it drew (``mix.heads`` (L_a, H_b, H_a),
``mix.ffn`` (L_b, L_a)), so `lg inspect` and tests can check every learngene
head against the ancestry's.

Expansion (`lg grow LG --depth L_c --heads H_c [--mlp-dim F_c]`). The paper
expands each learngene with φ, "a learnable transformation function" that is
"a nonlinear mapping such as a neural network employing ReLU" (Eq. 6 for the
MSA: φ_MSA(A_1, ..., A_Hb) gives H_c heads; §3.4.2 for the FFNs:
φ_FFN(F) gives L_c FFNs), for which "the probabilistic mixture is relaxed to
nonlinear learnable parameters" (§1), trained before the descendant is
fine-tuned (§4.1: 100 epochs). It gives no formula; lg's reading is a
residual map, the sampled mixture plus a learned correction that starts at
zero:

    Y_t = S_t + Σ_p Δ[t, p, c] X_p[c, ...] + s Σ_k W2[t, k] relu(Σ_p W1[k, p] X_p[c, ...] / s + b1[k])

- X_1..X_P are a role's learngene parts: every head of every MSA learngene
  layer (P = L_a H_b; a head's part is its d rows of q, k, v and their
  biases, or its d columns of o), the L_b FFNs, or the L_a layers of the
  inherited MSA vectors (norm1, o's bias, ...). Y_t are the descendant's:
  its L_c H_c heads, its L_c FFNs, its L_c layers. `c` indexes a part's
  first axis, its channels: a head's own d dimensions, an FFN matrix's
  output units, a vector's entries.
- S_t is the sampled, training-free mixture (φ₀ below), exactly what
  `lg grow` without `--data` builds.
- Δ (T, P, C): the mixture relaxed to learnable weights, one per target part,
  learngene part and channel, unconstrained (any sign, any scale), zero at
  the start. Measured on the example (3 x 128 from the 6 x 128 Fashion-MNIST
  ViT, 300 steps): with φ₀ alone trainable the fit stays at chance (loss 2.6
  to 2.5, top-1 14 %); one learnable weight per pair of parts reaches 39 %;
  one per channel 76 %.
- The ReLU network (W1 (K, P), b1 (K), W2 (T, K), K = 16, one per role) is
  Eq. 6 read literally: a non-linear map from the learngene's parts to the
  descendant's, applied at every entry of the parts (shared by all entries,
  so it is small at any size). `s`, the role's RMS in the learngene (fixed),
  makes it scale-free: one initialisation serves weights and norm gains. W2
  starts at zero (so does the correction); W1 and b1 are a seeded draw.
  Measured as above, it adds about 2 points (76 to 78 %).

φ₀, the sampled mixture (SPEC.md's reading, "without data the map is a fresh
mixture draw"), is one small seeded network per kind of part mapping a part's
relative position t in [0, 1] to mixture weights over the learngene's parts:

    φ₀(t) = softmax(W2 relu(W1 f(t) + b1) + b2 - κ (t - s)²),  f(t) = (1, t, t², sin πt, cos πt)

with `s` the learngene parts' own relative positions and κ = 2 (n - 1)² (n
parts): a fixed locality prior, so a draw mixes mostly the part at the same
relative position, a neighbour at e^-2 of its weight and farther parts much
less (weaker would average the parts). Descendant layer j's MSA comes from
the learngene layer at the same relative depth, linearly interpolated
between the two nearest ("mixed the same way when depths differ"); its heads
are φ₀'s mixtures of that layer's heads, and o's columns follow the heads.
φ₀ is not trained: Δ can move every mixture weight it gives, and more.

Without `--data` the descendant is S (training-free; the output says so),
byte for byte what lg built before φ learned. With `--data` (and `--steps`),
Δ and the ReLU networks train with the learngene (and φ₀) frozen (CE, plus KD
with `--teacher`), then the model is materialised.

Width: a descendant of `H_c` heads has width `H_c d`. PEG gives the residual
stream no rule, so lg reaches it as its baselines do: weight selection
(uniformly spaced channels) when it narrows, cyclic repetition with the
input-side copies divided by their count (Net2Net, exact for whole
multiples) when it widens; `--mlp-dim` the same way along the MLP axis.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import LgError
from ..lazy import torch
from ..methods.common import axis_changes, is_linear_weight, uniform_indices
from ..options import Option
from ..stack import ATTN, EMBED, HEADS, KV, LAYER_ROLE_AXES, MLP, STAGE_IN, ArchSpec, Named, Stack, index_along
from .base import (ExpandContext, Learngene, LearngeneKind, expected_globals, fit_options,
                   globals_as_tensors, globals_from_tensors, is_global)

if TYPE_CHECKING:
    from .generated import GeneratedModel

# Per-head roles (rows of q, k, v and their biases; columns of o).
HEAD_ROWS = ("q", "k", "v", "q_bias", "k_bias", "v_bias")
HEAD_COLUMNS = ("o",)
# Per-head tables with one entry per head (Swin's relative position bias,
# axes (position, heads)): a head's part is its column, mixed with the same
# weights as its q, k, v and o, since the bias belongs to that head's logits.
HEAD_TABLES = ("rel_pos_bias",)
HEAD_ROLES = HEAD_ROWS + HEAD_COLUMNS + HEAD_TABLES
# Per-layer MSA-side roles inherited as they are.
MSA_INHERITED = ("norm1_weight", "norm1_bias", "o_bias", "ls1", "q_norm_weight", "q_norm_bias",
                 "k_norm_weight", "k_norm_bias")
FFN_ROLES = ("gate", "gate_bias", "fc1", "fc1_bias", "fc2", "fc2_bias", "norm2_weight", "norm2_bias", "ls2")
MIXTURES = ("gaussian", "uniform", "dirichlet", "softmax")
# φ₀, the sampled mixture: hidden units and position features of its network.
PHI_HIDDEN = 16
PHI_FEATURES = 5
# Hidden units of φ's learned ReLU network, one per role (Eq. 6). Measured on
# the example: 16 gave 78 % after the fit, 8 gave 77 %, 4 gave 76 %; the
# network runs at every learngene entry, so it is what a fitting step costs
# beyond the descendant's own forward and backward pass.
CORRECTION_HIDDEN = 16


def mixture_weights(rows: int, parts: int, kind: str, generator: torch.Generator) -> torch.Tensor:
    """(rows, parts) non-negative weights, each row summing to one (Eqs. 3 and 5)."""
    if kind == "gaussian":
        raw = torch.randn(rows, parts, generator=generator, dtype=torch.float64).abs()
    elif kind == "uniform":
        raw = torch.rand(rows, parts, generator=generator, dtype=torch.float64)
    elif kind == "dirichlet":  # Dirichlet(1, ..., 1) = normalised Exp(1) draws
        raw = -torch.log1p(-torch.rand(rows, parts, generator=generator, dtype=torch.float64))
    elif kind == "softmax":
        return torch.softmax(torch.randn(rows, parts, generator=generator, dtype=torch.float64), dim=1).float()
    else:
        raise LgError(f"--mixture must be one of {', '.join(MIXTURES)}, not {kind!r}")
    raw = raw.clamp_min(1e-12)  # a row of zeros has no mixture
    return (raw / raw.sum(dim=1, keepdim=True)).float()


def weighted_sum(weights: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """(T, ...) from `weights` (T, P) and `parts` (P, ...): out[t] = Σ_p
    weights[t, p] parts[p], added in the order p = 0, 1, ... with one
    elementwise multiply and one add per term (exact zero weights skipped).

    Not an einsum: that is a BLAS matrix product, whose rounding changed with
    torch's thread count (a (6, 4) by (4, 2048) product differs between 1
    and 2 threads), so PEG's bytes did. An elementwise float multiply or add
    is correctly rounded wherever and in whichever thread it runs, so each
    entry here is the same whatever the machine. P is small (heads, layers):
    mixing 6 ViT-B fc1 matrices into 24 takes 0.20 s against the einsum's
    0.12 s at one thread (benchmarks/moments.py)."""
    weights = weights.to(parts.dtype)
    present = [[p for p, nonzero in enumerate(row) if nonzero] for row in weights.detach().ne(0).tolist()]
    if torch.is_grad_enabled() and (weights.requires_grad or parts.requires_grad):
        # Autograd records no `out=` operation: the same multiplies and adds, out of place.
        rows = []
        for t, terms in enumerate(present):
            total = parts[terms[0]] * weights[t, terms[0]] if terms else torch.zeros_like(parts[0])
            for p in terms[1:]:
                total = total + parts[p] * weights[t, p]
            rows.append(total)
        return torch.stack(rows)
    out = torch.empty((len(present), *parts.shape[1:]), dtype=parts.dtype, device=parts.device)
    term = torch.empty_like(parts[0])  # one scratch product, reused
    for t, terms in enumerate(present):
        if not terms:
            out[t].zero_()
            continue
        torch.mul(parts[terms[0]], weights[t, terms[0]], out=out[t])
        for p in terms[1:]:
            out[t].add_(torch.mul(parts[p], weights[t, p], out=term))
    return out


def mix_heads(tensor: torch.Tensor, weights: torch.Tensor, head_dim: int, axis: int) -> torch.Tensor:
    """Mix the heads laid out along `axis` (heads x head_dim) of one layer's
    tensor: out head h = Σ_i weights[h, i] head i."""
    moved = tensor.movedim(axis, 0)
    heads = moved.reshape(-1, head_dim, *moved.shape[1:])  # (H_in, d, ...)
    mixed = weighted_sum(weights, heads)
    return mixed.reshape(-1, *moved.shape[1:]).movedim(0, axis)


def _role_axis(role: str) -> int:
    """The attn (or kv, or heads) axis of a per-layer head role, within one layer's tensor."""
    axes = LAYER_ROLE_AXES[role][1:]
    return next(axes.index(axis) for axis in (ATTN, KV, HEADS) if axis in axes)


def _head_size(role: str, head_dim: int) -> int:
    """Entries of one head along its role's head axis: the head dim, or 1 for a table."""
    return 1 if role in HEAD_TABLES else head_dim


def phi_features(positions: torch.Tensor) -> torch.Tensor:
    t = positions.unsqueeze(1)
    return torch.cat([torch.ones_like(t), t, t * t, torch.sin(math.pi * t), torch.cos(math.pi * t)], dim=1)


def relative_positions(count: int, like: torch.Tensor | None = None) -> torch.Tensor:
    if count == 1:
        return torch.zeros(1) if like is None else torch.zeros(1, device=like.device, dtype=like.dtype)
    out = torch.linspace(0.0, 1.0, count)
    return out if like is None else out.to(device=like.device, dtype=like.dtype)


def phi_weights(tensors: Mapping[str, torch.Tensor], name: str, parts: int, targets: int) -> torch.Tensor:
    """φ₀'s mixture weights (targets, parts) for the network `name` (msa or ffn):
    the sampled, training-free mixture."""
    w1, b1 = tensors[f"phi.{name}.w1"], tensors[f"phi.{name}.b1"]
    w2, b2 = tensors[f"phi.{name}.w2"], tensors[f"phi.{name}.b2"]
    t = relative_positions(targets, like=w1)
    # weighted_sum, not `@`: the same bits whatever the thread count (its docstring).
    hidden = torch.relu(weighted_sum(phi_features(t), w1.T) + b1)
    kappa = 2.0 * (parts - 1) ** 2
    locality = kappa * (t.unsqueeze(1) - relative_positions(parts, like=w1).unsqueeze(0)) ** 2
    return torch.softmax(weighted_sum(hidden, w2.T) + b2 - locality, dim=1)


def fresh_phi(name: str, parts: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A seeded draw of φ₀: He-scaled first layer, small second layer, zero biases."""
    return {f"phi.{name}.w1": torch.randn(PHI_HIDDEN, PHI_FEATURES, generator=generator) * math.sqrt(2 / PHI_FEATURES),
            f"phi.{name}.b1": torch.zeros(PHI_HIDDEN),
            f"phi.{name}.w2": torch.randn(parts, PHI_HIDDEN, generator=generator) * 0.1,
            f"phi.{name}.b2": torch.zeros(parts)}


def head_parts(data: torch.Tensor, head_dim: int, axis: int) -> torch.Tensor:
    """A head role's (layers, ...) stack as (layers x heads, d, ...): every
    head of every layer one part, its own d channels first (q, k, v rows and
    their biases; o's columns). `axis` is the heads' axis within one layer."""
    moved = data.movedim(axis + 1, 1)
    return moved.reshape(-1, head_dim, *moved.shape[2:])


def from_head_parts(parts: torch.Tensor, layers: int, axis: int) -> torch.Tensor:
    """The inverse of `head_parts`: (layers x heads, d, ...) to (layers, ...)."""
    return parts.reshape(layers, -1, *parts.shape[2:]).movedim(1, axis + 1)


def fresh_correction(name: str, parts: int, targets: int, channels: int,
                     generator: torch.Generator) -> dict[str, torch.Tensor]:
    """φ's learned correction for the learngene tensor `name`, at its start:
    zero (Δ and the network's output layer W2 are zero, so the descendant is
    the sampled mixture); the network's hidden layer is a seeded draw
    (He-scaled W1; b1 spreads the ReLUs' kinks over the scale-free inputs),
    without which W2's first gradient would be zero too."""
    return {f"phi.{name}.delta": torch.zeros(targets, parts, channels),
            f"phi.{name}.w1": torch.randn(CORRECTION_HIDDEN, parts, generator=generator) * math.sqrt(2 / parts),
            f"phi.{name}.b1": torch.randn(CORRECTION_HIDDEN, generator=generator) * 0.5,
            f"phi.{name}.w2": torch.zeros(targets, CORRECTION_HIDDEN)}


def learned_correction(tensors: Mapping[str, torch.Tensor], name: str, parts: torch.Tensor) -> torch.Tensor | None:
    """φ's learned correction (T, C, ...) to the sampled mixture, from the
    learngene tensor `name`'s parts (P, C, ...) (module docstring; Eq. 6):

        Σ_p Δ[t, p, c] X_p[c, ...] + s Σ_k W2[t, k] relu(Σ_p W1[k, p] X_p[c, ...] / s + b1[k])

    with `s` the parts' RMS, a constant (the learngene is frozen). None when
    it is exactly zero and nothing needs its gradient."""
    delta = tensors[f"phi.{name}.delta"]
    w1, b1, w2 = tensors[f"phi.{name}.w1"], tensors[f"phi.{name}.b1"], tensors[f"phi.{name}.w2"]
    if not torch.is_grad_enabled() and not (delta.any() or w2.any()):
        # An unfitted φ (lg grow without --data, a learngene scored at
        # condensing): the network's hidden layer holds CORRECTION_HIDDEN
        # copies of the role, a cost for nothing when its output is zero.
        return None
    channel_mixture = torch.einsum("tpc,pc...->tc...", delta, parts)
    scale = parts.detach().pow(2).mean().sqrt().clamp_min(torch.finfo(parts.dtype).tiny)
    per_entry = (1,) * (parts.dim() - 2)
    hidden = torch.relu(torch.einsum("kp,pc...->kc...", w1, parts / scale) + b1.view(-1, 1, *per_entry))
    return channel_mixture + scale * torch.einsum("tk,kc...->tc...", w2, hidden)


def depth_interpolation(source: int, target: int, like: torch.Tensor) -> torch.Tensor:
    """(target, source) weights: layer j takes the source layers at its
    relative depth, linearly interpolated between the two nearest."""
    weights = torch.zeros(target, source, dtype=like.dtype, device=like.device)
    for j in range(target):
        position = j * (source - 1) / (target - 1) if target > 1 else 0.0
        low = int(math.floor(position))
        high = min(low + 1, source - 1)
        fraction = position - low
        weights[j, low] += 1.0 - fraction
        weights[j, high] += fraction
    return weights


def width_map(stack: Stack, source: ArchSpec, target: ArchSpec) -> Stack:
    """Reach the target's residual width and MLP size (and a Swin stage's
    input from the previous stage, `stage_in`): selection when an axis
    narrows, cyclic repetition (input-side copies divided by their count) when
    it widens."""
    def indices(change) -> tuple[torch.Tensor, torch.Tensor | None]:
        if change.target <= change.source:
            return uniform_indices(change.source, change.target), None
        index = torch.arange(change.target) % change.source
        return index, torch.bincount(index, minlength=change.source)[index]

    def reach(role: str, named: Named) -> Named:
        data = named.data
        changes = [c for c in axis_changes(named, source, target) if c.axis in (EMBED, MLP, STAGE_IN)]
        linear = is_linear_weight(named, role)
        for change in changes:
            index, counts = indices(change)
            data = index_along(data, change.dim, index)
            if counts is not None and linear and change.dim == data.dim() - 1:
                data = data / counts.to(device=data.device, dtype=data.dtype)  # an input axis
        return Named(data, named.axes)

    return Stack(layers={r: reach(r, n) for r, n in stack.layers.items()},
                 globals={r: reach(r, n) for r, n in stack.globals.items()})


class Peg(LearngeneKind):
    name = "peg"
    summary = "PEG: heads and FFNs sampled as mixtures of the ancestry's, grown by a learnable map (any depth and heads)"
    trains = False
    condense_options = (
        Option("learngene_heads", int, None, "heads per layer of the MSA learngene, each a mixture of the layer's "
               "heads [default: half the ancestry's]", minimum=1),
        Option("learngene_layers", int, None, "FFNs of the FFN learngene, each a mixture of the ancestry's "
               "[default: half the ancestry's layers]", minimum=1),
        Option("mixture", str, "gaussian", "how mixture weights are drawn (non-negative, summing to one): "
               "gaussian |z| / sum |z| (the paper), uniform, dirichlet or softmax", choices=MIXTURES),
    )
    # φ's weights are mixture weights and a small network, of order one: a
    # larger rate than WAVE's scalers. On the example 3e-2 fitted within a
    # point of 1e-2 (79 % and 78 % top-1 after 300 steps).
    expand_options = fit_options(lr=1e-2, batch_size=32)
    fitted_part = "the map φ"
    unfitted_note = ("peg: the map φ is a fresh seeded draw (no --data): the descendant is the sampled mixture, "
                     "training-free")

    # -------------------------------------------------------- sampling
    def sample(self, ancestry: ArchSpec, stack: Stack, options: Mapping[str, Any],
               generator: torch.Generator) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The learngene's tensors and sizes, sampled from the ancestry's stack."""
        if ancestry.kv_heads is not None:
            raise LgError(f"PEG mixes each layer's query, key and value heads with the same weights: an ancestry "
                          f"with grouped-query attention ({ancestry.heads} heads, {ancestry.kv_heads} key/value "
                          f"heads) has no such heads to mix")
        heads_b = options.get("learngene_heads") or max(1, ancestry.heads // 2)
        layers_b = options.get("learngene_layers") or max(1, ancestry.depth // 2)
        if heads_b > ancestry.heads or layers_b > ancestry.depth:
            raise LgError(f"a PEG learngene condenses: at most {ancestry.heads} heads and {ancestry.depth} FFNs "
                          f"(the ancestry's), not {heads_b} and {layers_b}")
        kind = options.get("mixture") or "gaussian"
        d = ancestry.head_dim
        tensors: dict[str, torch.Tensor] = {}
        head_weights = torch.stack([mixture_weights(heads_b, ancestry.heads, kind, generator)
                                    for _ in range(ancestry.depth)])
        ffn_weights = mixture_weights(layers_b, ancestry.depth, kind, generator)
        for role, named in stack.layers.items():
            data = named.data.float()
            if role in HEAD_ROLES:
                axis = _role_axis(role)
                tensors[f"msa.{role}"] = torch.stack([mix_heads(data[a], head_weights[a], _head_size(role, d), axis)
                                                      for a in range(ancestry.depth)])
            elif role in MSA_INHERITED:
                tensors[f"msa.{role}"] = data.clone()
            elif role in FFN_ROLES:
                tensors[f"ffn.{role}"] = weighted_sum(ffn_weights, data)
            else:
                raise LgError(f"PEG does not know the per-layer role {role!r}")
        tensors.update({k: v.float().clone() for k, v in globals_as_tensors(stack).items()})
        tensors["mix.heads"], tensors["mix.ffn"] = head_weights, ffn_weights
        sizes = {"ancestry_layers": ancestry.depth, "ancestry_heads": ancestry.heads, "learngene_heads": heads_b,
                 "learngene_layers": layers_b, "head_dim": d, "mixture": kind}
        return tensors, sizes

    # -------------------------------------------------------- growing
    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec) -> Stack:
        """The descendant's stack at `spec`: the sampled mixture S plus φ's
        learned correction (differentiable in φ; module docstring)."""
        msa_layers = tensors["mix.heads"].shape[0]
        anchor = tensors["mix.ffn"]
        d = spec.head_dim
        depth_weights = depth_interpolation(msa_layers, spec.depth, anchor)
        head_weights, ffn_weights = tensors["phi.msa.mixture"], tensors["phi.ffn.mixture"]
        layers: dict[str, Named] = {}
        for name, data in tensors.items():
            part, _, role = name.partition(".")
            if part == "msa":
                sampled = weighted_sum(depth_weights, data)
                if role in HEAD_ROLES:
                    axis, size = _role_axis(role), _head_size(role, d)
                    sampled = torch.stack([mix_heads(layer, head_weights, size, axis) for layer in sampled])
                    learned = learned_correction(tensors, name, head_parts(data, size, axis))
                    if learned is not None:
                        learned = from_head_parts(learned, spec.depth, axis)
                else:
                    learned = learned_correction(tensors, name, data)
            elif part == "ffn":
                sampled = weighted_sum(ffn_weights, data)
                learned = learned_correction(tensors, name, data)
            else:
                continue
            layers[role] = Named(sampled if learned is None else sampled + learned, LAYER_ROLE_AXES[role])
        globals_ = globals_from_tensors(tensors, spec.family)
        width = spec.heads * d
        # The stack as built has the learngene's width and MLP (and, in a
        # stage of a Swin, its patch merging the ancestry's previous stage's
        # width as input); reach the target's.
        stage_in = next((named.data.shape[dim] for named in globals_.values()
                         for dim, axis in enumerate(named.axes) if axis == STAGE_IN), None)
        built_spec = spec.with_sizes(width=layers["fc1"].data.shape[2], mlp_dim=layers["fc1"].data.shape[1],
                                     stage_input=stage_in)
        stack = Stack(layers=layers, globals=globals_)
        if (built_spec.width, built_spec.mlp_dim, built_spec.stage_input) != (width, spec.mlp_dim, spec.stage_input):
            stack = width_map(stack, built_spec, spec)
        return stack

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {name: t for name, t in tensors.items() if not name.startswith("phi.")}

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        raise LgError("a PEG learngene is sampled, not trained: its sizes come from `sample`")

    def resolve_request(self, learngene: Learngene, depth, width, heads, mlp_dim):
        """--heads sets the width (heads x the learngene's head dim) unless --width is given."""
        if heads is not None and width is None:
            width = heads * learngene.spec.head_dim
        return depth, width, heads, mlp_dim

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        d = learngene.spec.head_dim
        if target.head_dim != d:
            raise LgError(f"a PEG learngene builds heads of its own dimension {d}: give --heads H (width H x {d}) "
                          f"or a width that is a multiple of {d}, not width {target.width} with {target.heads} heads")

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        sizes, spec = learngene.sizes, learngene.spec
        needed = ("ancestry_layers", "learngene_heads", "learngene_layers")
        if not all(type(sizes.get(k)) is int and sizes[k] >= 1 for k in needed):
            raise LgError(f"a PEG learngene's lg.learngene sizes must give {', '.join(needed)} as whole numbers")
        msa_layers, heads_b, layers_b = (sizes[k] for k in needed)
        if msa_layers != spec.depth:
            raise LgError(f"a PEG learngene's ancestry_layers ({msa_layers}) is not its configuration's depth "
                          f"({spec.depth})")
        expected = expected_globals(template)
        for role, named in template.layers.items():
            shape = list(named.data.shape[1:])
            if role in HEAD_ROLES:
                shape[_role_axis(role)] = heads_b * _head_size(role, spec.head_dim)
                expected[f"msa.{role}"] = (msa_layers, *shape)
            elif role in MSA_INHERITED:
                expected[f"msa.{role}"] = (msa_layers, *shape)
            elif role in FFN_ROLES:
                expected[f"ffn.{role}"] = (layers_b, *shape)
        expected["mix.heads"] = (msa_layers, heads_b, spec.heads)
        expected["mix.ffn"] = (layers_b, msa_layers)
        return expected

    def prepare(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any] | None = None,
                seed: int = 0) -> GeneratedModel:
        """The descendant as φ over the frozen learngene: φ₀'s seeded draw of
        the sampled mixture (frozen) and the learned correction (trainable,
        zero at the start)."""
        generator = torch.Generator().manual_seed(seed)
        heads_b = learngene.sizes["learngene_heads"]
        layers_b = learngene.sizes["learngene_layers"]
        msa_layers = learngene.sizes["ancestry_layers"]
        draw = {**fresh_phi("msa", heads_b, generator), **fresh_phi("ffn", layers_b, generator)}
        frozen = {name: t.float() for name, t in learngene.tensors.items()}
        frozen["phi.msa.mixture"] = phi_weights(draw, "msa", heads_b, target.heads)
        frozen["phi.ffn.mixture"] = phi_weights(draw, "ffn", layers_b, target.depth)
        learned: dict[str, torch.Tensor] = {}
        for name in sorted(learngene.tensors):  # sorted: the draw does not depend on the file's order
            part, _, role = name.partition(".")
            data = learngene.tensors[name]
            if part == "msa" and role in HEAD_ROLES:
                learned.update(fresh_correction(name, msa_layers * heads_b, target.depth * target.heads,
                                                _head_size(role, learngene.spec.head_dim), generator))
            elif part == "msa":
                learned.update(fresh_correction(name, msa_layers, target.depth, data.shape[1], generator))
            elif part == "ffn":
                learned.update(fresh_correction(name, layers_b, target.depth, data.shape[1], generator))
        from .generated import GeneratedModel  # an nn.Module: torch is imported here

        return GeneratedModel(target, self.build, learned, frozen)

    def prepared_report(self, model: GeneratedModel) -> dict[str, Any]:
        return {"rule": "PEG: descendant heads and FFNs are φ's mixtures of the learngene's",
                "phi_parameters": sum(p.numel() for p in model.parameters())}

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        model = self.prepare(learngene, target, options, context.seed)
        report = self.prepared_report(model)
        report.update(context.fit(model, learngene, options, self.fitted_part, self.unfitted_note))
        return model.materialise(), report

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        sizes, spec = learngene.sizes, learngene.spec
        return {"holds": f"{sizes['learngene_heads']} mixed heads in each of {sizes['ancestry_layers']} MSA layers, "
                         f"{sizes['learngene_layers']} mixed FFNs, and "
                         f"{sum(map(is_global, learngene.tensors))} global tensors ({sizes.get('mixture')} mixtures)",
                "depths": "any depth >= 1",
                "widths": [spec.head_dim * h for h in range(1, 9)],
                "becomes": f"any depth, any heads H (width H x {spec.head_dim}), any MLP size"}


KIND = Peg()
