"""Hugging Face transformers text models  <->  (ArchSpec, Stack): what every
text family shares. A family (gpt2.py, llama.py, bert.py) is declared as data
(`HfLayout`: its key names, which stored tensors fuse several roles, which
are stored transposed, the config fields that hold its sizes), as mergekit
declares architectures; this module reads, checks and writes any of them.

Layouts (SPEC.md "Text families"): roles are kept in PyTorch's (out, in)
layout, so a tensor stored the other way round (GPT-2's `Conv1D`) is
transposed on read and write; a fused tensor (GPT-2's `c_attn`) is split into
its roles along its output axis. A tied LM head is not a tensor of its own
(the token embedding is read transposed); it is written as save_pretrained
writes it: not at all.

A model's configuration is its config.json (in a model folder, or recorded
as ``lg.config`` in a single file): it holds the heads and key/value heads a
state dict cannot show, and every size in it is checked against the weights.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from ..errors import LgError, debugging, one_line, shown
from ..stack import (LAYER_ROLE_AXES, ArchSpec, RoleMap, Stack, TensorGroup, axes_and_shape,
                     copy_elements)
from .base import TEXT_ENCODER, Reader

# A configuration describing more parameters than this is refused before a
# model (even on the meta device) is built from it.
MAX_CONFIG_PARAMS = 1_000_000_000_000
CONVENTIONAL_HEAD_DIM = 64


@dataclass(frozen=True)
class Architecture:
    """One model class of a family: what it does (`base.TASKS`), the Auto
    class that loads it, and whether its weights sit under the family's base
    prefix (``transformer.``, ``model.``, ``bert.``) with head keys beside."""

    task: str
    auto_class: str
    prefixed: bool


@dataclass(frozen=True)
class HfLayout:
    """A family's state dict, as data.

    Per-layer keys are ``{prefix}{layers}.{i}.{suffix}``; `layer_keys` maps a
    suffix to its role, `fused_keys` a suffix to the roles stacked along its
    output axis, `transposed` lists suffixes stored (in, out). `base_globals`
    live under the base prefix, `head_globals` outside it (the LM head).
    `ignored` matches buffers that older checkpoints carry and loading
    ignores (causal masks, rotary frequencies, position ids). `tied_copies`
    maps a head key to the key it is a copy of when the config ties the word
    embeddings (the LM head: the token embedding): a tensor of its own only
    in an untied model. `table_sizes` maps a lookup table's role (token,
    position, token-type embeddings) to the config field that holds its row
    count: a bare state dict's config takes them from the weights.
    """

    family: str
    config_classes: Mapping[str, str]  # model_type -> transformers config class
    base_prefix: str
    layers: str
    architectures: Mapping[str, Architecture]
    layer_keys: Mapping[str, str]
    base_globals: Mapping[str, tuple[str, tuple[str, ...]]]
    head_globals: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    fused_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    transposed: frozenset[str] = frozenset()
    ignored: tuple[str, ...] = ()
    tied_copies: Mapping[str, str] = field(default_factory=dict)
    table_sizes: Mapping[str, str] = field(default_factory=dict)

    @property
    def model_types(self) -> tuple[str, ...]:
        return tuple(self.config_classes)


@dataclass(frozen=True)
class Sizes:
    """The sizes a config.json gives (None: the field is absent)."""

    depth: int
    width: int
    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    mlp_dim: int | None
    vocab: int | None
    positions: int | None


class HfAdapter:
    """A Hugging Face text family (`lgcli.arch.base.FamilyAdapter`); a
    subclass gives its `layout` and the config fields of its sizes."""

    layout: HfLayout
    writes_folder = True

    # ------------------------------------------------------------ what a subclass declares
    def sizes(self, config: Mapping[str, Any]) -> Sizes:
        """The sizes the family's config fields hold."""
        raise NotImplementedError

    def set_sizes(self, config: dict[str, Any], spec: ArchSpec) -> None:
        """Write the spec's sizes into the family's config fields."""
        raise NotImplementedError

    def tied_head_input(self, architecture: str) -> tuple[str, ...]:
        """The roles of the norm a tied head reads (SPEC.md "Baselines", clone)."""
        return ()

    # ------------------------------------------------------------ identity
    @property
    def family(self) -> str:
        return self.layout.family

    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        marker = f"{self.layout.layers}.0."
        first = next((s for s in self.layout.layer_keys), None)
        return any(k in state_dict for k in (f"{marker}{first}", f"{self.layout.base_prefix}{marker}{first}"))

    def recognises_config(self, config: Mapping[str, Any]) -> bool:
        return config.get("model_type") in self.layout.model_types

    # ------------------------------------------------------------ reading
    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None) -> tuple[ArchSpec, Stack]:
        """Split a state dict into (spec, canonical stack); lazy with a
        `reader`, as the ViT adapter's (only shapes and dtypes of `state_dict`
        are looked at here, and a role is read when asked for)."""
        layout = self.layout
        config = self._checked_config(config)
        prefix = layout.base_prefix if any(k.startswith(layout.base_prefix) for k in state_dict) else ""
        per_layer, globals_, heads_found = self._sort_keys(state_dict, prefix)
        depth = len(per_layer)
        if depth == 0:
            raise LgError(self._not_family(f"no layers ({prefix}{layout.layers}.N.*)"))
        first = per_layer[0]
        _check_layers(per_layer, self._not_family)
        for key, tensor in [*first.items(), *globals_.items(), *heads_found.items()]:
            if not tensor.is_floating_point():
                raise LgError(self._not_family(f"{key} has dtype {str(tensor.dtype).replace('torch.', '')}; "
                                               f"weights are floating point"))
            if tensor.numel() == 0:
                raise LgError(self._not_family(f"{key} has shape {tuple(tensor.shape)}, which holds nothing"))

        # role -> (suffix, first element of the role in that tensor, its per-layer (out, in) shape)
        shapes = {suffix: self._canonical_shape(suffix, t) for suffix, t in first.items()}
        sources: dict[str, tuple[str, int, tuple[int, ...]]] = {}
        for suffix, shape in shapes.items():
            if suffix in layout.fused_keys:
                continue
            sources[layout.layer_keys[suffix]] = (suffix, 0, shape)
        width = self._width(globals_)
        sizes = self.sizes(config) if config else None
        architecture = self._architecture(config, heads_found, prefix)
        spec_heads, head_dim, kv_heads, assumed = self._heads(sizes, shapes, heads)
        for suffix, roles in layout.fused_keys.items():
            if suffix not in shapes:
                continue
            parts = [(head_dim * (spec_heads if role.startswith("q") else kv_heads)) for role in roles]
            shape = shapes[suffix]
            if sum(parts) != shape[0]:
                raise LgError(self._not_family(f"{suffix} has {shape[0]} outputs; {spec_heads} heads and "
                                               f"{kv_heads} key/value heads of dimension {head_dim} need {sum(parts)}"))
            start = 0
            for role, rows in zip(roles, parts):
                sources[role] = (suffix, start, (rows, *shape[1:]))
                start += rows
        mlp_dim = sources["fc1"][2][0] if "fc1" in sources else 0

        read = reader or (lambda key, out, start: copy_elements(state_dict[key], out, start))
        layer_key = f"{prefix}{layout.layers}.{{}}.{{}}"

        def make_layers(role: str, indices: list[int] | None = None) -> torch.Tensor:
            suffix, row, shape = sources[role]
            stored = first[suffix]
            chosen = range(depth) if indices is None else indices
            out = torch.empty((len(chosen), *shape), dtype=compute_dtype(stored.dtype), device=stored.device)
            # Stored (in, out) (GPT-2's Conv1D): the role is some columns of
            # the layer's tensor, so the layer is read whole and transposed.
            # Otherwise the role's rows are one contiguous range, read straight
            # into the stack (through a buffer when it is widened to float32).
            whole = suffix in layout.transposed
            start = row * math.prod(shape[1:])
            buffer = None
            if whole or out.dtype != stored.dtype:
                buffer = torch.empty(stored.shape if whole else shape, dtype=stored.dtype, device=stored.device)
            for position, index in enumerate(chosen):
                if not 0 <= index < depth:
                    raise IndexError(f"layer {index} of a {depth}-layer stack")
                key = layer_key.format(index, suffix)
                if buffer is None:
                    read(key, out[position], start)
                elif whole:
                    read(key, buffer, 0)
                    out[position].copy_(buffer[:, row:row + shape[0]].T)
                else:
                    read(key, buffer, start)
                    out[position].copy_(buffer)
            return out

        base_config = self._base_config(config, architecture)
        tied, heads_found = self._tied(base_config, globals_, heads_found, prefix, read, bare=not config)
        global_sources = {**{k: (f"{prefix}{k}", t) for k, t in globals_.items()},
                          **{k: (k, t) for k, t in heads_found.items()}}
        global_roles = {**layout.base_globals, **layout.head_globals}

        def make_global(role: str) -> torch.Tensor:
            key = role_keys[role]
            full, stored = global_sources[key]
            out = torch.empty(stored.shape, dtype=stored.dtype, device=stored.device)
            read(full, out, 0)
            return out.to(compute_dtype(stored.dtype))

        role_keys = {global_roles[k][0]: k for k in global_sources}
        layers = RoleMap({role: (LAYER_ROLE_AXES[role], (depth, *shape)) for role, (_, _, shape) in sources.items()},
                         make_layers, make_layers)
        stack_globals = RoleMap({global_roles[k][0]: (global_roles[k][1], tuple(t.shape))
                                 for k, (_, t) in global_sources.items()}, make_global)
        if not config:  # a bare state dict: the sizes it shows, the config class's defaults for the rest
            base_config.update(self._sizes_config(depth, width, spec_heads, kv_heads, head_dim, mlp_dim))
            for role, name in layout.table_sizes.items():
                if role in stack_globals:
                    base_config[name] = stack_globals.axes_and_shape(role)[1][0]
        extras = {"architecture": architecture, "config": base_config}
        spec = ArchSpec(family=self.family, depth=depth, width=width, heads=spec_heads, head_dim=head_dim,
                        mlp_dim=mlp_dim, extras=extras, heads_assumed=assumed, kv_heads=kv_heads,
                        tied_head_input=self.tied_head_input(architecture) if tied else ())
        stack = Stack(layers=layers, globals=stack_globals)
        try:
            stack.check(spec)
        except ValueError as exc:
            raise LgError(self._not_family(str(exc))) from None
        if sizes is not None:
            self._check_sizes(sizes, spec, stack)
        return spec, (stack if reader is not None else stack.materialized())

    def _canonical_shape(self, suffix: str, tensor: torch.Tensor) -> tuple[int, ...]:
        shape = tuple(tensor.shape)
        if suffix in self.layout.transposed and len(shape) == 2:
            return (shape[1], shape[0])
        return shape

    def _sort_keys(self, state_dict: Mapping[str, torch.Tensor], prefix: str):
        layout = self.layout
        pattern = re.compile(rf"^{re.escape(prefix + layout.layers)}\.(0|[1-9][0-9]*)\.(.+)$", re.ASCII)
        ignored = [re.compile(p) for p in layout.ignored]
        known = {*layout.layer_keys, *layout.fused_keys}
        per_layer: dict[int, dict[str, torch.Tensor]] = {}
        globals_: dict[str, torch.Tensor] = {}
        heads_found: dict[str, torch.Tensor] = {}
        unknown: list[str] = []
        for key, value in state_dict.items():
            if any(p.search(key) for p in ignored):
                continue
            match = pattern.match(key)
            if match:
                if match.group(2) in known:
                    per_layer.setdefault(int(match.group(1)), {})[match.group(2)] = value
                else:
                    unknown.append(key)
            elif key.startswith(prefix) and key[len(prefix):] in layout.base_globals:
                globals_[key[len(prefix):]] = value
            elif key in layout.head_globals:
                heads_found[key] = value
            else:
                unknown.append(key)
        if unknown:
            listed = ", ".join(shown(k) for k in sorted(unknown)[:3]) + (
                f" (+{len(unknown) - 3} more)" if len(unknown) > 3 else "")
            raise LgError(self._not_family(f"unexpected keys {listed}"))
        indices = sorted(per_layer)
        if indices != list(range(len(indices))):
            raise LgError(self._not_family(f"layer indices are not 0..{len(indices) - 1} (found {indices[:6]})"))
        return [per_layer[i] for i in indices], globals_, heads_found

    def _width(self, globals_: Mapping[str, torch.Tensor]) -> int:
        token = next((k for k, (role, _) in self.layout.base_globals.items() if role == "token_embed"), None)
        if token is None or token not in globals_:
            raise LgError(self._not_family(f"no token embedding ({self.layout.base_prefix}{token})"))
        embedding = globals_[token]
        if embedding.dim() != 2 or min(embedding.shape) < 1:
            raise LgError(self._not_family(f"{token} of shape {tuple(embedding.shape)} is not (vocab, width)"))
        return int(embedding.shape[1])

    def _build(self, architecture: str, hf_config, meta: bool = True) -> nn.Module:
        """transformers' `architecture` built from `hf_config` (on the meta
        device: no memory), its complaints about the config in one line:
        transformers raises whatever type it likes for these (KeyError for
        an unknown activation or rope type, AssertionError for a pad token
        outside the vocabulary), and they used to surface as lg's own bugs.
        Every command that builds or writes a model comes here (or through
        `_hf_config`, which quotes the config class's complaints) before any
        work; `lg inspect` reads config.json with lg's own checks only, since
        importing transformers' classes would double its time."""
        try:
            with torch.device("meta") if meta else contextlib.nullcontext():
                return getattr(import_transformers(), architecture)(hf_config)
        except Exception as exc:  # noqa: BLE001 - any complaint of transformers' about the config
            detail = _complaint(exc)
            if isinstance(exc, KeyError):
                detail = f"unknown value {detail}"
            raise LgError(f"config.json does not describe a {architecture} that transformers builds "
                          f"({one_line(detail)[:200]})") from None

    def _bound_config(self, config: Mapping[str, Any]) -> None:
        sizes = self.sizes(config)
        rough = sizes.depth * sizes.width * sizes.width * 12
        if rough > MAX_CONFIG_PARAMS:
            raise LgError(f"the config describes a model of about {rough:.3g} parameters; lg reads at most "
                          f"{MAX_CONFIG_PARAMS:.3g}")

    def _architecture(self, config: Mapping[str, Any], heads_found: Mapping[str, Any], prefix: str) -> str:
        """The model class: config.json's `architectures`, else what the keys show."""
        names = config.get("architectures") if config else None
        if names:
            if not isinstance(names, list) or not isinstance(names[0], str):
                raise LgError("config.json's architectures must be a list of class names")
            if names[0] not in self.layout.architectures:
                known = ", ".join(self.layout.architectures)
                raise LgError(f"config.json names {shown(names[0])}: lg reads {known} for model type "
                              f"{self.layout.model_types[0]}")
            return names[0]
        with_head = [name for name, a in self.layout.architectures.items() if a.prefixed]
        plain = [name for name, a in self.layout.architectures.items() if not a.prefixed]
        return with_head[0] if (heads_found or prefix) and with_head else plain[0]

    def _heads(self, sizes: Sizes | None, shapes: Mapping[str, tuple[int, ...]],
               heads: int | None) -> tuple[int, int, int, bool]:
        """(heads, head_dim, key/value heads, assumed): from config.json, else
        --source-heads, else head dim 64 (and said to be assumed)."""
        q_rows = self._q_rows(shapes)
        kv_rows = self._kv_rows(shapes, q_rows)
        recorded = sizes.heads if sizes else None
        if recorded is not None and heads is not None and recorded != heads:
            raise LgError(f"config.json says {recorded} heads; --source-heads {heads} contradicts it")
        chosen = recorded if recorded is not None else heads
        assumed = chosen is None
        if chosen is None:
            target = q_rows / CONVENTIONAL_HEAD_DIM
            divisors = [h for h in range(1, q_rows + 1) if q_rows % h == 0 and kv_rows % (q_rows // h) == 0]
            chosen = min(divisors, key=lambda h: (abs(h - target), -h))
        if not (sizes and sizes.head_dim) and q_rows % chosen:
            said = "config.json says" if recorded is not None else "--source-heads gives"
            raise LgError(f"{said} {chosen} heads, which do not divide the {q_rows} query outputs "
                          f"of the weights")
        head_dim = sizes.head_dim if sizes and sizes.head_dim else q_rows // chosen
        if head_dim < 1 or chosen * head_dim != q_rows:
            raise LgError(self._not_family(f"{chosen} heads of dimension {head_dim} do not make the {q_rows} "
                                           f"query outputs"))
        if kv_rows % head_dim:
            raise LgError(self._not_family(f"{kv_rows} key outputs are not whole heads of dimension {head_dim}"))
        kv_heads = kv_rows // head_dim
        if sizes and sizes.kv_heads is not None and sizes.kv_heads != kv_heads:
            raise LgError(f"config.json says {sizes.kv_heads} key/value heads; the weights have {kv_heads} "
                          f"(of dimension {head_dim})")
        if chosen % kv_heads:
            raise LgError(self._not_family(f"{kv_heads} key/value heads do not divide the {chosen} heads"))
        return int(chosen), int(head_dim), int(kv_heads), assumed

    def _q_rows(self, shapes) -> int:
        layout = self.layout
        for suffix, role in layout.layer_keys.items():
            if role == "q" and suffix in shapes:
                return shapes[suffix][0]
        for suffix, roles in layout.fused_keys.items():
            if roles[0] == "q" and suffix in shapes:
                return shapes[suffix][0] // len(roles)  # fused without grouping: equal thirds
        raise LgError(self._not_family("no query projection"))

    def _kv_rows(self, shapes, q_rows: int) -> int:
        for suffix, role in self.layout.layer_keys.items():
            if role == "k" and suffix in shapes:
                return shapes[suffix][0]
        return q_rows

    def _check_sizes(self, sizes: Sizes, spec: ArchSpec, stack: Stack) -> None:
        """config.json must say what the weights say (a config that lies is refused)."""
        found = {"layers": (sizes.depth, spec.depth), "width": (sizes.width, spec.width),
                 "MLP size": (sizes.mlp_dim, spec.mlp_dim)}
        token = stack.globals.axes_and_shape("token_embed")[1] if "token_embed" in stack.globals else None
        if token is not None:
            found["vocabulary"] = (sizes.vocab, token[0])
        if "pos_embed" in stack.globals:
            found["positions"] = (sizes.positions, stack.globals.axes_and_shape("pos_embed")[1][0])
        for what, (said, has) in found.items():
            if said is not None and said != has:
                raise LgError(f"config.json says {what} {said}; the weights have {has}")

    def _checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise LgError(f"a model's config must be a JSON object, found {type(config).__name__}")
        model_type = config.get("model_type")
        if model_type is not None and model_type not in self.layout.model_types:
            raise LgError(f"config.json's model_type {shown(model_type)} is not a {self.family} model "
                          f"({', '.join(self.layout.model_types)})")
        try:
            self.sizes(config)
        except (TypeError, ValueError) as exc:
            raise LgError(f"config.json: {exc}") from None
        return copy.deepcopy(dict(config))

    def _base_config(self, config: Mapping[str, Any], architecture: str) -> dict[str, Any]:
        """The config the output starts from: the source's, else the config class's defaults."""
        if config:
            out = dict(config)
        else:
            out = self._config_class(self.layout.model_types[0])().to_dict()
        out["architectures"] = [architecture]
        out.setdefault("model_type", self.layout.model_types[0])
        return out

    def _tied(self, config: dict[str, Any], globals_: Mapping[str, torch.Tensor],
              heads_found: Mapping[str, torch.Tensor], prefix: str,
              read: Reader, bare: bool = False) -> tuple[bool, dict[str, torch.Tensor]]:
        """(whether the LM head is tied to the token embedding, the head
        tensors that are roles of their own), decided as from_pretrained
        decides: by tie_word_embeddings, whose absence means the config
        class's default (which differs between families: reading it as
        "tied" would drop an untied head, or clone would scale a head that
        is not tied). A tied copy saved anyway (a live model's state dict,
        pickled checkpoints) is read past when it equals what it copies;
        one that differs unties the model (transformers keeps both then),
        and the config written says so. A bare state dict (no config) is
        tied unless it holds a head of its own, and its config records which."""
        heads_found = dict(heads_found)
        if not self.layout.architectures[config["architectures"][0]].prefixed:
            return False, heads_found  # a base model has no head
        copies = self.layout.tied_copies
        if bare:
            config["tie_word_embeddings"] = True  # made False below if a saved head differs
        tied = config.get("tie_word_embeddings")
        untied_by = "config.json unties the word embeddings"
        if tied is None:
            config_class = self._config_class(config["model_type"])
            tied = getattr(config_class(), "tie_word_embeddings", True)
            untied_by = (f"config.json leaves tie_word_embeddings out, which {config_class.__name__} "
                         f"reads as untied,")
        if tied:
            saved = [k for k in copies if k in heads_found]
            differ = [k for k in saved if not self._same_tensor(
                read, *self._global_key(copies[k], prefix, globals_, heads_found), k, heads_found[k])]
            if not differ:
                for key in saved:
                    del heads_found[key]
                return True, heads_found
            config["tie_word_embeddings"] = False
            reason = f"{differ[0]} differs from the {copies[differ[0]]} it is tied to, which unties the model, but"
        else:
            reason = f"{untied_by} but"
        missing = [k for k in copies if k not in heads_found]
        if missing:
            raise LgError(f"{reason} the weights have no {missing[0]}")
        return False, heads_found

    def _global_key(self, key: str, prefix: str, globals_: Mapping[str, torch.Tensor],
                    heads_found: Mapping[str, torch.Tensor]) -> tuple[str, torch.Tensor | None]:
        """(the stored name, the tensor) of a global key of the layout (None: absent)."""
        if key in self.layout.base_globals:
            return prefix + key, globals_.get(key)
        return key, heads_found.get(key)

    @staticmethod
    def _same_tensor(read: Reader, key_a: str, a: torch.Tensor | None, key_b: str, b: torch.Tensor) -> bool:
        """Whether two stored tensors hold the same values, compared a chunk at
        a time (an embedding can be large; nothing is read on the meta device)."""
        if a is None or a.shape != b.shape:
            return False
        if a.device.type == "meta" or b.device.type == "meta":
            return True
        chunk = 1 << 20
        for start in range(0, a.numel(), chunk):
            count = min(chunk, a.numel() - start)
            part_a = torch.empty(count, dtype=a.dtype)
            part_b = torch.empty(count, dtype=b.dtype)
            read(key_a, part_a, start)
            read(key_b, part_b, start)
            if not torch.equal(part_a, part_b.to(a.dtype) if a.dtype != b.dtype else part_b):
                return False
        return True

    def _sizes_config(self, depth, width, heads, kv_heads, head_dim, mlp_dim) -> dict[str, Any]:
        spec = ArchSpec(self.family, depth, width, heads, head_dim, mlp_dim, kv_heads=kv_heads)
        config: dict[str, Any] = {}
        self.set_sizes(config, spec)
        return config

    def _not_family(self, found: str) -> str:
        return f"not a {self.family} checkpoint lg reads: {found}"

    # ------------------------------------------------------------ the config
    def config(self, spec: ArchSpec) -> dict[str, Any]:
        """config.json for `spec`: the source's, with the new sizes."""
        config = copy.deepcopy(dict(spec.extras.get("config") or {}))
        config["architectures"] = [spec.extras.get("architecture") or next(iter(self.layout.architectures))]
        config.setdefault("model_type", self.layout.model_types[0])
        self.set_sizes(config, spec)
        return config

    def architecture(self, spec: ArchSpec) -> Architecture:
        return self.layout.architectures[spec.extras["architecture"]]

    def _config_class(self, model_type: str):
        return getattr(import_transformers(), self.layout.config_classes[model_type])

    def hf_config(self, spec: ArchSpec):
        """The transformers config object of `spec`."""
        return self._hf_config(self.config(spec))

    def _hf_config(self, data: Mapping[str, Any]):
        cls = self._config_class(data.get("model_type") or self.layout.model_types[0])
        try:
            return cls.from_dict({k: v for k, v in data.items() if k != "transformers_version"})
        except Exception as exc:  # noqa: BLE001 - transformers' strict dataclasses raise their own types
            detail = _complaint(exc)
            raise LgError(f"config.json does not describe a {cls.__name__} ({one_line(detail)[:200]})") from None

    # ------------------------------------------------------------ writing
    def key_of(self, spec: ArchSpec) -> Callable[[str], str]:
        prefix = self.layout.base_prefix if self.architecture(spec).prefixed else ""
        return lambda key: key if key in self.layout.head_globals else prefix + key

    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        """The state dict as groups written one at a time (the globals, each
        fused tensor's roles together, every other role over all layers),
        named and shaped as save_pretrained writes them."""
        stack.check(spec)
        layout = self.layout
        key = self.key_of(spec)
        groups = []
        for name, (role, _) in {**layout.base_globals, **layout.head_globals}.items():
            if role in stack.globals:
                groups.append(TensorGroup([(key(name), axes_and_shape(stack.globals, role)[1])],
                                          lambda name=name, role=role: iter([(key(name), stack.globals[role].data)])))
        layers = stack.layers

        def per_layer(suffix: str, roles: tuple[str, ...]) -> TensorGroup:
            shapes = [axes_and_shape(layers, role)[1][1:] for role in roles]
            shape = (sum(s[0] for s in shapes), *shapes[0][1:])
            transposed = suffix in layout.transposed and len(shape) == 2
            stored = (shape[1], shape[0]) if transposed else shape
            names = [key(f"{layout.layers}.{i}.{suffix}") for i in range(spec.depth)]

            def make() -> Iterator[tuple[str, torch.Tensor]]:
                parts = [layers[role].data for role in roles]
                for index, name in enumerate(names):
                    tensor = parts[0][index] if len(parts) == 1 else torch.cat([p[index] for p in parts])
                    yield name, (tensor.T.contiguous() if transposed else tensor)

            return TensorGroup([(name, stored) for name in names], make)

        for suffix, roles in layout.fused_keys.items():
            if roles[0] in layers:
                groups.append(per_layer(suffix, roles))
        for suffix, role in layout.layer_keys.items():
            if role in layers:
                groups.append(per_layer(suffix, (role,)))
        return groups

    def from_stack(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        return {name: tensor for group in self.write_plan(spec, stack) for name, tensor in group.make()}

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        """The state dict with each tied weight (the LM head) as the tensor it
        is tied to, from the layout's `tied_copies`: this runs on every
        forward pass of a learngene's generated model, so it builds nothing."""
        state = self.from_stack(spec, stack)
        if spec.tied_head_input:
            key = self.key_of(spec)
            for target, source in self.layout.tied_copies.items():
                state.setdefault(key(target), state[key(source)])
        return state

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        """BERT's position and token type ids, RoPE's frequencies: taken from
        a one-layer model of `spec` built on the CPU (no buffer depends on
        the depth, and a one-layer model is cheap to build)."""
        with torch.device("cpu"):
            model = self.create_model(spec.with_sizes(depth=1))
        return {name: buffer.detach() for name, buffer in model.named_buffers()}

    def expected_shapes(self, spec: ArchSpec) -> dict[str, tuple[int, ...]]:
        """The state dict save_pretrained writes for `spec` (tied weights left
        out), from the model transformers builds on the meta device."""
        self._bound(spec)
        return self._saved_shapes(self._meta_model(spec))

    def _saved_shapes(self, model: nn.Module) -> dict[str, tuple[int, ...]]:
        """What save_pretrained writes of `model`: its state dict less the
        tied weights (transformers' own map) and ignored buffers."""
        tied = set(getattr(model, "all_tied_weights_keys", None) or {})
        return {k: tuple(v.shape) for k, v in model.state_dict().items()
                if k not in tied and not any(re.search(p, k) for p in self.layout.ignored)}

    def _meta_model(self, spec: ArchSpec) -> nn.Module:
        return self._build(spec.extras["architecture"], self.hf_config(spec))

    def _bound(self, spec: ArchSpec) -> None:
        rough = spec.depth * spec.width * (2 * spec.attn_dim + 2 * spec.kv_dim + 3 * spec.mlp_dim)
        if rough > MAX_CONFIG_PARAMS:
            raise LgError(f"a model of about {rough:.3g} parameters (depth {spec.depth}, width {spec.width}) "
                          f"is more than lg builds ({MAX_CONFIG_PARAMS:.3g})")

    def check_loadable(self, spec: ArchSpec, state: Mapping[str, Any]) -> None:
        """Refuse to write what from_pretrained would not load with no missing,
        unexpected or mismatched keys."""
        expected = self.expected_shapes(spec)
        for name in sorted(set(expected) ^ set(state)):
            problem = "lacks" if name in expected else "has an unexpected"
            raise LgError(f"refusing to write: the model {problem} tensor {name} for the "
                          f"{spec.extras['architecture']} config it records")
        for name, shape in expected.items():
            found = tuple(getattr(state[name], "shape", state[name]))
            if found != shape:
                raise LgError(f"refusing to write: {name} has shape {found}; the "
                              f"{spec.extras['architecture']} config it records builds {shape}")

    # ------------------------------------------------------------ sizes
    def parameter_count(self, spec: ArchSpec) -> int:
        return sum(math.prod(shape) for shape in self._role_shapes(spec).values())

    def largest_role_elements(self, spec: ArchSpec) -> int:
        return max(math.prod(shape) for shape in self._role_shapes(spec).values())

    def _role_shapes(self, spec: ArchSpec) -> dict[str, tuple[int, ...]]:
        """Every role's shape in a model of `spec`, from its sizes alone: the
        meta-device model's state dict, read as a source would be."""
        _, stack = self._read_shapes(self.expected_shapes(spec), self.config(spec))
        return {role: shape for role, _, shape, _ in stack.shapes()}

    def _read_shapes(self, shapes: Mapping[str, tuple[int, ...]], config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """(spec, stack on the meta device) of a state dict known by its shapes alone."""
        return self.to_stack({k: torch.empty(s, device="meta") for k, s in shapes.items()}, config=config)

    # ------------------------------------------------------------ transformers models
    def load_call(self, spec: ArchSpec, path: str) -> str:
        import os

        if os.path.isdir(path):
            return f"transformers.{self.architecture(spec).auto_class}.from_pretrained({path!r})"
        # A single file (a pipe's output saved): lg builds the model from the config it records.
        return f"lgcli.load_model({path!r})[0]"

    def load_imports(self, spec: ArchSpec, path: str) -> str:
        import os

        return "import transformers" if os.path.isdir(path) else "import lgcli"

    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        config = spec.extras.get("config") or {}
        sizes = self.sizes(config)
        return [("architecture", "architecture", spec.extras.get("architecture")),
                ("vocab_size", "vocabulary", sizes.vocab), ("max_positions", "positions", sizes.positions),
                ("tied_embeddings", "tied LM head", bool(spec.tied_head_input)
                 if self.architecture(spec).task != TEXT_ENCODER else None)]

    def create_model(self, spec: ArchSpec, seed: int | None = None) -> nn.Module:
        """transformers' own random initialisation of `spec`."""
        if seed is not None:
            torch.manual_seed(seed)
        self._bound(spec)
        return self._build(spec.extras["architecture"], self.hf_config(spec), meta=False).eval()

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack:
        model = self.create_model(spec, seed=seed)
        state = {k: v.detach() for k, v in model.state_dict().items()}
        return self.to_stack(state, config=self.config(spec))[1]

    def load_model(self, spec: ArchSpec, stack: Stack) -> nn.Module:
        """A transformers model holding these weights, every key loaded (the
        tied head follows the token embedding)."""
        model = self.create_model(spec)
        state = self.from_stack(spec, stack)
        result = model.load_state_dict(state, strict=False)
        tied = set(getattr(model, "all_tied_weights_keys", None) or {})
        missing = [k for k in result.missing_keys if k not in tied and not any(re.search(p, k) for p in self.layout.ignored)]
        if missing or result.unexpected_keys:
            raise LgError(f"the weights do not fit {spec.extras['architecture']}: missing {missing[:3]}, "
                          f"unexpected {list(result.unexpected_keys)[:3]}")
        if tied:
            model.tie_weights()
        return model

    def owns_model(self, model: nn.Module) -> bool:
        config = getattr(model, "config", None)
        return getattr(config, "model_type", None) in self.layout.model_types and \
            type(model).__name__ in self.layout.architectures

    def model_task(self, model: nn.Module) -> str:
        return self.layout.architectures[type(model).__name__].task

    def spec_of_model(self, model: nn.Module) -> dict[str, Any]:
        config = model.config.to_dict()
        config["architectures"] = [type(model).__name__]
        return config

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        config = self.spec_of_model(model)
        sizes = self.sizes(config)
        return {"depth": sizes.depth, "width": sizes.width, "heads": sizes.heads, "kv_heads": sizes.kv_heads or sizes.heads,
                "architecture": type(model).__name__, "vocab_size": sizes.vocab,
                "parameters": sum(p.numel() for p in model.parameters())}

    def model_input(self, model: nn.Module) -> tuple[int, int]:
        raise LgError(f"{type(model).__name__} takes token ids, not images")

    def input_size(self, spec: ArchSpec) -> tuple[int, int, int]:
        raise LgError(f"a {spec.extras.get('architecture')} takes token ids, not images")

    def global_role_axes(self) -> dict[str, tuple[str, ...]]:
        return {role: axes for role, axes in {**self.layout.base_globals, **self.layout.head_globals}.values()}

    def no_weight_decay_roles(self) -> frozenset[str]:
        # Embedding tables are conventionally decayed in Hugging Face's trainers;
        # lg's loop exempts biases and norms (1-D) already.
        return frozenset({"pos_embed", "token_type_embed"})

    def spec_from_config(self, config: Mapping[str, Any]) -> ArchSpec:
        return self.template_from_config(config)[0]

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a config.json describes, and its stack on the meta device."""
        checked = self._checked_config(config)
        if not checked:
            raise LgError("a text model's recorded config is empty")
        self._bound_config(checked)
        architecture = self._architecture(checked, {}, "")
        model = self._build(architecture, self._hf_config(checked))
        return self._read_shapes(self._saved_shapes(model), checked)

    def rewrite_companion(self, name: str, data: bytes, spec: ArchSpec) -> bytes:
        """A file copied beside the weights (tokenizer, generation config),
        changed where it states a size; unchanged by default."""
        return data


def _complaint(exc: BaseException) -> str:
    """transformers' complaint in one line: its first two (a validator says
    which field on one line and why on the next)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__


def import_transformers():
    """transformers, its log quiet (its warnings about a config are said in
    lg's words where they matter; LG_DEBUG or --debug shows them)."""
    import transformers

    if not debugging():
        transformers.utils.logging.set_verbosity_error()
    return transformers


def compute_dtype(stored: torch.dtype) -> torch.dtype:
    """float32 for half precisions, as the ViT adapter reads them."""
    return torch.float32 if stored.is_floating_point and stored.itemsize < 4 else stored


def _check_layers(per_layer: list[dict[str, torch.Tensor]], not_family: Callable[[str], str]) -> None:
    first = per_layer[0]
    for index, layer in enumerate(per_layer):
        if set(layer) != set(first):
            diff = sorted(set(layer) ^ set(first))
            raise LgError(not_family(f"layer {index} has different parameters from layer 0 ({diff[0]})"))
        for key, tensor in layer.items():
            if tensor.shape != first[key].shape or tensor.dtype != first[key].dtype:
                raise LgError(not_family(f"layer {index}'s {key} is {tuple(tensor.shape)} "
                                         f"{str(tensor.dtype).replace('torch.', '')}, layer 0's is "
                                         f"{tuple(first[key].shape)} {str(first[key].dtype).replace('torch.', '')}"))


def config_int(config: Mapping[str, Any], key: str, *, required: bool = True, minimum: int = 1) -> int | None:
    """A whole-number config field, checked (never coerced)."""
    if key not in config or config[key] is None:
        if required:
            raise ValueError(f"field {key} is missing")
        return None
    value = config[key]
    if type(value) is not int or value < minimum:
        raise ValueError(f"field {key} must be a whole number of at least {minimum}, found {json.dumps(value)}")
    return value
