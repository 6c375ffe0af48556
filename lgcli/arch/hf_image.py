"""What every Hugging Face image family shares (no family of its own):
`HfImageAdapter`, an `HfAdapter` with images' sizes in place of a
vocabulary's, transformers' renaming between saved and live parameter
names, the classifier heads lg trains, and the preprocessor_config.json
beside the weights. A family (hf_vit.py: ViT and DeiT; hf_dinov2.py;
hf_clip.py) is an instance of it made with the family's declaration
(`hf.HfLayout`: its data, and the hooks where it says what data cannot);
hf_swin.py's `HfSwinAdapter` adds the reading of a model of stages.

Keys are those save_pretrained writes and the Hub holds
(``vit.encoder.layer.N.attention.attention.query``). transformers 5 names
the live model's parameters otherwise (``vit.layers.N.attention.q_proj``)
and renames between the two when it loads and saves; lg reads and writes the
saved names, and maps to the live ones (transformers' own renaming) only
where a live model is built or called.

A family module imports this one; this one imports no family module
(tests/test_arch_imports.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ..checkpoint.companions import companion_bytes
from ..errors import LgError, shown
from ..lazy import nn, torch
from ..preprocessing import PREPROCESSING, Preprocessing, from_image_processor, image_processor_fields
from ..stack import TOKENS, ArchSpec, Stack, TensorGroup
from .base import Reader, norm_facts
from .declared import Heads, StoredTensors
from .hf import HfAdapter, checked_sizes, import_transformers, model_holding
from .hf_layout import Architecture, HfLayout, config_int


# The sizes a resize changes for a ViT-like config.json (ViT, DeiT, CLIP's
# vision tower); the image geometry (image_size, patch_size, num_channels) and
# the labels stay the source's.
SIZE_FIELDS = {"depth": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads",
               "mlp_dim": "intermediate_size"}


@dataclass(frozen=True)
class ImageArchitecture(Architecture):
    """A model class and the head tensors it has (DeiT's two classes share
    the base and differ only there; a model of features, Dinov2Model or
    CLIPVisionModel, has none). lg's task for each is image classification:
    what it takes is images, and lg refuses to train or score a transformers
    image model before its outputs matter (`HfImageAdapter.model_input`).

    `model_type`: config.json's model_type for this class where it is not
    the family's own, one the family otherwise refuses
    (CLIPForImageClassification's clip, a whole CLIPModel's too): read for
    this class alone. `tower_config`: the config.json field that holds the
    vision tower's config (sizes, image geometry) where the class's config
    nests it (a CLIPConfig's vision_config); None where it is the config
    itself. `classifier_recipe`: for a model of features, what to do to
    make a classifier of it, where loading its folder as the family's
    ...ForImageClassification class does not (CLIP's)."""

    head_keys: tuple[str, ...] = ()
    model_type: str | None = None
    tower_config: str | None = None
    classifier_recipe: str | None = None


class HfImageAdapter(HfAdapter):
    """A Hugging Face image classifier of the ViT kind: what `HfAdapter`
    does for text families, with images' sizes in place of the vocabulary's,
    and transformers' renaming between saved and live parameter names. A
    family is an instance: ``HfImageAdapter(LAYOUT)``, its image processor
    and hooks in its declaration (`hf.HfLayout`)."""

    layout: HfLayout
    fine_tune = ("transformers' `Trainer` (or your own loop) on the model the load line builds, its images "
                 "prepared by `AutoImageProcessor` from the preprocessor_config.json beside the weights")

    def __init__(self, layout: HfLayout) -> None:
        super().__init__(layout)
        # (architecture, depth, roles) -> saved parameter name -> its live
        # names: the renaming does not depend on the widths.
        self._live_names_cache: dict[tuple, dict[str, list[str]]] = {}

    # ------------------------------------------------------------ a config that nests the tower's
    def _declared(self, config: Mapping[str, Any]) -> ImageArchitecture | None:
        """The declared class config.json's `architectures` names, if any."""
        names = config.get("architectures")
        if isinstance(names, list) and names and isinstance(names[0], str):
            return self.layout.architectures.get(names[0])
        return None

    def tower(self, config: Mapping[str, Any]) -> Mapping[str, Any]:
        """The part of config.json that describes the vision tower: the
        config itself, or the field the class nests it in
        (`ImageArchitecture.tower_config`), the same object (written into)."""
        field = getattr(self._declared(config), "tower_config", None)
        if field is None:
            return config
        nested = config.get(field)
        if not isinstance(nested, Mapping):
            raise ValueError(f"field {field} (the vision tower's config) must be an object, found "
                             f"{json.dumps(nested)[:60]}")
        return nested

    def live_tower(self, hf_config: Any, architecture: str) -> Any:
        """`tower` of a transformers config object of `architecture`."""
        field = getattr(self.layout.architectures.get(architecture), "tower_config", None)
        return getattr(hf_config, field) if field else hf_config

    def sizes(self, config: Mapping[str, Any]):
        return super().sizes(self.tower(config))

    def set_sizes(self, config: dict[str, Any], spec: ArchSpec) -> None:
        super().set_sizes(self.tower(config), spec)  # type: ignore[arg-type]

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """`HfAdapter.checked_config`, and a model type the family refuses (a
        CLIPModel's clip) read for the class that declares it as its own
        (`ImageArchitecture.model_type`: CLIPForImageClassification), which
        is given no other."""
        own_type = getattr(self._declared(config), "model_type", None) if isinstance(config, Mapping) else None
        if own_type is None:
            return super().checked_config(config)
        if config.get("model_type") != own_type:
            raise LgError(f"config.json's model_type is {shown(repr(config.get('model_type')))}; its "
                          f"{config['architectures'][0]} is model type {own_type}")
        return checked_sizes(self, config)

    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        # lg reads the model classes the layout declares: with a head, every
        # key is under the base prefix (ViT's base model, ViTModel, has a
        # pooler lg does not map, and is not declared); a model of features
        # (Dinov2Model) is saved without it.
        first = next(iter(self.layout.layer_keys))
        prefixes = {self.layout.base_prefix if a.prefixed else "" for a in self.layout.architectures.values()}
        return any(f"{prefix}{self.layout.layers}.0.{first}" in state_dict for prefix in prefixes)

    # ------------------------------------------------------------ reading
    def check_required(self, stored: StoredTensors) -> None:
        key_of_role = {role: key for key, (role, _) in self.layout.base_globals.items()}
        for role in ("patch_embed_weight", "pos_embed"):
            if key_of_role[role] not in stored.globals:
                raise LgError(self.not_family(f"no {self.layout.base_prefix}{key_of_role[role]}"))
        if "o" not in {self.layout.layer_keys.get(suffix) for suffix in stored.first}:
            raise LgError(self.not_family("no attention output projection in layer 0"))
        wrong = self.layout.check_stored(stored) if self.layout.check_stored else None
        if wrong:
            raise LgError(self.not_family(wrong))

    def _architecture(self, config: Mapping[str, Any], heads_found: Mapping[str, Any], prefix: str) -> str:
        """config.json's class, else the one whose head tensors these are."""
        if config and config.get("architectures"):
            return super()._architecture(config, heads_found, prefix)
        if not prefix and all(a.prefixed for a in self.layout.architectures.values()):
            raise LgError(self.not_family(f"no {self.layout.base_prefix}* keys (lg reads "
                                          f"{', '.join(self.layout.architectures)})"))
        for name, architecture in self.layout.architectures.items():
            if set(heads_found) == set(architecture.head_keys):
                return name
        return next(iter(self.layout.architectures))  # no head found: refused in spec_from

    def spec_from(self, config: Mapping[str, Any], stored: StoredTensors,
                  sources: Mapping[str, tuple[str, int, tuple[int, ...]]], attention: Heads,
                  read: Reader) -> tuple[ArchSpec, StoredTensors]:
        if not config:
            # The image size, and the labels' names, are in config.json alone.
            raise self.config_missing()
        architecture = self._architecture(config, stored.heads, stored.prefix)
        wanted = self.layout.architectures[architecture].head_keys
        if set(stored.heads) != set(wanted):
            found = ", ".join(sorted(stored.heads)) or "none"
            raise LgError(f"{architecture} has the head tensors {', '.join(wanted)}; the weights have {found}")
        base_config = self._base_config(config, architecture)
        classifier = self._classifier_key(architecture)
        extras = {"architecture": architecture, "config": base_config,
                  "num_classes": int(stored.heads[classifier].shape[0]) if classifier else None}
        spec = ArchSpec(family=self.family, depth=stored.depth, width=sources["o"][2][0], heads=attention.heads,
                        head_dim=attention.head_dim, mlp_dim=sources["fc1"][2][0] if "fc1" in sources else 0,
                        extras=extras, heads_assumed=attention.assumed, kv_heads=attention.kv_heads,
                        **norm_facts(self.layout, stored.globals))
        return spec, stored

    def config_missing(self) -> LgError:
        return LgError(f"a Hugging Face {self.layout.model_types[0]} model is read with its config.json "
                       f"(a folder, or a file lg wrote); these weights come without one")

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        """config.json's sizes and image geometry must be the weights'."""
        super().check_agreement(config, spec, stack)
        config = self.tower(config)
        _, channels, patch, _ = stack.globals.axes_and_shape("patch_embed_weight")[1]
        axes, shape = stack.globals.axes_and_shape("pos_embed")
        tokens = shape[axes.index(TOKENS)]
        prefix_tokens = sum(role in stack.globals for role in ("cls_token", "dist_token"))
        try:
            said = {name: config_int(config, name, required=False)
                    for name in ("patch_size", "num_channels", "image_size")}
        except ValueError as exc:
            raise LgError(f"config.json: {exc}") from None
        for name, has in (("patch_size", patch), ("num_channels", channels)):
            if said[name] is not None and said[name] != has:
                raise LgError(f"config.json says {name} {said[name]}; the weights have {has}")
        if said["image_size"] is not None and said["patch_size"] is not None:
            expected = (said["image_size"] // said["patch_size"]) ** 2 + prefix_tokens
            if expected != tokens:
                raise LgError(f"config.json's image_size {said['image_size']} and patch_size {said['patch_size']} "
                              f"make {expected} position embeddings; the weights have {tokens}")

    # ------------------------------------------------------------ writing
    def write_plan(self, spec: ArchSpec, stack: Stack) -> list[TensorGroup]:
        """The declared groups (less the family's `omitted_keys`), less the
        head tensors of the other model class."""
        others = set(self.layout.head_globals) - set(self.architecture(spec).head_keys)
        return [group for group in super().write_plan(spec, stack) if group.entries[0][0] not in others]

    # ------------------------------------------------------------ saved and live names
    def _saved_state(self, model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A live state dict under the names save_pretrained writes, by
        transformers' own renaming (which may also fuse tensors: DINOv2's
        SwiGLU gate and up projections are saved as one, `weights_in`)."""
        try:
            from transformers.core_model_loading import revert_weight_conversion
        except ImportError:  # a transformers that does not rename: the names are the saved ones
            return state
        return revert_weight_conversion(model, state)

    def saved_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return self._saved_state(model, {live: tensor.detach() for live, tensor in model.state_dict().items()})

    def _live_parts_of(self, model: nn.Module) -> dict[str, list[str]]:
        """Saved parameter name -> the live names it holds, in order: one for
        a renamed tensor, several for a fused one, which transformers splits
        into equal row blocks when it loads (`Chunk(dim=0)`, the only
        one-to-many conversion of these families). Found by saving markers:
        each live tensor replaced by its index, so a fused name holds the
        indices of its parts in their order."""
        names = list(model.state_dict())
        markers = {name: torch.tensor([index]) for index, name in enumerate(names)}
        saved = self._saved_state(model, markers)
        return {name: [names[i] for i in marker.tolist()] for name, marker in saved.items()}

    def _live_parts(self, spec: ArchSpec, stack: Stack) -> dict[str, list[str]]:
        """`_live_parts_of` a model of `spec` (cached: `model_state` runs on
        every forward pass of a learngene's model; the names depend on the
        class, the depth and which roles there are, not on the widths)."""
        key = self._names_key(spec, stack)
        if key not in self._live_names_cache:
            self._live_names_cache[key] = self._live_parts_of(self._meta_model(spec))
        return self._live_names_cache[key]

    def _names_key(self, spec: ArchSpec, stack: Stack) -> tuple:
        """What the saved and live names of a model of `spec` depend on."""
        return spec.extras["architecture"], spec.depth, tuple(stack.layers), tuple(stack.globals)

    def _saved_shapes(self, model: nn.Module) -> dict[str, tuple[int, ...]]:
        return {name: tuple(tensor.shape) for name, tensor in self._saved_state(model, model.state_dict()).items()}

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack:
        model = self.create_model(spec, seed=seed)
        state = self._saved_state(model, {live: tensor.detach() for live, tensor in model.state_dict().items()})
        return self.to_stack(state, config=self.config(spec))[1]

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        parts_of, live = self._live_parts(spec, stack), {}
        for saved, tensor in self.from_stack(spec, stack).items():
            live.update(zip(parts_of[saved], tensor.chunk(len(parts_of[saved]), dim=0)))
        return live

    def load_model(self, spec: ArchSpec, stack: Stack) -> nn.Module:
        """A transformers model holding these weights, loaded strictly."""
        return model_holding(self, spec, self.model_state(spec, stack), strict=True)[0]

    # ------------------------------------------------------------ images
    def _classifier_key(self, architecture: str) -> str | None:
        """The key of the class's classifier weight (the first of its heads
        whose role is `head_weight`), None for a model with no classifier."""
        roles = self.layout.head_globals
        return next((key for key in self.layout.architectures[architecture].head_keys
                     if roles[key][0] == "head_weight"), None)

    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        config = self.tower(spec.extras.get("config") or {})
        return [("architecture", "architecture", spec.extras.get("architecture")),
                ("patch_size", "patch size", config.get("patch_size")),
                ("img_size", "image size", config.get("image_size")),
                ("in_chans", "channels", config.get("num_channels")),
                ("num_classes", "classes", spec.extras.get("num_classes")),
                *(self.layout.inspect_fields(spec) if self.layout.inspect_fields else ())]

    # The heads transformers' image classifiers hold (DeiT with its teacher: two, averaged).
    HEAD_MODULES = ("classifier", "cls_classifier", "distillation_classifier")

    def model_input(self, model: nn.Module) -> tuple[int, int]:
        """(channels, image size) of an image classifier lg trains and scores
        (its images in, `output.logits` out: `train.image_logits`). A model
        of features (Dinov2Model, CLIPVisionModel, SwinModel) has no head to
        score: refused in one line, naming the class that has one."""
        name = type(model).__name__
        if not any(isinstance(getattr(model, head, None), nn.Linear) for head in self.HEAD_MODULES):
            # Dinov2Model -> Dinov2ForImageClassification, unless the class declares its own recipe (CLIP's)
            recipe = getattr(self.layout.architectures.get(name), "classifier_recipe", None)
            family = name.removesuffix("Model").removesuffix("Vision")
            recipe = recipe or (f"load its folder as transformers' {family}ForImageClassification (num_labels=N: a "
                                f"new head on the same weights), save_pretrained that, and copy the folder's "
                                f"preprocessor_config.json beside it (its mean, std and image size)")
            raise LgError(f"{name} is a model of features (no classification head): lg eval, bench and condense "
                          f"train and score image classifiers; {recipe}")
        tower = self.live_tower(model.config, name)
        return int(tower.num_channels), int(tower.image_size)

    def scored_by_lg(self, spec: ArchSpec) -> bool:
        """A classifier is trained and scored by lg; a model of features has no head (`model_input`)."""
        return bool(self.architecture(spec).head_keys)

    def classes_of(self, model: nn.Module) -> int:
        """How many classes a live classifier has: its config's `num_labels`."""
        return int(model.config.num_labels)

    def reset_head(self, model: nn.Module, num_classes: int) -> None:
        """Every head of `model` new (a Linear of its width to `num_classes`,
        transformers' initialisation), and its config's labels to match."""
        for name in self.HEAD_MODULES:
            head = getattr(model, name, None)
            if isinstance(head, nn.Linear):
                setattr(model, name, nn.Linear(head.in_features, num_classes).to(head.weight.device))
        model.config.num_labels = num_classes

    def input_size(self, spec: ArchSpec) -> tuple[int, int, int]:
        # Read from config.json where it states both (`lg inspect` imports
        # no torch); the config class's defaults where it leaves one out.
        config = self.tower(spec.extras.get("config") or {})
        channels, size = config.get("num_channels"), config.get("image_size")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (channels, size)):
            hf_config = self.live_tower(self.hf_config(self.config(spec)), spec.extras["architecture"])
            channels, size = hf_config.num_channels, hf_config.image_size
        return int(channels), int(size), int(size)

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        config = self.live_tower(model.config, type(model).__name__)
        return {"depth": config.num_hidden_layers, "width": config.hidden_size, "heads": config.num_attention_heads,
                "architecture": type(model).__name__, "patch_size": config.patch_size,
                "img_size": config.image_size, "in_chans": config.num_channels,
                "num_classes": model.config.num_labels if self._classifier_key(type(model).__name__) else None,
                "parameters": sum(p.numel() for p in model.parameters())}

    def no_weight_decay_roles(self) -> frozenset[str]:
        # As timm's ViT (`no_weight_decay`): positions and prefix tokens.
        return frozenset({"pos_embed", "cls_token", "dist_token"})

    # ------------------------------------------------------------ preprocessing
    @property
    def any_image_size(self) -> bool:
        """Whether the live model interpolates its positions for any image size (the declaration says)."""
        return self.layout.any_image_size

    @property
    def image_processor(self) -> str:
        """The transformers image processor class that prepares this
        family's images (what a preprocessor_config.json lg writes, where the
        source had none, names: `written_companions`)."""
        return self.layout.image_processor or "ViTImageProcessor"

    def processor_config(self, data: bytes) -> dict[str, Any]:
        """A preprocessor_config.json's fields, those it leaves out filled
        with its image processor class's defaults (transformers' own: cheaper
        than restating every class's); malformed JSON refused in one line."""
        try:
            config = json.loads(data)
        except (ValueError, UnicodeDecodeError) as error:
            raise LgError(f"{PROCESSOR_FILE} is not valid JSON ({str(error).splitlines()[0][:80]})") from None
        if not isinstance(config, dict):
            raise LgError(f"{PROCESSOR_FILE} must be a JSON object")
        if all(field in config for field in PROCESSOR_FIELDS):
            return config
        name = config.get("image_processor_type", self.image_processor)
        transformers = import_transformers()
        processor_class = getattr(transformers, name, None) if isinstance(name, str) else None
        if processor_class is None or not name.endswith("ImageProcessor"):
            raise LgError(f"{PROCESSOR_FILE}: image_processor_type {shown(repr(name)[:60])} is not a transformers "
                          f"image processor lg knows, and the file leaves out "
                          f"{', '.join(f for f in PROCESSOR_FIELDS if f not in config)}")
        return {**processor_class().to_dict(), **config}

    def stated_preprocessing(self, spec: ArchSpec, companions: Mapping[str, Any],
                             input_size: tuple[int, int, int]) -> Preprocessing | None:
        """The folder's preprocessor_config.json (None without one), read
        and checked by `preprocessing.from_image_processor`."""
        if PROCESSOR_FILE not in companions:
            return None
        config = self.processor_config(companion_bytes(companions, PROCESSOR_FILE))
        return from_image_processor(config, input_size, f"Hugging Face folder's {PROCESSOR_FILE}",
                                    any_size=self.any_image_size)

    def rewrite_companion(self, name: str, data: bytes, spec: ArchSpec) -> bytes:
        """The source's preprocessor_config.json as it is, unless the model
        was trained with other preprocessing (--mean ...): then its
        fields say that one."""
        wanted = spec.extras.get(PREPROCESSING)
        if name != PROCESSOR_FILE or wanted is None:
            return super().rewrite_companion(name, data, spec)
        config = self.processor_config(data)
        if from_image_processor(config, wanted.input_size, any_size=self.any_image_size).same_recipe(wanted):
            return data
        config.update(image_processor_fields(wanted))
        return (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()

    def written_companions(self, spec: ArchSpec) -> dict[str, bytes]:
        """A preprocessor_config.json stating the model's preprocessing,
        for a folder whose source had none (`api.folder_files` keeps the
        source's where it had one)."""
        preprocessing = spec.extras.get(PREPROCESSING)
        if preprocessing is None:
            return {}
        config = {"image_processor_type": self.image_processor, **image_processor_fields(preprocessing)}
        return {PROCESSOR_FILE: (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()}


PROCESSOR_FILE = "preprocessor_config.json"
# The fields lg reads from it (`preprocessing.from_image_processor`).
PROCESSOR_FIELDS = ("do_resize", "size", "resample", "do_rescale", "rescale_factor", "do_normalize", "image_mean",
                    "image_std")
