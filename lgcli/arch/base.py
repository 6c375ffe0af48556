"""What every architecture family's adapter provides: the only code that knows
a family's key names, layouts, library and inputs.

A family's state dict is declared as data and read and written by
`declared.DeclaredAdapter` (recognises, to_stack, write_plan, from_stack,
model_state, model_buffers, global_role_axes); the rest is the family's own.

Everything outside `lgcli/arch/` reaches a family through this protocol (via
`get_adapter(spec.family)` or `adapter_of_model(model)`): it never names a
family, imports the family's library, or reads its configuration fields
(tests/test_architecture_boundary.py checks that). The protocol lists every
member that code (and the registry, `lgcli.arch`) calls, and nothing else
(tests/test_hf_instances.py checks both ways); the members a family may
leave out have their defaults in `AdapterDefaults`, which every adapter's
base derives from, so no caller asks `getattr(adapter, ...)`.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol, Sequence

from ..lazy import nn, torch
from ..stack import INPUT_NORM_ROLES, ArchSpec, Stack, TensorGroup

# read(key, out, start): fill `out` with elements start.. of tensor `key`, flattened.
Reader = Callable[[str, "torch.Tensor", int], None]

# What a family's model does (`task`, `model_task`): image classification (timm ViT:
# images in, class logits out), causal or masked language modelling (token ids
# in, vocabulary logits out), or a text encoder with no LM head (hidden states
# out: nothing for `lg eval` to score).
IMAGE_CLASSIFICATION, CAUSAL_LM, MASKED_LM, TEXT_ENCODER = (
    "image-classification", "causal-lm", "masked-lm", "text-encoder")
TASKS = (IMAGE_CLASSIFICATION, CAUSAL_LM, MASKED_LM, TEXT_ENCODER)

# How lg feeds an image classifier is each model's own preprocessing
# (`lgcli.preprocessing`; lg's default there, for a model that states none).


class FamilyAdapter(Protocol):
    family: str
    # The library that loads the family's models (a model card's library_name),
    # and how its users fine-tune one (the card's advice), in a sentence.
    library: str
    fine_tune: str

    def scored_by_lg(self, spec: ArchSpec) -> bool:
        """Whether lg eval, bench and condense train and score a model of
        `spec` (not a transformers image model of features: it has no head),
        so the advice after a write names lg eval or the library's own loop."""
    # Whether the family's written form may leave its head count out (a timm
    # ViT file: its heads are then assumed when read, as the source's were);
    # a Hugging Face config.json must state it.
    heads_may_go_unrecorded: bool
    # BoT's `--wavelet auto` for this family, by direction (absent: haar).
    bot_wavelets: Mapping[str, str]

    # ---- recognising and reading
    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        """Whether these state-dict keys are this family's."""

    def recognises_config(self, config: Mapping[str, Any]) -> bool:
        """Whether a folder's config.json is one this family reads (a
        transformers model_type; a timm hub folder's architecture): the
        registry asks it of every family (`family_of_config`)."""

    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None,
                 kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        """(spec, canonical stack); lazy when given a `reader` (roles read when asked).
        `heads` or `kv_heads` give the heads a file does not record."""

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """(spec, a meta-device stack): the roles and shapes of that architecture, no data."""

    # ---- writing
    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        """The family's state dict as groups streamed one at a time (names and shapes first)."""

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        """Every parameter of the family's model of `spec` (a tied head's
        included, as the same tensor): what `torch.func.functional_call` takes."""

    def saved_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """A live model's tensors under the names its files hold (what
        `to_stack` reads): its state dict, renamed where the library's live
        names differ from its saved ones (transformers 5's image models)."""

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        """The buffers the family's model of `spec` computes when it is built
        (none on the meta device): functional_call takes them beside `model_state`."""

    def config(self, spec: ArchSpec) -> dict[str, Any]:
        """What lg records as lg.config: the family's constructor arguments."""

    def folder_config(self, spec: ArchSpec) -> dict[str, Any] | None:
        """The config.json of the folder a model of `spec` is written as (a
        Hugging Face model; a timm ViT read from a timm hub folder), or None
        when it is written as one safetensors file."""

    def check_loadable(self, spec: ArchSpec, state: Mapping[str, Any]) -> None:
        """Refuse a state dict (tensors or shapes) the family's library would not load strictly."""

    # ---- sizes, before anything is allocated
    def parameter_count(self, spec: ArchSpec) -> int: ...

    def largest_role_elements(self, spec: ArchSpec) -> int: ...

    # ---- the family's own models
    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The exact line that loads a file (or folder) of this spec with the
        family's library; `folder` says whether `path` is (or will be) a
        folder, None: whether it is one now."""

    def load_imports(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The import that line needs."""

    def rewrite_companion(self, name: str, data: bytes, spec: ArchSpec) -> bytes:
        """A file copied beside the weights of a folder (tokenizer, generation
        config), changed where it states a size of the model."""

    def written_companions(self, spec: ArchSpec) -> dict[str, bytes]:
        """Files the family writes beside the weights of a folder whose
        source had none (an image model's preprocessor_config.json stating
        its preprocessing). Default: none."""

    def stated_preprocessing(self, spec: ArchSpec, companions: Mapping[str, Any],
                             input_size: tuple[int, int, int]) -> Any:
        """The `preprocessing.Preprocessing` a model of `spec` states in its
        ecosystem's own terms (a Hugging Face folder's
        preprocessor_config.json, a timm model's pretrained_cfg), from the
        source's `companions`; None where it states none. Default: None."""

    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        """(JSON key, table label, value) of the family's own fields for `lg inspect`."""

    def create_model(self, spec: ArchSpec, seed: int | None = None) -> nn.Module:
        """The family's random initialisation of `spec`."""

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack: ...

    def load_model(self, spec: ArchSpec, stack: Stack) -> nn.Module:
        """A model holding these weights, loaded strictly."""

    def owns_model(self, model: nn.Module) -> bool:
        """Whether a live model is this family's."""

    def spec_of_model(self, model: nn.Module) -> dict[str, Any]:
        """The configuration a live model was built with."""

    def task(self, spec: ArchSpec) -> str:
        """What a model of `spec` does, which says how it is fed and scored:
        one of TASKS, from the spec alone (no model is built to ask)."""

    def model_task(self, model: nn.Module) -> str:
        """What a live model of this family does: one of TASKS."""

    # ---- an image classifier's head (the library's convention for it)
    def num_classes(self, spec: ArchSpec) -> int | None:
        """How many classes the head of a model of `spec` has, as the family
        read them (0 or None: it has no classifier head)."""

    def classes_of(self, model: nn.Module) -> int:
        """How many classes a live image classifier of this family has (an image family's member)."""

    def reset_head(self, model: nn.Module, num_classes: int) -> None:
        """A new, randomly initialised head of `num_classes` classes on a live
        image classifier of this family (an image family's member)."""

    def model_input(self, model: nn.Module) -> tuple[int, int]:
        """What an image model takes: (channels, image size)."""

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        """A live model's sizes, for reports: depth, width, heads, num_classes,
        parameters, and the family's own input fields."""

    def input_size(self, spec: ArchSpec) -> tuple[int, int, int]: ...

    # Whether the family's model takes images of any size (interpolating its
    # positions at run time, as transformers' DINOv2 does): then it is fed at
    # the size its preprocessing states (`Preprocessing.image_size`).
    any_image_size: bool
    # Whether its attention may have fewer key/value heads than query heads
    # (grouped-query attention, Llama's): what --kv-heads changes.
    grouped_query: bool

    def global_role_axes(self) -> dict[str, tuple[str, ...]]: ...

    def no_weight_decay_roles(self) -> frozenset[str]: ...

    def layer_modules(self, spec: ArchSpec, model: nn.Module) -> dict[str, list[str]]:
        """Module names in `model` (`load_model`'s), one per block, that the
        data-aware methods' calibration pass hooks: "block", "o" (attention
        output projection), "fc2" (MLP down projection), "norm1", "norm2"."""

    def stage_layer_modules(self, spec: ArchSpec, model: nn.Module) -> list[dict[str, list[str]]]:
        """A model of stages' `layer_modules`, one dict per stage (asked
        where `spec.stages`; a model without stages has none: the default)."""


class AdapterDefaults:
    """What the protocol's optional members mean where a family leaves them
    out: the base of every adapter's base (`declared.DeclaredAdapter`,
    `staged.StagedAdapter`), so a caller asks the member, never
    `getattr(adapter, name, default)`."""

    bot_wavelets: Mapping[str, str] = MappingProxyType({})  # haar both ways
    any_image_size = False  # its model takes only its own input_size
    grouped_query = False  # as many key/value heads as query heads, always

    def written_companions(self, spec: ArchSpec) -> dict[str, bytes]:
        return {}

    def stated_preprocessing(self, spec: ArchSpec, companions: Mapping[str, Any],
                             input_size: tuple[int, int, int]) -> Any:
        return None

    def stage_layer_modules(self, spec: ArchSpec, model: nn.Module) -> list[dict[str, list[str]]]:
        return []


# A resize that copies whole layers knows which source layer each target layer holds, and a family whose
# config states something per layer (Qwen2's attention kind) must write each layer's from that source layer's,
# which no size says: the target spec carries it to the family's config writer under this key of its extras.
LAYER_SOURCES = "layer_sources"


def with_layer_sources(target: ArchSpec, source: ArchSpec, layers: Sequence[int | None] | None) -> ArchSpec:
    """`target` recording the source layer each of its layers holds: (how many layers its config describes,
    one index into those per target layer, None for a layer that holds no one layer: a random one). Its
    config is the source's, so a source that carries a record of its own (a resize of a resize, held in
    memory) is composed with, keeping the indices the config's. `layers` None (the method blended layers, or
    recorded none): `target` as it is, the family's writer falling back on each layer's relative position."""
    if layers is None:
        return target
    if len(layers) != target.depth or any(i is not None and not 0 <= i < source.depth for i in layers):
        raise RuntimeError(f"layer sources {list(layers)} do not map {source.depth} layers to {target.depth}")
    described, held = source.extras.get(LAYER_SOURCES) or (source.depth, list(range(source.depth)))
    if len(held) != source.depth:  # a record of another depth's layers: the source's config describes its own
        described, held = source.depth, list(range(source.depth))
    record = (described, [None if i is None else held[i] for i in layers])
    return dataclasses.replace(target, extras={**target.extras, LAYER_SOURCES: record})


def with_heads(call: str, path: str, heads: int | None) -> str:
    """A load line's `call` passing `heads` to lg's own loader, which refuses
    a file that records none without them (a timm line states its heads
    already): for the heads a user gave, or a written file's assumed ones."""
    if heads is None:
        return call
    return call.replace(f"lgcli.load_model({path!r})", f"lgcli.load_model({path!r}, heads={heads})", 1)


def norm_facts(layout: Any, stored_globals: Mapping[str, Any]) -> dict[str, bool]:
    """The ArchSpec fields on the residual stream's norms: what a declared
    family (`declared.Layout`) states, and whether these weights start the
    stream at a norm (a timm ViT has norm_pre or not)."""
    roles = {layout.global_roles[key][0] for key in stored_globals if key in layout.global_roles}
    return {"post_norm": layout.post_norm, "rms_norm": layout.rms_norm,
            "normed_input": bool(roles & INPUT_NORM_ROLES)}


__all__ = ["AdapterDefaults", "FamilyAdapter", "LAYER_SOURCES", "Reader", "norm_facts", "with_heads",
           "with_layer_sources", "TASKS", "IMAGE_CLASSIFICATION", "CAUSAL_LM", "MASKED_LM", "TEXT_ENCODER"]
