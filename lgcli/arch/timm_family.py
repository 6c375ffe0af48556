"""timm families declared as data, read and written by one adapter (no
family of its own).

timm builds every model the same way: `build_model_with_cfg(ModelClass,
variant, **kwargs)` calls the class with the registered model's arguments
over which the caller's go, and loads a checkpoint after the model's own
`checkpoint_filter_fn` has renamed the keys of other layouts. A timm family
is declared alike (`TimmFamily`): the registered model lg builds and its
class, the key of each role (a `declared.Layout`), how the model's
arguments beyond the sizes are read from the tensors' shapes, and a filter
that renames the keys of another layout to timm's; what data cannot say is
a short list of optional plain functions (`TimmFamily`'s docstring).
`TimmAdapter` is the `base.FamilyAdapter` of any such declaration:
`declared` reads and writes the state dict, timm builds the model, and
nothing else is the family's.

A model's sizes without timm, counted one way for every timm family: the
spec keeps the shapes of the tensors it was read from, and a size follows
from a role's axes (`Stack` names them), the resizable ones at the spec's
sizes, the others (a window's relative positions, the position table's
tokens) as read. The written file is checked against those shapes
(`check_loadable`), so a resize never imports timm; the tests check them
against timm's own models, read and resized.

A family module imports this one; this one imports no family module
(tests/test_arch_imports.py).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import LgError
from ..lazy import nn, torch
from ..preprocessing import PREPROCESSING, Preprocessing, default_preprocessing
from ..stack import CLASSES, HEADS, LAYER_ROLE_AXES, ArchSpec, Stack
from .base import Reader
from .declared import DeclaredAdapter, Heads, Layout, StoredTensors
from .shapes import LayerShapes, ModelShapes
from .timm import (TIMM_HUB_CONFIG, TimmClassifier, check_recorded_size, is_timm_hub_config, json_shown,
                   local_dir_call, no_parameter_init, positive_number, timm_hub_folder_config, timm_hub_meta_model,
                   timm_reads_as_safetensors, timm_stated_preprocessing)

Shape = tuple[int, ...]
# A state dict's keys -> {new key: old key}: the keys of another layout under
# timm's names (the role of timm's per-model `checkpoint_filter_fn`).
KeyFilter = Callable[[Mapping[str, Any]], dict[str, str]]
# Where a spec keeps the model's arguments beyond its sizes, and the shapes it was read from.
ARGS, SHAPES = "timm_args", "timm_shapes"
# timm's names for a transformer's sizes, and for its MLP as a ratio to the width.
SIZE_ARGS = {"depth": "depth", "width": "embed_dim", "heads": "num_heads"}
MLP_RATIO = "mlp_ratio"


@dataclass(frozen=True)
class TimmFamily:
    """A timm family, as data.

    `layout`: the key of each role (its `size_fields` default to timm's
    depth, embed_dim, num_heads); `model_name`: the registered timm model lg
    builds, `timm.create_model(model_name, **arguments)` (its registered
    arguments under the ones lg passes, as `build_model_with_cfg` takes
    them); `model_class`: the class it builds ("timm.models.beit.Beit"),
    which says a live model is the family's; `marker`: a key only this
    family's state dicts hold (detection); `arguments(globals, block)`: the
    model's arguments beyond its sizes read from the shapes of the global
    tensors and of block 0's (by key, less the layer prefix) - it must give
    timm's `img_size`, `in_chans` and `num_classes`; `key_filter`: renames a
    state dict of another layout to timm's (`KeyFilter`); `no_weight_decay`:
    the global roles timm exempts; `name`: the family as an error calls it;
    `assumed`: the arguments `arguments` gives a default for, the tensors
    not showing them (a layer scale's starting value): a recorded value wins
    there, while any other recorded argument must be what the tensors say.

    What a family may add, each with a default that needs nothing (the
    same list is in docs/checkpoints.md, "Declaring a timm family"):

    - `variants`: a global key -> the registered model lg builds when a
      state dict holds it (DeiT's distilled model: ``dist_token``), in
      place of `model_name`; a recorded ``model_name`` may be any of them;
    - `hub_architectures`: the timm hub folders (what
      `timm.models.save_for_hf` writes) the family reads, by the start of
      their architecture's name ("beit"; "" for any a family registered
      earlier does not claim: `family_of_config` asks in order): their
      config.json is read as the arguments of the model timm builds of it,
      which must be a `model_class`, and a resize of one is written as one;
    - `check_config(config) -> dict`: the family's own checks of a recorded
      configuration beyond the sizes' (types, ranges), returning the fields
      it reads;
    - `recorded_arguments(config, arguments, globals, where) -> dict`: the
      model's arguments from what the tensors say (`arguments`) and a
      recorded configuration that settles what they cannot (a ViT's pooling,
      its image size where two grids fit its position table), refusing
      one that says otherwise (`where` names it); by default each recorded
      argument must be the tensors' unless `assumed`;
    - `live_arguments(model) -> dict`: what a live model was built with that
      its tensors may not show (heads, pooling, layer scale's start), for
      `lgcli.spec_of_model` and hub folders; by default its pooling;
    - `registered(arguments, model_name) -> (name, differing)`: the
      registered model closest to a file's arguments and the arguments that
      differ from it, for a load line that names it with
      ``pretrained=True, pretrained_cfg_overlay=dict(file=...)``; by default
      the line builds `model_name` with every argument and loads the file
      strictly;
    - `registered_preprocessing(name, input_size) -> Preprocessing | None`:
      how timm prepares the images of that registered model (None: unstated);
    - `inspect_fields(spec) -> list`: `lg inspect`'s (JSON key, label,
      value) rows of the family's own (by default its timm model, image
      size, channels and classes)."""

    layout: Layout
    model_name: str
    model_class: str
    marker: str
    arguments: Callable[[Mapping[str, Shape], Mapping[str, Shape]], dict[str, Any]]
    name: str
    key_filter: KeyFilter | None = None
    no_weight_decay: frozenset[str] = frozenset()
    assumed: frozenset[str] = frozenset()
    variants: Mapping[str, str] = field(default_factory=dict)
    hub_architectures: tuple[str, ...] = ()
    check_config: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    recorded_arguments: Callable[[Mapping[str, Any], dict[str, Any], Mapping[str, Shape], str],
                                 dict[str, Any]] | None = None
    live_arguments: Callable[[Any], dict[str, Any]] | None = None
    registered: Callable[[dict[str, Any], str], tuple[str, list[str]]] | None = None
    registered_preprocessing: Callable[[str | None, tuple[int, int, int]], Any] | None = None
    inspect_fields: Callable[[ArchSpec], list[tuple[str, str, Any]]] | None = None


def model_class(declaration: TimmFamily) -> type:
    """The timm class the family's models are (`TimmFamily.model_class`), imported."""
    import importlib

    module, _, name = declaration.model_class.rpartition(".")
    return getattr(importlib.import_module(module), name)


def recorded_meta_model(name: str, args: Mapping[str, Any], described: str) -> nn.Module:
    """timm's model `name` of a recorded ``lg.config``'s arguments, on the
    meta device (shapes only, its sizes bounded first), or one line saying
    the config does not describe `described`."""
    import timm

    check_recorded_size(args, "the file's lg.config")
    try:
        with torch.device("meta"):
            return timm.create_model(name, pretrained=False, **args)
    except (TypeError, ValueError, AssertionError, RuntimeError, KeyError) as exc:
        raise LgError(f"the file's lg.config does not describe a {described} ({exc})".splitlines()[0]) from None


def mlp_ratio(width: int, mlp_dim: int) -> float:
    """The ratio for which timm's int(width * ratio) gives exactly mlp_dim."""
    ratio = mlp_dim / width
    return ratio if int(width * ratio) == mlp_dim else (mlp_dim + 0.5) / width


def check_recorded_name(config: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """A recorded ``lg.config``'s model must be one of `names` (the family's
    registered model first: a config that names none is of that one)."""
    name = config.get("model_name", names[0])
    if name not in names:
        raise LgError(f"the file's lg.config names model {json_shown(name)}, not "
                      f"{' or '.join(repr(n) for n in names)}")


def check_recorded_sizes(config: Mapping[str, Any], whole_numbers: tuple[str, ...], lists: tuple[str, ...] = ()
                         ) -> None:
    """A recorded ``lg.config``'s sizes, as every timm family checks them
    before timm is asked to build the model: each field of `whole_numbers` a
    whole number of at least 1 (the refusal quotes the value found), each of
    `lists` (a family of stages' sizes per stage) a non-empty list of them,
    the MLP ratio a positive number."""
    for key in whole_numbers:
        if key in config and not (type(config[key]) is int and config[key] >= 1):
            raise LgError(f"the file's lg.config field {key} must be a whole number of at least 1, "
                          f"found {json_shown(config[key])}")
    for key in lists:
        if key in config and not (isinstance(config[key], (list, tuple)) and config[key]
                                  and all(type(v) is int and v >= 1 for v in config[key])):
            raise LgError(f"the file's lg.config field {key} must be a list of whole numbers of at least 1")
    if MLP_RATIO in config and not positive_number(config[MLP_RATIO]):
        raise LgError(f"the file's lg.config field {MLP_RATIO} must be a positive number")


def renamed(state_dict: Mapping[str, Any], reader: Reader | None, key_filter: KeyFilter | None,
            memory: Callable[[Mapping[str, Any]], Reader]) -> tuple[Mapping[str, Any], Reader | None]:
    """(the state dict under timm's names, a reader that reads each renamed
    key from its old name): what timm's checkpoint_filter_fn does, with
    nothing read (a file stays lazy). `memory` makes the reader of an
    in-memory state dict."""
    renames = key_filter(state_dict) if key_filter is not None else {}
    if not renames:
        return state_dict, reader
    moved = set(renames.values())
    state = {key: value for key, value in state_dict.items() if key not in moved}
    state.update({new: state_dict[old] for new, old in renames.items()})
    read = reader or memory(state_dict)
    return state, (lambda key, out, start: read(renames.get(key, key), out, start))


class TimmAdapter(TimmClassifier, DeclaredAdapter):
    """The adapter of a declared timm family (`TimmFamily`)."""

    heads_may_go_unrecorded = True  # lg.config leaves out heads lg assumed (`config`)
    bot_wavelets: dict[str, str] = {}

    def __init__(self, declaration: TimmFamily) -> None:
        self.declaration = declaration
        sizes = {**SIZE_ARGS, **declaration.layout.size_fields}
        self.layout = dataclasses.replace(declaration.layout, size_fields=sizes)

    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        """The family's marker key, and a layer 0."""
        first = f"{self.layout.layers}.0."
        return self.declaration.marker in state_dict and any(key.startswith(first) for key in state_dict)

    def recognises_config(self, config: Mapping[str, Any]) -> bool:
        """A timm hub folder's config.json of an architecture the family reads."""
        return is_timm_hub_config(config) and config["architecture"].startswith(self.declaration.hub_architectures)

    # ------------------------------------------------------------ reading
    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None,
                 kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        from .declared import memory_reader

        state_dict, reader = renamed(state_dict, reader, self.declaration.key_filter, memory_reader)
        return super().to_stack(state_dict, config, heads, reader, kv_heads)

    def not_family(self, found: str) -> str:
        return f"not a {self.declaration.name} checkpoint lg reads: {found}"

    def checked_config(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """A recorded ``lg.config`` (the timm model's name and arguments), or
        a timm hub folder's config.json (as the arguments of the model timm
        builds of it): every argument one the model's class takes, of a JSON
        type, and the family's own checks (`TimmFamily.check_config`)."""
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise LgError(f"the file's lg.config must be a JSON object, found {type(config).__name__}")
        if self.recognises_config(config):
            config = self.hub_arguments(config)
        else:  # only a folder's own config.json makes the output a folder
            config = {key: value for key, value in config.items() if key != TIMM_HUB_CONFIG}
        check_recorded_name(config, (self.declaration.model_name, *self.declaration.variants.values()))
        for key, value in config.items():  # an argument timm does not take is refused when it builds the model
            if key != TIMM_HUB_CONFIG and not isinstance(value, (str, int, float, bool, list, type(None))):
                raise LgError(f"the file's lg.config field {key} must be a JSON value, found {json_shown(value)}")
        check_recorded_sizes(config, whole_numbers=(*SIZE_ARGS.values(), "img_size", "in_chans"))
        if self.declaration.check_config is not None:
            hub = config.get(TIMM_HUB_CONFIG)
            config = self.declaration.check_config(config)
            if hub is not None:
                config[TIMM_HUB_CONFIG] = hub
        return {key: value for key, value in config.items() if key != "model_name"}

    def hub_arguments(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments a timm hub folder's config.json means, taken from the
        model timm builds of it on the meta device, so nothing is guessed:
        the architecture's own defaults fill what model_args leaves out (a
        hub download records none), as `timm.create_model('local-dir:DIR')`
        does. The config itself is kept under TIMM_HUB_CONFIG, for the
        output folder (`folder_config`)."""
        model, _ = timm_hub_meta_model(config, model_class(self.declaration), f"{self.declaration.name}s")
        sizes = self.layout.size_fields
        return {**self.spec_of_model(model), sizes["depth"]: len(getattr(model, self.layout.layers)),
                sizes["width"]: int(model.embed_dim), "patch_size": int(model.patch_embed.patch_size[0]),
                "in_chans": int(model.patch_embed.proj.in_channels), "num_classes": int(model.num_classes),
                TIMM_HUB_CONFIG: dict(config)}

    def check_required(self, stored: StoredTensors) -> None:
        present = {self.layout.layer_keys.get(s) for s in stored.first} | {
            r for s, roles in self.layout.fused_keys.items() if s in stored.first for r in roles}
        for role in ("q", "o", "fc1", "fc2"):
            if role not in present:
                raise LgError(self.not_family(f"{self.layout.layers}.0 has no {role} projection"))

    def heads(self, config: Mapping[str, Any], stored: StoredTensors, q_rows: int, kv_rows: int,
              requested: int | None) -> Heads:
        if TIMM_HUB_CONFIG in config:
            # A config.json of another model is refused on its sizes, before
            # its head count is tried on these tensors.
            output = next(s for s, role in self.layout.layer_keys.items() if role == "o")
            sizes = self.layout.size_fields
            for key, found in ((sizes["depth"], stored.depth), (sizes["width"], int(stored.first[output].shape[0]))):
                if config[key] != found:
                    raise LgError(f"config.json says {key} {config[key]}, its tensors say {found}")
        return super().heads(config, stored, q_rows, kv_rows, requested)

    def exact_heads(self, stored: StoredTensors, q_rows: int) -> int | None:
        """A per-head tensor says the heads: a relative position table's
        columns, a q-norm's width (the head dim)."""
        for suffix, role in self.layout.layer_keys.items():
            if suffix in stored.first and LAYER_ROLE_AXES[role][-1] == HEADS:
                return int(stored.first[suffix].shape[-1])
            if suffix in stored.first and role == "q_norm_weight":
                return q_rows // int(stored.first[suffix].shape[0])
        return None

    def spec_from(self, config: Mapping[str, Any], stored: StoredTensors,
                  sources: Mapping[str, tuple[str, int, tuple[int, ...]]], attention: Heads,
                  read: Reader) -> tuple[ArchSpec, StoredTensors]:
        spec, stored = super().spec_from(config, stored, sources, attention, read)
        shape = {key: tuple(t.shape) for key, t in stored.globals.items()}
        block = {key: tuple(t.shape) for key, t in stored.first.items()}
        sizes = {*SIZE_ARGS.values(), MLP_RATIO}
        derived = self.declaration.arguments(shape, block)
        recorded = {key: value for key, value in config.items() if key != TIMM_HUB_CONFIG}
        if self.declaration.recorded_arguments is not None:
            args = self.declaration.recorded_arguments(recorded, derived, shape, self.recorded_where(config))
        else:
            for key, value in recorded.items():
                if key in derived and key not in self.declaration.assumed and value != derived[key]:
                    raise LgError(f"the file's lg.config says {key} {json_shown(value)}, its tensors say "
                                  f"{json_shown(derived[key])}")
            args = {**derived, **{k: v for k, v in recorded.items() if k not in sizes}}
        missing = {"img_size", "in_chans", "num_classes"} - set(args)
        if missing:
            raise LgError(f"the {self.family} declaration reads no {', '.join(sorted(missing))} from the tensors")
        extras = {**spec.extras, ARGS: args, SHAPES: {"layer": block, "globals": shape}}
        if TIMM_HUB_CONFIG in config:
            extras[TIMM_HUB_CONFIG] = config[TIMM_HUB_CONFIG]
        return dataclasses.replace(spec, extras=extras), stored

    @staticmethod
    def recorded_where(config: Mapping[str, Any]) -> str:
        """What a refusal calls the recorded configuration."""
        return "config.json" if TIMM_HUB_CONFIG in config else "the file's lg.config"

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        """Each recorded size must be the tensors'."""
        derived = self.model_args(spec)
        for key in (*SIZE_ARGS.values(), MLP_RATIO):
            if key not in config:
                continue
            value, found = config[key], derived[key]
            width = derived["embed_dim"]
            agrees = int(width * value) == int(width * found) if key == MLP_RATIO else value == found
            if not agrees:
                raise LgError(f"{self.recorded_where(config)} says {key} {json_shown(value)}, its tensors say "
                              f"{json_shown(found)}")

    # ------------------------------------------------------------ timm's arguments
    def model_args(self, spec: ArchSpec) -> dict[str, Any]:
        """timm.create_model's keyword arguments for `spec`: its sizes, then
        the rest as read."""
        sizes = self.layout.size_fields
        return {sizes["depth"]: spec.depth, sizes["width"]: spec.width, sizes["heads"]: spec.heads,
                MLP_RATIO: mlp_ratio(spec.width, spec.mlp_dim), **spec.extras[ARGS]}

    def num_classes(self, spec: ArchSpec) -> int | None:
        return spec.extras[ARGS]["num_classes"]

    def config(self, spec: ArchSpec) -> dict[str, Any]:
        """What lg records in ``lg.config``: the timm name and arguments, less
        the head count when it was assumed (never recorded as fact)."""
        args = self.model_args(spec)
        if spec.heads_assumed:
            del args[self.layout.size_fields["heads"]]
        return {"model_name": self.model_name(spec), **args}

    def folder_config(self, spec: ArchSpec) -> dict[str, Any] | None:
        """The config.json of a timm hub folder of `spec`, when it was read
        from one (else None: one file): the source's, with the sizes this
        spec changes. timm builds `architecture` with `model_args` over its
        defaults, so every size a resize changes is written there."""
        hub = spec.extras.get(TIMM_HUB_CONFIG)
        if hub is None:
            return None
        args = self.model_args(spec)
        resized = {key: args[key] for key in (*self.layout.size_fields.values(), MLP_RATIO) if key in args}
        # The pooled features are the width (one width: no stages).
        return timm_hub_folder_config(hub, resized, spec.width, args["num_classes"], spec)

    def input_size(self, spec: ArchSpec) -> tuple[int, int, int]:
        args = spec.extras[ARGS]
        return (int(args["in_chans"]), int(args["img_size"]), int(args["img_size"]))

    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        if self.declaration.inspect_fields is not None:
            return self.declaration.inspect_fields(spec)
        args = spec.extras[ARGS]
        return [("model_name", "timm model", self.model_name(spec)),
                ("img_size", "image size", args["img_size"]), ("in_chans", "channels", args["in_chans"]),
                ("num_classes", "classes", args["num_classes"])]

    def no_weight_decay_roles(self) -> frozenset[str]:
        return self.declaration.no_weight_decay

    def stated_preprocessing(self, spec: ArchSpec, companions: Mapping[str, Any],
                             input_size: tuple[int, int, int]) -> Preprocessing | None:
        """timm's statement of how this model's images are prepared: a hub
        folder's pretrained_cfg (`timm_stated_preprocessing`), else a
        registered model's, only when the file's architecture is exactly
        that model's (`TimmFamily.registered_preprocessing`)."""
        if TIMM_HUB_CONFIG in spec.extras:
            return timm_stated_preprocessing(spec, input_size)
        if self.declaration.registered is None or self.declaration.registered_preprocessing is None:
            return None
        name, differ = self.declaration.registered(self.model_args(spec), self.model_name(spec))
        return self.declaration.registered_preprocessing(None if differ else name, input_size)

    # ------------------------------------------------------------ sizes, without timm
    def model_shapes(self, spec: ArchSpec) -> ModelShapes:
        """The state dict of a model of `spec`, as shapes: the tensors the
        spec was read from, each axis a method resizes at the spec's size
        (a fused tensor's rows: its roles' together)."""
        sizes = {**spec.axis_sizes(), CLASSES: int(spec.extras[ARGS]["num_classes"])}
        read = spec.extras[SHAPES]

        def shape(axes: tuple[str, ...], found: Shape) -> Shape:
            return tuple(sizes.get(axis, size) for axis, size in zip(axes, found))

        layer = {}
        for suffix, found in read["layer"].items():
            roles = self.layout.fused_keys.get(suffix, (self.layout.layer_keys.get(suffix),))
            parts = [shape(LAYER_ROLE_AXES[role][1:], found) for role in roles]
            layer[suffix] = (sum(part[0] for part in parts), *parts[0][1:])
        globals_ = {key: shape(self.layout.global_roles[key][1], found) for key, found in read["globals"].items()}
        return ModelShapes((LayerShapes(self.layout, "", spec.depth, layer),), globals_)

    # ------------------------------------------------------------ timm's models
    def model_name(self, spec: ArchSpec) -> str:
        """The registered model lg builds: a variant's when the spec was read
        from a state dict holding its key."""
        read = spec.extras[SHAPES]["globals"]
        return next((name for key, name in self.declaration.variants.items() if key in read),
                    self.declaration.model_name)

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a recorded ``lg.config`` describes and its stack on the
        meta device, read from the state dict of the model timm builds of it."""
        args = self.checked_config(config)
        model = recorded_meta_model(config.get("model_name", self.declaration.model_name), args, self.declaration.name)
        return self.to_stack(model.state_dict(), config=config)

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        """What timm computes when it builds the model (position indices, a
        zero key bias), not saved; the model is built for them only when
        it has some (a ViT has none), its parameters left uninitialised:
        they are dropped (`no_parameter_init`)."""
        with torch.device("meta"):
            model = self.create_model(spec)
        saved = set(model.state_dict())
        if all(name in saved for name, _ in model.named_buffers()):
            return {}
        with torch.device("cpu"), no_parameter_init():
            model = self.create_model(spec)
        return {name: buffer.detach() for name, buffer in model.named_buffers() if name not in saved}

    def shard_folder(self, spec: ArchSpec, path: str, folder: bool | None) -> bool:
        """Whether `path` is (or will be: `folder`) a folder of shards, which
        timm does not read: a folder not read from a timm hub folder."""
        return TIMM_HUB_CONFIG not in spec.extras and _is_folder(path, folder)

    def load_imports(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        if self.shard_folder(spec, path, folder):
            return "import lgcli"
        if TIMM_HUB_CONFIG in spec.extras:
            return "import timm"
        return "import timm" if timm_reads_as_safetensors(path) else "import lgcli"  # `file_load_call`'s

    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The exact line that builds the model in timm and loads the file
        (or the hub folder) strictly."""
        hub_folder = local_dir_call(spec, path)
        if hub_folder is not None:
            return hub_folder
        if self.shard_folder(spec, path, folder):
            return f"lgcli.load_model({path!r})[0]"  # shards: lg joins them into timm's model, strictly
        if self.declaration.registered is None or not timm_reads_as_safetensors(path):
            # timm reads a name without .safetensors as a pickle: `file_load_call` says lg's load then.
            return self.file_load_call(spec, path)
        # The registered timm model this architecture is (vit_tiny_patch16_224
        # for depth 12, width 192, 3 heads, ...), else the closest, with what differs.
        overlay = ", ".join(f"{k}={v!r}" for k, v in self.pretrained_cfg_overlay(spec, path).items())
        args = self.model_args(spec)
        name, differ = self.declaration.registered(args, self.model_name(spec))
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items()
                          if k in differ or k == "num_classes" or k == "in_chans" and v != 3)
        return f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay=dict({overlay}), {shown})"

    def pretrained_cfg_overlay(self, spec: ArchSpec, path: str) -> dict[str, Any]:
        """What timm's pretrained config of the registered model is told: the
        file; num_classes (timm drops a head of other classes, and loads
        non-strictly); input_size; the preprocessing the spec carries
        (`lgcli.preprocessing`: lg's metadata, timm's statement, else lg's
        own), so that timm.data.resolve_data_config + create_transform feed
        the model as lg does."""
        input_size = self.input_size(spec)
        preprocessing = spec.extras.get(PREPROCESSING) or default_preprocessing(input_size, "lg's default")
        return {"file": path, "num_classes": self.num_classes(spec), "input_size": input_size,
                **preprocessing.timm_cfg()}

    def owns_model(self, model: nn.Module) -> bool:
        """A live model of the family's class (or a subclass: DeiT's distilled ViT)."""
        return any(f"{c.__module__}.{c.__name__}" == self.declaration.model_class for c in type(model).__mro__)

    def spec_of_model(self, model: nn.Module) -> dict[str, Any]:
        """The arguments a live model shows that its tensors may not."""
        if not self.owns_model(model):
            raise LgError(f"{type(model).__name__} is not a {self.declaration.name}")
        if self.declaration.live_arguments is not None:
            return self.declaration.live_arguments(model)
        return {"global_pool": model.global_pool} if isinstance(getattr(model, "global_pool", None), str) else {}

    @staticmethod
    def model_input(model: nn.Module) -> tuple[int, int]:
        """(channels, image size) the model takes (its pretrained config's,
        for a patch embedding of no fixed size)."""
        patch_embed = model.patch_embed
        if getattr(patch_embed, "img_size", None) is not None:
            return int(patch_embed.proj.in_channels), int(patch_embed.img_size[0])
        channels, height, _ = model.pretrained_cfg["input_size"]
        return int(channels), int(height)

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        channels, image_size = self.model_input(model)
        blocks = getattr(model, self.layout.layers)
        return {"depth": len(blocks), "width": int(getattr(model, "embed_dim", 0) or 0),
                "heads": int(blocks[0].attn.num_heads) if len(blocks) else 0,
                "patch_size": int(model.patch_embed.patch_size[0]), "img_size": image_size,
                "in_chans": channels, "num_classes": int(model.num_classes),
                "parameters": sum(p.numel() for p in model.parameters())}


def _is_folder(path: str, folder: bool | None) -> bool:
    """Whether `path` is (or will be: `folder`) a folder of shards, which timm does not read."""
    return folder if folder is not None else os.path.isdir(path)
