"""What a Hugging Face family declares (`HfLayout`): its state dict and
config.json as data, and the short list of hooks where it says what data
cannot. `hf.HfAdapter` (text) and `hf_image.HfImageAdapter` (images) read
and write any declaration; a family is one of them made with its own
(``HfAdapter(LAYOUT)``), never a subclass. docs/checkpoints.md, "Declaring
a Hugging Face family", walks through one.

A family module imports this one; this one imports no family module
(tests/test_arch_imports.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..stack import ArchSpec, Stack
from .declared import Layout, StoredTensors


@dataclass(frozen=True)
class Architecture:
    """One model class of a family: what it does (`base.TASKS`), the Auto
    class that loads it, and whether its weights sit under the family's base
    prefix (``transformer.``, ``model.``, ``bert.``) with head keys beside."""

    task: str
    auto_class: str
    prefixed: bool


@dataclass(frozen=True)
class HfLayout(Layout):
    """A Hugging Face family's declaration: its state dict and configuration
    as data (its keys: `declared.Layout`; what transformers adds, below),
    and the few things data cannot say as plain functions. A family is an
    instance of `HfAdapter` (text) or `hf_image.HfImageAdapter` (images)
    made with its declaration, never a subclass (the Swin, whose weights
    are read in stages, is `hf_swin.HfSwinAdapter`'s).

    `config_classes` maps a config.json model_type to its transformers
    config class, `architectures` a model class to what it is. `tied_copies`
    maps a head key to the key it is a copy of when the config ties the word
    embeddings (the LM head: the token embedding): a tensor of its own only
    in an untied model. `table_sizes` maps a lookup table's role (token,
    position, token-type embeddings) to the config field that holds its row
    count: a bare state dict's config takes them from the weights.
    `optional_sizes` are the sizes a config.json may leave out (of
    `size_fields`; the others it must give). `tied_head_input` names the
    roles of the norm whose output a tied LM head reads (SPEC.md
    "Baselines", clone). `implicit_mlp_ratio`: the MLP size field may be
    null, meaning this many times the width (GPT-2's n_inner); a config that
    leaves it null keeps doing so. `refused_model_types` maps a config.json
    model_type the family recognises but does not read to the one line that
    says why and what to do (a whole CLIPModel). `bot_wavelets`: BoT's
    `--wavelet auto` by direction (absent: haar). `image_processor`: an image
    family's transformers image processor class (what a
    preprocessor_config.json lg writes names). `any_image_size`: the live
    model interpolates its positions for any image size (DINOv2), so it is
    fed at its preprocessor_config.json's size, as transformers feeds it.

    Hooks: each a plain function, None where the family needs none; the
    only places a family says what its data cannot (docs/checkpoints.md,
    "Declaring a Hugging Face family", lists them too):

    - `read_sizes(config, sizes) -> Sizes`: the sizes a config states in
      its own way, from what `size_fields` read (DINOv2's mlp_ratio);
    - `write_sizes(config, spec)`: the fields a resize changes beyond
      `size_fields`, after they are written (Llama's head_dim and
      layer_types; DINOv2's mlp_ratio and backbone stages);
    - `check_stored(stored) -> str | None`: what stored tensors the keys
      allow have that the family does not (DINOv2: both an MLP and a
      SwiGLU), said in the refusal; None when nothing;
    - `check_config(config, spec, stack)`: refuse a config.json that says
      other than the weights beyond the sizes, before the sizes are compared
      (DINOv2's use_swiglu_ffn, CLIP's projection_dim);
    - `omitted_keys(spec, stack) -> set`: the declared per-layer suffixes a
      model of `spec` does not have (DINOv2: the MLP it does not use);
    - `inspect_fields(spec) -> list`: `lg inspect`'s (JSON key, label,
      value) rows of the family's own, after the common ones;
    - `rewrite_companion(name, data, spec) -> bytes`: a file copied beside
      the weights, changed where it states a size (BERT's sentence-
      transformers pooling config)."""

    config_classes: Mapping[str, str] = field(default_factory=dict)  # model_type -> transformers config class
    architectures: Mapping[str, Architecture] = field(default_factory=dict)
    tied_copies: Mapping[str, str] = field(default_factory=dict)
    table_sizes: Mapping[str, str] = field(default_factory=dict)
    optional_sizes: frozenset[str] = frozenset({"kv_heads", "head_dim", "vocab", "positions"})
    tied_head_input: tuple[str, ...] = ()
    implicit_mlp_ratio: int | None = None
    refused_model_types: Mapping[str, str] = field(default_factory=dict)
    bot_wavelets: Mapping[str, str] = field(default_factory=dict)
    image_processor: str | None = None
    any_image_size: bool = False
    # The hooks (see above).
    read_sizes: Callable[[Mapping[str, Any], "Sizes"], "Sizes"] | None = None
    write_sizes: Callable[[dict[str, Any], ArchSpec], None] | None = None
    check_stored: Callable[[StoredTensors], str | None] | None = None
    check_config: Callable[[Mapping[str, Any], ArchSpec, Stack], None] | None = None
    omitted_keys: Callable[[ArchSpec, Stack], set[str]] | None = None
    inspect_fields: Callable[[ArchSpec], list[tuple[str, str, Any]]] | None = None
    rewrite_companion: Callable[[str, bytes, ArchSpec], bytes] | None = None

    @property
    def model_types(self) -> tuple[str, ...]:
        return tuple(self.config_classes)


# The sizes a text family's config.json holds (`HfLayout.size_fields` names their fields).
SIZE_NAMES = ("depth", "width", "heads", "kv_heads", "head_dim", "mlp_dim", "vocab", "positions")


@dataclass(frozen=True)
class Sizes:
    """The sizes a config.json gives (None: the field is absent, or the family has none)."""

    depth: int
    width: int
    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    mlp_dim: int | None
    vocab: int | None
    positions: int | None


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
