"""TLEG: a learngene of two full sets of per-layer tensors, A and B, expanded
linearly over depth (SPEC.md "TLEG", tleg.txt).

    theta_l = theta_B + ((l - 1) / L) * theta_A,   l = 1..L          (TLEG Eq. 1)

for every per-layer role (q, k, v, o, fc1, fc2, their biases, the norms,
layer scale and q/k norm when the architecture has them); `L` is the depth
of the model being built: the auxiliary model's while condensing, the
descendant's when growing. The globals (patch and position embedding, class
token, final norm, head) are shared by every depth and inherited as they are.

Condensing trains A, B and the globals of an auxiliary model built by Eq. 1,
from a frozen teacher's logits: ``(1 - alpha) CE + alpha tau^2 KL``. The width
of every descendant is the learngene's own, or with ``--widths`` each listed
width, the nested slices of A, B and the globals (`widths.py`), with
``--width-norms`` each width's own norm gains and biases (``width<W>.A.norm1_weight``, ...).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..arch import get_adapter
from ..errors import LgError, RefusedWithPipe, counted, shown
from ..lazy import torch
from ..methods.clone import width_step
from ..methods.tleg_fit import fit_line
from ..options import Option
from ..sizing import own_depth
from ..stack import LAYER_ROLE_AXES, ArchSpec, Named, Stack
from .base import (ExpandContext, Learngene, LearngeneKind, depth_range, depths_record, distillation_options,
                   expected_globals, globals_as_tensors, globals_from_tensors, init_option, is_global,
                   trained_depths_text)
from .widths import (NestedWidths, check_trained_width, is_width_norm, nested_slice, own_width_norms,
                     sliced_tensors, width_norm_name, width_norm_tensors, width_norm_widths, width_norms_option,
                     width_rule_option, width_spec, shape_text, widths_text)

# SPEC.md "TLEG": A and B trunc-normal(0.02), as the reference code's timm init.
INIT_STD = 0.02


def depth_positions(depth: int) -> torch.Tensor:
    """(l - 1) / L for l = 1..L (TLEG Eq. 1)."""
    return torch.arange(depth, dtype=torch.float32) / depth


def linear_expansion(a: torch.Tensor, b: torch.Tensor, depth: int) -> torch.Tensor:
    """TLEG Eq. 1 for one role: the (depth, ...) stack B + ((l - 1) / L) A."""
    x = depth_positions(depth).to(device=a.device, dtype=a.dtype).view(-1, *([1] * a.dim()))
    return b.unsqueeze(0) + x * a.unsqueeze(0)


def ancestry_line(ancestry: Stack) -> dict[str, torch.Tensor]:
    """A TLEG learngene fitted to a trained model: per role, A and B of the
    least-squares line of every element over depth (TLEG Eq. 1, x_l = (l - 1) / L),
    and the model's globals."""
    tensors: dict[str, torch.Tensor] = {}
    for role, named in ancestry.layers.items():
        slope, base, _ = fit_line(named.data)
        tensors[f"A.{role}"], tensors[f"B.{role}"] = slope.float(), base.float()
    tensors.update({name: t.float().clone() for name, t in globals_as_tensors(ancestry).items()})
    return tensors


class Tleg(NestedWidths, LearngeneKind):
    name = "tleg"
    summary = "TLEG: two layers A and B; layer l of L is B + ((l - 1) / L) A (any depth, the learngene's width)"
    condense_options = (
        *distillation_options(1.0, "the TLEG reference run: 1, pure soft distillation"),
        # The flag's help for every kind that takes it (the CLI shows the first declaration's).
        Option("depths", str, None, "train the auxiliary model at a depth drawn each step from these depths, "
               "a range such as 3-12 or a list such as 3,6,12 (the depths you will build), so that every depth "
               "in it makes a good descendant; one depth (e.g. 6) trains at that depth only, as the paper "
               "[default: tleg and lets 2 to twice the auxiliary depth; wave and sws the auxiliary depth only]"),
        Option("widths", str, None, "train the learngene at a width drawn each step from this list, e.g. 64,128, "
               "so that every width in it is a descendant it builds directly: the first channels, heads and MLP "
               "neurons of the widest (the teacher's, put in order of importance on --data first when condensing "
               "from it); the widest must be the auxiliary model's [default: its width only]"),
        width_rule_option("sample"),
        width_norms_option(),
        init_option(),
    )
    expand_options = ()

    def training_depths(self, aux: ArchSpec, options: Mapping[str, Any]) -> tuple[int, ...] | None:
        text = options.get("depths")
        depth = own_depth(aux)  # a model of stages: its deepest stage's, which the range draws
        if not text:
            # docs/learngenes.md "--depths": drawing the depth costs ~1 point at
            # the auxiliary depth and gains up to 15 at 2 and 2L.
            text = f"{min(2, depth)}-{2 * depth}"
        return depth_range(aux, text)

    def initial(self, aux: ArchSpec, aux_init: Stack, options: Mapping[str, Any],
                generator: torch.Generator, ancestry: Stack | None = None,
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """SPEC.md "TLEG" initialisation: matrices of A and B trunc-normal(0.02);
        biases 0; gains (LayerNorm weights, layer scale) B = the family's own
        initial value (1 for LayerNorm) and A = 0, so every layer starts with
        the gain a fresh model has. Globals: the family's random init.

        From an `ancestry` (the teacher, at this width): A and B are the
        least-squares line through its layers, element by element, over
        x_l = (l - 1) / L (what `tleg-fit` computes; Eq. 1 read backwards),
        and the globals are its own, so the auxiliary model starts as the
        best linear-in-depth copy of the teacher."""
        if ancestry is not None:
            return self._with_width_norms(ancestry_line(ancestry), aux, options), {}
        tensors: dict[str, torch.Tensor] = {}
        for role, named in aux_init.layers.items():
            first = named.data[0].float()
            if first.dim() >= 2:
                a, b = torch.empty_like(first), torch.empty_like(first)
                torch.nn.init.trunc_normal_(a, std=INIT_STD, generator=generator)
                torch.nn.init.trunc_normal_(b, std=INIT_STD, generator=generator)
            elif role.endswith("_bias"):
                a, b = torch.zeros_like(first), torch.zeros_like(first)
            else:
                a, b = torch.zeros_like(first), first.clone()
            tensors[f"A.{role}"], tensors[f"B.{role}"] = a, b
        tensors.update(globals_as_tensors(aux_init))
        return self._with_width_norms(tensors, aux, options), {}

    def _with_width_norms(self, tensors: dict[str, torch.Tensor], aux: ArchSpec,
                          options: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """`tensors` and, with --width-norms, each narrower width's own norm
        tensors: the slices of the widest's (`widths.width_norm_tensors`)."""
        widths = self.training_widths(aux, options)  # refuses --width-norms without two or more
        if not options.get("width_norms"):
            return tensors
        return {**tensors, **width_norm_tensors(tensors, _axes_of(aux.family), aux, widths)}

    def build(self, tensors: Mapping[str, torch.Tensor], spec: ArchSpec) -> Stack:
        """Eq. 1 at `spec`'s depth; at a narrower width than the tensors',
        on their nested slices (Eq. 1 is element-wise, so slicing A and B
        first builds the same weights as slicing the built ones, for less)."""
        sizes = spec.axis_sizes()
        # --width-norms: this width's own norm tensors replace the slices of the widest's.
        tensors = own_width_norms(tensors, spec.width)
        tensors = sliced_tensors(tensors, lambda name: LAYER_ROLE_AXES[name[2:]][1:] if name[:2] in ("A.", "B.")
                                 else None, spec)
        layers = {}
        for name, a in tensors.items():
            if name.startswith("A."):
                role = name[2:]
                layers[role] = Named(linear_expansion(a, tensors[f"B.{role}"], spec.depth), LAYER_ROLE_AXES[role])
        globals_ = {role: Named(nested_slice(named, sizes), named.axes)
                    for role, named in globals_from_tensors(tensors, spec.family).items()}
        return Stack(layers=layers, globals=globals_)

    def keep(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(tensors)

    def sizes(self, aux: ArchSpec, options: Mapping[str, Any]) -> dict[str, Any]:
        sizes: dict[str, Any] = {"aux_depth": aux.depth, "width": aux.width, "heads": aux.heads,
                                 "mlp_dim": aux.mlp_dim}
        widths = self.training_widths(aux, options)
        if widths:  # what `lg grow` builds directly and `lg inspect` lists
            depths = self.training_depths(aux, options)
            sizes.update({"widths": list(widths), **depths_record(depths),
                          "width_rule": self.training_width_rule(options)})
            if options.get("width_norms"):  # the widths that hold their own norms (load_learngene expects them)
                sizes["width_norms"] = [w for w in widths if w != aux.width]
        return sizes

    def check_target(self, learngene: Learngene, target: ArchSpec) -> None:
        own = learngene.spec
        if "widths" in learngene.sizes:
            check_trained_width("TLEG", own, self.trained_widths(learngene), target)
            return
        if (target.width, target.heads, target.mlp_dim) != (own.width, own.heads, own.mlp_dim):
            step = width_step(own.with_sizes(depth=target.depth), target)
            asked = (f"a TLEG learngene builds models of its own width {shape_text(own)} at any depth; width "
                     f"{shape_text(target)} was asked")
            if step is None:  # some sizes grow and others shrink: the build, then a shrink and a grow
                from ..hints import learngene_pipe

                pipe = learngene_pipe(own.with_sizes(depth=target.depth), target, build=f"--depth {target.depth}")
                if pipe is None:
                    raise LgError(f"{asked}, which neither lg shrink nor lg grow reaches from it, alone or piped "
                                  f"together")
                raise RefusedWithPipe(f"{asked}. Build --depth only, then change the width by a shrink and a "
                                      f"grow: ", pipe)
            reason = (f"{asked} (add --method, e.g. bot, to do both in one command). Build --depth only, then "
                      f"change the width with a resize method")
            # The caller writes in the learngene, the output and its flags (RefusedWithPipe).
            raise RefusedWithPipe(f"{reason}: ", f"lg grow {{src}} --depth {target.depth} -o - | "
                                                 f"lg {step[0]} - {step[1]} -o {{out}}{{written}}")

    def expected_tensors(self, learngene: Learngene, template: Stack) -> dict[str, tuple[int, ...]]:
        expected = expected_globals(template)
        for role, named in template.layers.items():
            expected[f"A.{role}"] = expected[f"B.{role}"] = tuple(named.data.shape[1:])
        norms = learngene.sizes.get("width_norms")  # absent from a file condensed without --width-norms
        if norms is not None:
            if not (isinstance(norms, list) and all(w in self.trained_widths(learngene) for w in norms)):
                raise LgError(f"this TLEG learngene's width_norms {shown(repr(norms))} are not among its trained "
                              f"widths")
            axes = _axes_of(learngene.spec.family)
            shapes = {name: torch.empty(shape, device="meta") for name, shape in expected.items()}
            for width in norms:
                sizes = width_spec(learngene.spec, width).axis_sizes()
                for name, tensor in shapes.items():
                    if axes(name) is not None and is_width_norm(name.split(".")[-1], axes(name)):
                        expected[width_norm_name(width, name)] = tuple(
                            nested_slice(Named(tensor, axes(name)), sizes).shape)
        return expected

    def expand(self, learngene: Learngene, target: ArchSpec, options: Mapping[str, Any],
               context: ExpandContext) -> tuple[Stack, dict[str, Any]]:
        stack = self.built_descendant(learngene, target)
        report = {"rule": "TLEG Eq. 1: theta_l = B + ((l - 1) / L) A", "depth": target.depth}
        if target.width != learngene.spec.width:
            report["width"] = (f"the first {target.width} channels, {counted(target.heads, 'head')} and "
                               f"{target.mlp_dim} MLP neurons of the learngene's {learngene.spec.width} "
                               f"(a trained width)")
        return stack, report

    def describe(self, learngene: Learngene) -> dict[str, Any]:
        roles = sorted(name[2:] for name in learngene.tensors if name.startswith("A."))
        own = learngene.spec
        described = {"holds": f"A and B for {len(roles)} per-layer roles, and {sum(map(is_global, learngene.tensors))} "
                              f"global tensors",
                     "roles": roles,
                     "depths": "any depth >= 1 (Eq. 1 at the target depth)",
                     "widths": [own.width],
                     "becomes": f"depth 1, 2, 3, ... at width {shape_text(own)}"}
        if "widths" in learngene.sizes:
            widths = list(self.trained_widths(learngene))
            trained = trained_depths_text(learngene.sizes, own.depth)
            shapes = widths_text(own, widths)
            rule = learngene.sizes.get("width_rule", "sample")  # a file from before --width-rule drew one width
            norms = width_norm_widths(learngene.tensors)
            described.update({"widths": widths, "trained_at": {"widths": widths, "depths": trained,
                                                               "width_rule": rule, "width_norms": norms},
                              "becomes": f"depth 1, 2, 3, ... at the widths it was trained at: {shapes} "
                                         f"(trained at depths {trained}, widths per step: {rule}"
                                         f"{'; own norms at ' + ', '.join(map(str, norms)) if norms else ''}; "
                                         f"other widths: lg grow --method M)"})
        return described


def _axes_of(family: str):
    """The axes of a TLEG learngene tensor: a role's without the layer axis
    for A and B, the family's for a global; None for anything else."""
    global_axes = get_adapter(family).global_role_axes()

    def axes(name: str) -> tuple[str, ...] | None:
        if name[:2] in ("A.", "B.") and name[2:] in LAYER_ROLE_AXES:
            return LAYER_ROLE_AXES[name[2:]][1:]
        if is_global(name):
            return global_axes.get(name[len("global."):])
        return None

    return axes


KIND = Tleg()
