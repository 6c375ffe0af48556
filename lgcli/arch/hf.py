"""Hugging Face transformers text models  <->  (ArchSpec, Stack): what every
text family shares. A family (gpt2.py, llama.py, bert.py) is declared as data
(`hf_layout.HfLayout`: its key names, which stored tensors fuse several
roles, which are stored transposed, the config fields that hold its sizes,
and a few hooks), as mergekit declares architectures; this module reads,
checks and writes any of them: a family is ``HfAdapter(LAYOUT)``.

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
import dataclasses
import re
from typing import Any, Mapping

from ..errors import LgError, debugging, one_line, shown
from ..header import HeaderTensor, value_dtype
from ..lazy import nn, torch
from ..stack import ArchSpec, Stack, TensorGroup
from .base import TEXT_ENCODER, Reader, norm_facts
from .declared import DeclaredAdapter, Heads, StoredTensors, conventional_heads
from .hf_layout import SIZE_NAMES, Architecture, HfLayout, Sizes, config_int
from .shapes import ModelShapes

# A configuration describing more parameters than this is refused before a
# model (even on the meta device) is built from it.
MAX_CONFIG_PARAMS = 1_000_000_000_000


def checked_sizes(adapter: "HfAdapter", config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of config.json, its sizes readable (`HfAdapter.sizes`): the
    end of every `checked_config`."""
    try:
        adapter.sizes(config)
    except (TypeError, ValueError) as exc:
        raise LgError(f"config.json: {exc}") from None
    return copy.deepcopy(dict(config))


class HfAdapter(DeclaredAdapter):
    """A Hugging Face text family (`lgcli.arch.base.FamilyAdapter`): its
    declaration (`HfLayout`) read and written by `declared`, its config.json
    and transformers' models. A family is an instance,
    ``HfAdapter(LAYOUT)``; what its data cannot say is in the declaration's
    hooks (`HfLayout`), not in a subclass."""

    layout: HfLayout
    writes_folder = True
    library = "transformers"
    fine_tune = ("transformers' `Trainer` (or your own loop) on the model the load line builds, with the "
                 "tokenizer files beside the weights")

    def __init__(self, layout: HfLayout) -> None:
        self.layout = layout
        # Grouped-query attention where the config states key/value heads
        # apart from the query heads (Llama's num_key_value_heads).
        self.grouped_query = "kv_heads" in layout.size_fields

    @property
    def bot_wavelets(self) -> Mapping[str, str]:
        return self.layout.bot_wavelets

    # ------------------------------------------------------------ sizes in config.json
    def sizes(self, config: Mapping[str, Any]) -> Sizes:
        """The sizes the family's config fields hold (`layout.size_fields`),
        each checked, in the order the layout declares them."""
        read = {name: config_int(config, name_in_config, required=name not in self.layout.optional_sizes)
                for name, name_in_config in self.layout.size_fields.items()}
        sizes = Sizes(**{name: read.get(name) for name in SIZE_NAMES})
        if sizes.mlp_dim is None and self.layout.implicit_mlp_ratio:
            sizes = dataclasses.replace(sizes, mlp_dim=self.layout.implicit_mlp_ratio * sizes.width)
        return self.layout.read_sizes(config, sizes) if self.layout.read_sizes else sizes

    def set_sizes(self, config: dict[str, Any], spec: ArchSpec) -> None:
        """Write the spec's sizes into the family's config fields (a head
        dimension is written by the family that has one apart from the width)."""
        values = {"depth": spec.depth, "width": spec.width, "heads": spec.heads,
                  "kv_heads": spec.key_value_heads, "mlp_dim": spec.mlp_dim}
        ratio, mlp_field = self.layout.implicit_mlp_ratio, self.layout.size_fields.get("mlp_dim")
        implicit = bool(ratio) and config.get(mlp_field) is None and spec.mlp_dim == ratio * spec.width
        config.update({self.layout.size_fields[name]: value for name, value in values.items()
                       if name in self.layout.size_fields})
        if implicit:  # null means ratio x width; a config that spells the size out keeps doing so
            config[mlp_field] = None
        if self.layout.write_sizes:
            self.layout.write_sizes(config, spec)

    # ------------------------------------------------------------ identity
    def recognises_config(self, config: Mapping[str, Any]) -> bool:
        return config.get("model_type") in (*self.layout.model_types, *self.layout.refused_model_types)

    # ------------------------------------------------------------ reading (declared.DeclaredAdapter.to_stack)
    def check_required(self, stored: StoredTensors) -> None:
        self._width(stored.globals)
        wrong = self.layout.check_stored(stored) if self.layout.check_stored else None
        if wrong:
            raise LgError(self.not_family(wrong))

    def spec_from(self, config: Mapping[str, Any], stored: StoredTensors,
                  sources: Mapping[str, tuple[str, int, tuple[int, ...]]], attention: Heads,
                  read: Reader) -> tuple[ArchSpec, StoredTensors]:
        """The spec, its config.json (the source's, else the config class's
        defaults with the sizes the weights show), and the head tensors that
        are not tied copies."""
        architecture = self._architecture(config, stored.heads, stored.prefix)
        base_config = self._base_config(config, architecture)
        tied, stored = self._tied(base_config, stored, read, bare=not config)
        width = self._width(stored.globals)
        mlp_dim = sources["fc1"][2][0] if "fc1" in sources else 0
        if not config:  # a bare state dict: the sizes it shows, the config class's defaults for the rest
            # Into an empty config: what set_sizes keeps (GPT-2's null n_inner, Llama's head_dim) follows
            # what a config states, and a bare state dict states nothing.
            sized: dict[str, Any] = {}
            self.set_sizes(sized, ArchSpec(self.family, stored.depth, width, attention.heads, attention.head_dim,
                                           mlp_dim, kv_heads=attention.kv_heads))
            base_config.update(sized)
            table_rows = {self.layout.global_roles[key][0]: int(tensor.shape[0])
                          for key, tensor in [*stored.globals.items(), *stored.heads.items()]}
            for role, name in self.layout.table_sizes.items():
                if role in table_rows:
                    base_config[name] = table_rows[role]
        extras = {"architecture": architecture, "config": base_config}
        spec = ArchSpec(family=self.family, depth=stored.depth, width=width, heads=attention.heads,
                        head_dim=attention.head_dim, mlp_dim=mlp_dim, extras=extras,
                        heads_assumed=attention.assumed, kv_heads=attention.kv_heads,
                        tied_head_input=self.layout.tied_head_input if tied else (),
                        **norm_facts(self.layout, stored.globals))
        return spec, stored

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        if self.layout.check_config:
            self.layout.check_config(config, spec, stack)
        if config:
            check_sizes(self.sizes(config), spec, stack)

    def _width(self, globals_: Mapping[str, torch.Tensor]) -> int:
        token = next((k for k, (role, _) in self.layout.base_globals.items() if role == "token_embed"), None)
        if token is None or token not in globals_:
            raise LgError(self.not_family(f"no token embedding ({self.layout.base_prefix}{token})"))
        embedding = globals_[token]
        if embedding.dim() != 2 or min(embedding.shape) < 1:
            raise LgError(self.not_family(f"{token} of shape {tuple(embedding.shape)} is not (vocab, width)"))
        return int(embedding.shape[1])

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

    def heads(self, config: Mapping[str, Any], stored: StoredTensors, q_rows: int, kv_rows: int,
              requested: int | None) -> Heads:
        """From config.json, else --source-heads, else head dim 64 (and said
        to be assumed); key/value heads from the key outputs."""
        sizes = self.sizes(config) if config else None
        recorded = sizes.heads if sizes else None
        if recorded is not None and requested is not None and recorded != requested:
            raise LgError(f"config.json says {recorded} heads; the {requested} heads given contradict it")
        chosen = recorded if recorded is not None else requested
        assumed = chosen is None
        if chosen is None:
            chosen = conventional_heads(q_rows, kv_rows)
        if not (sizes and sizes.head_dim) and q_rows % chosen:
            said = "config.json says" if recorded is not None else "--source-heads gives"
            raise LgError(f"{said} {chosen} heads, which do not divide the {q_rows} query outputs "
                          f"of the weights")
        head_dim = sizes.head_dim if sizes and sizes.head_dim else q_rows // chosen
        if head_dim < 1 or chosen * head_dim != q_rows:
            raise LgError(self.not_family(f"{chosen} heads of dimension {head_dim} do not make the {q_rows} "
                                          f"query outputs"))
        if kv_rows % head_dim:
            raise LgError(self.not_family(f"{kv_rows} key outputs are not whole heads of dimension {head_dim}"))
        kv_heads = kv_rows // head_dim
        if sizes and sizes.kv_heads is not None and sizes.kv_heads != kv_heads:
            raise LgError(f"config.json says {sizes.kv_heads} key/value heads; the weights have {kv_heads} "
                          f"(of dimension {head_dim})")
        if chosen % kv_heads:
            raise LgError(self.not_family(f"{kv_heads} key/value heads do not divide the {chosen} heads"))
        return Heads(int(chosen), int(head_dim), int(kv_heads), assumed)

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise LgError(f"a model's config must be a JSON object, found {type(config).__name__}")
        model_type = config.get("model_type")
        if model_type in self.layout.refused_model_types:
            raise LgError(self.layout.refused_model_types[model_type])
        if model_type is not None and model_type not in self.layout.model_types:
            raise LgError(f"config.json's model_type {shown(model_type)} is not a {self.family} model "
                          f"({', '.join(self.layout.model_types)})")
        return checked_sizes(self, config)

    def _base_config(self, config: Mapping[str, Any], architecture: str) -> dict[str, Any]:
        """The config the output starts from: the source's, else the config class's defaults."""
        if config:
            out = dict(config)
        else:
            out = config_class(self.layout, self.layout.model_types[0])().to_dict()
        out["architectures"] = [architecture]
        out.setdefault("model_type", self.layout.model_types[0])
        return out

    def _tied(self, config: dict[str, Any], stored: StoredTensors, read: Reader,
              bare: bool = False) -> tuple[bool, StoredTensors]:
        """(whether the LM head is tied to the token embedding, the stored
        tensors less the head copies that are not roles of their own), decided as from_pretrained
        decides: by tie_word_embeddings, whose absence means the config
        class's default (which differs between families: reading it as
        "tied" would drop an untied head, or clone would scale a head that
        is not tied). A tied copy saved anyway (a live model's state dict,
        pickled checkpoints) is read past when it equals what it copies;
        one that differs unties the model (transformers keeps both then),
        and the config written says so. A bare state dict (no config) is
        tied unless it holds a head of its own, and its config records which."""
        heads_found = dict(stored.heads)
        if not self.layout.architectures[config["architectures"][0]].prefixed:
            return False, stored  # a base model has no head
        copies = self.layout.tied_copies
        if bare:
            config["tie_word_embeddings"] = True  # made False below if a saved head differs
        tied = config.get("tie_word_embeddings")
        untied_by = "config.json unties the word embeddings"
        if tied is None:
            cls = config_class(self.layout, config["model_type"])
            tied = getattr(cls(), "tie_word_embeddings", True)
            untied_by = (f"config.json leaves tie_word_embeddings out, which {cls.__name__} "
                         f"reads as untied,")
        if tied:
            saved = [k for k in copies if k in heads_found]
            differ = [k for k in saved if not same_tensor(
                read, *stored.stored_global(copies[k]), k, heads_found[k])]
            if not differ:
                for key in saved:
                    del heads_found[key]
                return True, dataclasses.replace(stored, heads=heads_found)
            config["tie_word_embeddings"] = False
            reason = f"{differ[0]} differs from the {copies[differ[0]]} it is tied to, which unties the model, but"
        else:
            reason = f"{untied_by} but"
        missing = [k for k in copies if k not in heads_found]
        if missing:
            raise LgError(f"{reason} the weights have no {missing[0]}")
        return False, stored

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

    def hf_config(self, data: Mapping[str, Any]):
        """The transformers config object of a config.json (`config(spec)`'s)."""
        cls = config_class(self.layout, data.get("model_type") or self.layout.model_types[0])
        try:
            return cls.from_dict({k: v for k, v in data.items() if k != "transformers_version"})
        except Exception as exc:  # noqa: BLE001 - transformers' strict dataclasses raise their own types
            detail = _complaint(exc)
            raise LgError(f"config.json does not describe a {cls.__name__} ({one_line(detail)[:200]})") from None

    # ------------------------------------------------------------ writing
    def write_prefix(self, spec: ArchSpec) -> str:
        """The base prefix, which a base model (no head) is saved without."""
        return self.layout.base_prefix if self.architecture(spec).prefixed else ""

    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        """The declared groups, less the per-layer keys the family's
        `omitted_keys` says a model of `spec` has not."""
        groups = super().write_plan(spec, stack)
        if not self.layout.omitted_keys:
            return groups
        omitted = self.layout.omitted_keys(spec, stack)
        return [group for group in groups if not any(group.entries[0][0].endswith("." + key) for key in omitted)]

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        """The state dict with each tied weight (the LM head) as the tensor it
        is tied to, from the layout's `tied_copies`: this runs on every
        forward pass of a learngene's generated model, so it builds nothing."""
        state = self.from_stack(spec, stack)
        if spec.tied_head_input:
            prefix = self.write_prefix(spec)
            for target, source in self.layout.tied_copies.items():
                state.setdefault(self.layout.key(target, prefix), state[self.layout.key(source, prefix)])
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
        return build_model(spec.extras["architecture"], self.hf_config(self.config(spec)))

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
    def model_shapes(self, spec: ArchSpec) -> ModelShapes:
        """The state dict save_pretrained writes for `spec`, as shapes, read
        off the meta-device model (`expected_shapes`)."""
        return ModelShapes.of_state(self.expected_shapes(spec), [(self.layout, self.write_prefix(spec))])

    def parameter_count(self, spec: ArchSpec) -> int:
        return self.model_shapes(spec).parameter_count()

    def largest_role_elements(self, spec: ArchSpec) -> int:
        return self.model_shapes(spec).largest_role_elements()

    # ------------------------------------------------------------ transformers models
    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        import os

        if os.path.isdir(path) if folder is None else folder:
            return f"transformers.{self.architecture(spec).auto_class}.from_pretrained({path!r})"
        # A single file (a pipe's output saved): lg builds the model from the config it records.
        return f"lgcli.load_model({path!r})[0]"

    def load_imports(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        import os

        return "import transformers" if (os.path.isdir(path) if folder is None else folder) else "import lgcli"

    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        config = spec.extras.get("config") or {}
        sizes = self.sizes(config)
        return [("architecture", "architecture", spec.extras.get("architecture")),
                ("vocab_size", "vocabulary", sizes.vocab), ("max_positions", "positions", sizes.positions),
                ("tied_embeddings", "tied LM head", bool(spec.tied_head_input)
                 if self.architecture(spec).task != TEXT_ENCODER else None),
                *(self.layout.inspect_fields(spec) if self.layout.inspect_fields else ())]

    def create_model(self, spec: ArchSpec, seed: int | None = None) -> nn.Module:
        """transformers' own random initialisation of `spec`."""
        if seed is not None:
            torch.manual_seed(seed)
        self._bound(spec)
        return build_model(spec.extras["architecture"], self.hf_config(self.config(spec)), meta=False).eval()

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack:
        model = self.create_model(spec, seed=seed)
        state = {k: v.detach() for k, v in model.state_dict().items()}
        return self.to_stack(state, config=self.config(spec))[1]

    def live_keys(self, model: nn.Module, keys: list[str]) -> list[str]:
        """Checkpoint keys as the model names its parameters: transformers 5
        renames some families' keys when it loads them (DINOv2's
        attention.output.dense is attention.o_proj in the model), by the
        conversion mapping it keeps per model type; lg asks it, not a copy."""
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, rename_source_key

        transforms = get_model_conversion_mapping(model)
        renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
        converters = [t for t in transforms if not isinstance(t, WeightRenaming)]
        return [rename_source_key(key, renamings, converters)[0] for key in keys]

    def load_model(self, spec: ArchSpec, stack: Stack) -> nn.Module:
        """A transformers model holding these weights, every key loaded (the
        tied head follows the token embedding)."""
        model, result = model_holding(self, spec, self.from_stack(spec, stack), strict=False)
        tied = set(getattr(model, "all_tied_weights_keys", None) or {})
        missing = [k for k in result.missing_keys if k not in tied and not any(re.search(p, k) for p in self.layout.ignored)]
        if missing or result.unexpected_keys:
            raise LgError(f"the weights do not fit {spec.extras['architecture']}: missing {missing[:3]}, "
                          f"unexpected {list(result.unexpected_keys)[:3]}")
        return model

    def owns_model(self, model: nn.Module) -> bool:
        config = getattr(model, "config", None)
        return getattr(config, "model_type", None) in self.layout.model_types and \
            type(model).__name__ in self.layout.architectures

    def task(self, spec: ArchSpec) -> str:
        return self.architecture(spec).task

    def num_classes(self, spec: ArchSpec) -> int | None:
        return spec.extras.get("num_classes")  # an image classifier's (`hf_image`); a text model has none

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

    def no_weight_decay_roles(self) -> frozenset[str]:
        # Embedding tables are conventionally decayed in Hugging Face's trainers;
        # lg's loop exempts biases and norms (1-D) already.
        return frozenset({"pos_embed", "token_type_embed"})

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a config.json describes, and its stack on the meta device."""
        checked = self.checked_config(config)
        if not checked:
            raise LgError("a text model's recorded config is empty")
        self._bound_config(checked)
        architecture = self._architecture(checked, {}, "")
        model = build_model(architecture, self.hf_config(checked))
        # The state dict save_pretrained writes, read on the meta device.
        shapes = self._saved_shapes(model)
        return self.to_stack({k: torch.empty(s, device="meta") for k, s in shapes.items()}, config=checked)

    def rewrite_companion(self, name: str, data: bytes, spec: ArchSpec) -> bytes:
        """A companion (tokenizer, generation config) changed where it states
        a size (the family's `rewrite_companion`); unchanged by default."""
        return self.layout.rewrite_companion(name, data, spec) if self.layout.rewrite_companion else data


def model_holding(adapter: HfAdapter, spec: ArchSpec, state: Mapping[str, torch.Tensor], *,
                  strict: bool) -> tuple[nn.Module, Any]:
    """transformers' model of `spec` holding `state` (with load_state_dict's
    result), built as from_pretrained builds one: nothing random is drawn
    for the weights `state` replaces (1.8 s of SmolLM2's 7 s build did),
    then the head is tied and transformers' own initialisation runs for
    what `state` leaves alone (the buffers it computes: rotary
    frequencies, position ids). It skips every tensor marked with its
    `_is_hf_initialized` flag, set on the loaded ones for that pass only."""
    from transformers.initialization import no_init_weights

    adapter._bound(spec)
    with no_init_weights():
        model = build_model(spec.extras["architecture"], adapter.hf_config(adapter.config(spec)), meta=False).eval()
    result = model.load_state_dict(state, strict=strict)
    if getattr(model, "all_tied_weights_keys", None):
        model.tie_weights()
    live = model.state_dict(keep_vars=True)
    loaded = [live[key] for key in set(live) - set(result.missing_keys)]
    try:
        for tensor in loaded:
            tensor._is_hf_initialized = True
        model.initialize_weights()
    finally:
        for holder in [*loaded, *model.modules()]:
            holder.__dict__.pop("_is_hf_initialized", None)
    return model, result


def build_model(architecture: str, hf_config, meta: bool = True) -> nn.Module:
    """transformers' `architecture` built from `hf_config` (on the meta
    device: no memory), its complaints about the config in one line:
    transformers raises whatever type it likes for these (KeyError for
    an unknown activation or rope type, AssertionError for a pad token
    outside the vocabulary), and they used to surface as lg's own bugs.
    Every command that builds or writes a model comes here (or through
    `HfAdapter.hf_config`, which quotes the config class's complaints)
    before any work; `lg inspect` reads config.json with lg's own checks only, since
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


def check_sizes(sizes: Sizes, spec: ArchSpec, stack: Stack) -> None:
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


def same_tensor(read: Reader, key_a: str, a: torch.Tensor | HeaderTensor | None, key_b: str,
               b: torch.Tensor | HeaderTensor) -> bool:
    """Whether two stored tensors hold the same values, compared a chunk at
    a time (an embedding can be large; nothing is read on the meta device)."""
    if a is None or tuple(a.shape) != tuple(b.shape):
        return False
    if a.is_meta or b.is_meta:
        return True
    # Header stand-ins (`lg inspect`) read as the tensors they stand for.
    dtype_a, dtype_b = value_dtype(a), value_dtype(b)
    chunk = 1 << 20
    for start in range(0, a.numel(), chunk):
        count = min(chunk, a.numel() - start)
        part_a = torch.empty(count, dtype=dtype_a)
        part_b = torch.empty(count, dtype=dtype_b)
        read(key_a, part_a, start)
        read(key_b, part_b, start)
        if not torch.equal(part_a, part_b.to(dtype_a) if dtype_a != dtype_b else part_b):
            return False
    return True


def config_class(layout: HfLayout, model_type: str):
    """The transformers config class of a model type the layout reads."""
    return getattr(import_transformers(), layout.config_classes[model_type])


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
