"""timm families of stages (a Swin) declared as data, read and written by
one adapter (no family of its own): `StagedTimmAdapter`.

A timm family of stages is declared as a flat one is, by a
`timm_family.TimmFamily` (the registered model and its class, a marker key,
the keys of a block and of the globals, the model's other arguments read
from the tensors' shapes, the filter that renames another layout's keys,
the roles without weight decay, the arguments a record may set), and beside
it by how its blocks sit in stages (`TimmStages`). Its `layout.layers` is
the stages' root: stage i's blocks are ``{layers}.{i}.blocks.{j}.*``, the
patch merging before it ``{layers}.{i - merge_offset}.downsample.*``
(`staged.MERGE_KEYS`); of its `base_globals`, those `TimmStages.last`
names are on the last stage's width (final norm, head), the others on the
first's (the patch embedding). `staged.StagedAdapter` reads and writes the
stages and counts them (`model_shapes`, through shapes.py: nothing is
built); timm's toolkit (`timm`) builds, checks and loads the model.

`TimmFamily.arguments(globals, block)` is given the shapes of every tensor
outside the stages' blocks (patch embedding, patch mergings, final norm,
head) by key, and of the first stage's block 0 by key less its prefix; the
sizes (`embed_dim`, `depths`, `num_heads`, `mlp_ratio`) are the stages'. A
recorded value wins over an argument in `assumed`, and each stage's
relative position table must then be of the window `TimmStages.windows`
gives; any other recorded argument or size must be what the tensors say.
An argument of `TimmStages.guessed` that no record gives is guessed, and
the spec says so (``{name}_assumed``, recorded in what lg writes too).

A family module imports this one; this one imports no family module
(tests/test_arch_imports.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import LgError
from ..lazy import nn, torch
from ..stack import ArchSpec, Stack
from .base import Reader
from .declared import Layout, memory_reader
from .shapes import window_of_table
from .staged import MERGE_KEYS, StagedAdapter
from .timm import (TIMM_HUB_CONFIG, TimmClassifier, is_timm_hub_config, json_shown,
                   local_dir_call, no_parameter_init, timm_hub_folder_config, timm_hub_meta_model,
                   timm_reads_as_safetensors, timm_stated_preprocessing)
from .timm_family import (TimmFamily, check_recorded_name, check_recorded_sizes, model_class,
                          recorded_meta_model, renamed)

# Where a spec keeps the names of timm's arguments beyond the sizes (their
# values are extras of their own, as `staged` reads them), and whether it
# was read through the declaration's key filter.
ARG_NAMES, FILTERED = "timm_arg_names", "timm_key_filtered"
# How `lg inspect` labels timm's arguments (the others are not shown).
LABELS = {"patch_size": "patch size", "img_size": "image size", "window_size": "window size",
          "in_chans": "channels", "num_classes": "classes"}


@dataclass(frozen=True)
class TimmStages:
    """How a timm family's blocks sit in stages, beside its `TimmFamily`.

    `last`: the keys of `layout.base_globals` on the last stage's width
    (the others are on the first's); `windows(arguments, count)`: the
    window of each of `count` stages as timm builds it from the model's
    arguments (a block's relative position table is ((2W - 1)^2, heads));
    `guessed`: the arguments
    no tensor shows that lg guesses when no record gives them, each with how
    `lg inspect` says it was guessed; `settle(arguments, windows, shapes)`:
    the guessed arguments no record gives, as the stages' windows (their
    position tables') and the tensors' shapes by key show them, with the
    names of those they settle (the others stay guessed), or None where no
    value gives those windows; `filter_fn`: timm's own function that renames what the declaration's
    `key_filter` does, which the load line of a file read through the filter
    calls; `merge_offset`: the patch merging under ``{layers}.{i}.downsample``
    is the one before stage i + merge_offset (timm's: 0)."""

    last: frozenset[str]
    windows: Callable[[Mapping[str, Any], int], list[int]]
    guessed: Mapping[str, str] = field(default_factory=dict)
    settle: Callable[[Mapping[str, Any], list[int], Mapping[str, tuple[int, ...]]],
                     tuple[dict[str, Any], frozenset[str]] | None] | None = None
    filter_fn: str | None = None
    merge_offset: int = 0


class StagedTimmAdapter(TimmClassifier, StagedAdapter):
    """The adapter of a declared timm family of stages (`TimmFamily` and
    `TimmStages`; see the module's docstring)."""

    def __init__(self, declaration: TimmFamily, stages: TimmStages) -> None:
        self.declaration, self.stages = declaration, stages
        self.family, self.stage_root, self.merge_offset = declaration.layout.family, declaration.layout.layers, (
            stages.merge_offset)

    # ------------------------------------------------------------ the declaration, as the stage reader asks it
    def stage_layout(self, index: int, count: int) -> Layout:
        """Stage `index` of `count`: its blocks, and the globals on its width."""
        layout = self.declaration.layout
        on_stage = {key: value for key, value in layout.base_globals.items()
                    if (index == count - 1 if key in self.stages.last else index == 0)}
        return dataclasses.replace(layout, layers=self.stage_blocks(index), base_globals=on_stage)

    def stage_blocks(self, index: int) -> str:
        """Where stage `index`'s blocks are (its blocks' keys: ``{this}.{j}.*``)."""
        return f"{self.stage_root}.{index}.blocks"

    def not_family(self, found: str) -> str:
        """What a file of the family holds (from its layout), and what this one lacks."""
        def modules(keys, separator: str = ",") -> str:
            return separator.join(dict.fromkeys(re.sub(r"\.(weight|bias)$", "", key) for key in keys))

        layout, root = self.declaration.layout, self.stage_root
        first = [key for key in layout.base_globals if key not in self.stages.last]
        last = [key for key in layout.base_globals if key in self.stages.last]
        merge = modules(MERGE_KEYS).replace("downsample.", "")
        return (f"not a {self.declaration.name} checkpoint: expected {modules(first, ', ')}, {root}.N.blocks.M."
                f"{{{modules([*layout.layer_keys, *layout.fused_keys])}}}, {root}.N.downsample.{{{merge}}} "
                f"(N >= {1 - self.merge_offset}), {modules(last, ', ')}; {found}")

    def misplaced_merge(self, index: int) -> str:
        return self.not_family(f"{self.stage_root}.{index} has a downsample and no stage follows it")

    def windows(self, spec: ArchSpec) -> list[int]:
        return self.stages.windows(spec.extras, len(spec.stages))

    def write_prefix(self, spec: ArchSpec) -> str:
        return ""

    # ------------------------------------------------------------ reading
    def recognises(self, state_dict: Mapping[str, torch.Tensor]) -> bool:
        return self.declaration.marker in state_dict

    def recognises_config(self, config: Mapping[str, Any]) -> bool:
        """A folder's config.json read by this adapter: a timm hub folder's of the family."""
        prefixes = self.declaration.hub_architectures
        return bool(prefixes) and is_timm_hub_config(config) and config["architecture"].startswith(prefixes)

    def to_stack(self, state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None = None,
                 heads: int | None = None, reader: Reader | None = None,
                 kv_heads: int | None = None) -> tuple[ArchSpec, Stack]:
        """`StagedAdapter.to_stack`, another layout's keys renamed first (nothing read). A file of
        another layout, or one carrying the buffers timm computes (`layout.ignored`: its strict
        `checkpoint_path` load refuses them), is loaded through timm's filter (`load_call`)."""
        state, reader = renamed(state_dict, reader, self.declaration.key_filter, memory_reader)
        spec, stack = super().to_stack(state, config, heads, reader, kv_heads)
        ignored = [re.compile(pattern) for pattern in self.declaration.layout.ignored]
        if state is not state_dict or any(pattern.search(key) for key in state for pattern in ignored):
            spec = dataclasses.replace(spec, extras={**spec.extras, FILTERED: True})
        return spec, stack

    def checked_config(self, config: Any) -> dict[str, Any]:
        """A recorded ``lg.config`` (a timm hub folder's config.json: what it
        builds), every size and flag checked; the arguments beyond the sizes
        are checked against the tensors' in `stage_extras`."""
        if config is None:
            return {}
        if self.recognises_config(config):
            return self.hub_arguments(config)
        if not isinstance(config, Mapping):
            raise LgError(f"the file's lg.config must be a JSON object, found {type(config).__name__}")
        check_recorded_name(config, (self.declaration.model_name,))  # lg builds no variant of a family of stages
        check_recorded_sizes(config, whole_numbers=("embed_dim",), lists=("depths", "num_heads"))
        for key in (f"{guessed}_assumed" for guessed in self.stages.guessed):
            if key in config and type(config[key]) is not bool:
                raise LgError(f"the file's lg.config field {key} must be true or false")
        return dict(config)

    def hub_arguments(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The timm arguments a hub folder's config.json means, read off the
        model timm builds from it on the meta device (the architecture's
        defaults fill what model_args leaves out, as `local-dir:` does); the
        config is kept under TIMM_HUB_CONFIG, for the output folder."""
        reads = f"{self.declaration.name} models ({', '.join(p + '*' for p in self.declaration.hub_architectures)})"
        model, _ = timm_hub_meta_model(config, model_class(self.declaration), reads)
        return {**self.live_config(model), TIMM_HUB_CONFIG: dict(config)}

    def stage_extras(self, state_dict: Mapping[str, torch.Tensor], prefix: str, specs: list[ArchSpec],
                     config: Mapping[str, Any]) -> dict:
        """The model's arguments beyond the sizes (`TimmFamily.arguments`),
        recorded ones of `assumed` winning, each stage's windows checked
        against its position tables."""
        blocks = re.compile(rf"^{re.escape(self.stage_root)}\.[0-9]+\.blocks\.")
        first = f"{self.stage_blocks(0)}.0."
        derived = self.declaration.arguments(
            {key: tuple(t.shape) for key, t in state_dict.items() if not blocks.match(key)},
            {key[len(first):]: tuple(t.shape) for key, t in state_dict.items() if key.startswith(first)})
        missing = {"img_size", "patch_size", "in_chans", "num_classes", "qkv_bias"} - set(derived)
        if missing:
            raise LgError(f"the {self.family} declaration reads no {', '.join(sorted(missing))} from the tensors")
        for key, value in config.items():
            if key in derived:
                _check_recorded(key, value, derived[key])
        args = {key: config[key] if key in self.declaration.assumed and key in config else value
                for key, value in derived.items()}
        table = next(suffix for suffix, role in self.declaration.layout.layer_keys.items() if role == "rel_pos_bias")
        tables = [window_of_table(state_dict[f"{self.stage_blocks(i)}.0.{table}"].shape[0])
                  for i in range(len(specs))]
        # The guesses no record gives, from what the windows (and the shapes) show of them.
        unrecorded = [name for name in self.stages.guessed if name not in config]
        found = self.stages.settle(args, tables, {k: tuple(t.shape) for k, t in state_dict.items()}) if (
            unrecorded and self.stages.settle is not None) else ({}, frozenset())
        if found is None:
            given = ", ".join(f"{key} {json_shown(args[key])}" for key in sorted(self.declaration.assumed)
                              if key not in unrecorded)
            raise LgError(self.not_family(f"no {' or '.join(unrecorded)} gives the position tables' windows {tables} "
                                          f"at {given}"))
        values, settled = found
        args.update({name: value for name, value in values.items() if name in unrecorded})
        extras = {**args, ARG_NAMES: tuple(args)}
        for name in self.stages.guessed:
            extras[f"{name}_assumed"] = (name in unrecorded and name not in settled) or \
                config.get(f"{name}_assumed") is True
        if TIMM_HUB_CONFIG in config:
            extras[TIMM_HUB_CONFIG] = config[TIMM_HUB_CONFIG]
        expected = self.stages.windows(extras, len(specs))
        if expected != tables:
            given = ", ".join(f"{key} {json_shown(args[key])}" for key in sorted(self.declaration.assumed))
            raise LgError(self.not_family(f"the position tables' windows {tables} are not those of {given} "
                                          f"({expected})"))
        return extras

    def check_agreement(self, config: Mapping[str, Any], spec: ArchSpec, stack: Stack) -> None:
        """Each recorded size, and each recorded argument not in `assumed`,
        must say what the tensors say."""
        found = self.model_args(spec)
        for key, value in config.items():
            if key not in found or key in self.declaration.assumed:
                continue
            if key == "mlp_ratio":
                agrees = int(found["embed_dim"] * value) == int(found["embed_dim"] * found[key])
            else:
                agrees = (list(value) == list(found[key])) if isinstance(found[key], tuple) else value == found[key]
            if not agrees:
                raise LgError(f"the file's lg.config says {key} {json_shown(value)}, its tensors say "
                              f"{json_shown(found[key])}")

    # ------------------------------------------------------------ timm's arguments
    def model_args(self, spec: ArchSpec) -> dict[str, Any]:
        """timm.create_model's keyword arguments for `spec`: its sizes (timm
        doubles the width per stage from embed_dim; `staged_target_spec` keeps
        that ratio), then the rest as read."""
        first = spec.stages[0]
        return {"embed_dim": first.width, "depths": tuple(s.depth for s in spec.stages),
                "num_heads": tuple(s.heads for s in spec.stages), "mlp_ratio": first.mlp_dim / first.width,
                **{name: spec.extras[name] for name in spec.extras[ARG_NAMES]}}

    def config(self, spec: ArchSpec) -> dict[str, Any]:
        """What lg records in ``lg.config``: the timm name and its arguments,
        and which of them were guessed (said so again, not recorded as known)."""
        args = {key: list(value) if isinstance(value, tuple) else value for key, value in self.model_args(spec).items()}
        guessed = {f"{name}_assumed": True for name in self.stages.guessed if spec.extras.get(f"{name}_assumed")}
        return {"model_name": self.declaration.model_name, **args, **guessed}

    def folder_config(self, spec: ArchSpec) -> dict[str, Any] | None:
        """The config.json of a timm hub folder of `spec` when it was read
        from one (else None: one file), with the sizes a resize changes."""
        hub = spec.extras.get(TIMM_HUB_CONFIG)
        if hub is None:
            return None
        args = self.config(spec)
        sizes = {key: args[key] for key in ("embed_dim", "depths", "num_heads", "mlp_ratio")}
        # The pooled features are the last stage's width.
        return timm_hub_folder_config(hub, sizes, spec.stages[-1].width, args["num_classes"], spec)

    def stated_preprocessing(self, spec: ArchSpec, companions: Mapping[str, Any], input_size: tuple[int, int, int]):
        """A timm hub folder's `pretrained_cfg` (`timm.timm_stated_preprocessing`)."""
        return timm_stated_preprocessing(spec, input_size)

    def inspect_fields(self, spec: ArchSpec) -> list[tuple[str, str, Any]]:
        """The labelled arguments, each guessed one followed by a row that says
        so (None hides it: a plain timm file does not record it)."""
        rows = []
        for name in spec.extras[ARG_NAMES]:
            if name in LABELS:
                rows.append((name, LABELS[name], spec.extras[name]))
            if name in self.stages.guessed:
                rows.append((f"{name}_assumed", self.stages.guessed[name],
                             True if spec.extras.get(f"{name}_assumed") else None))
        return rows

    def input_size(self, spec: ArchSpec) -> tuple[int, int, int]:
        e = spec.extras
        return (int(e["in_chans"]), int(e["img_size"]), int(e["img_size"]))

    def no_weight_decay_roles(self) -> frozenset[str]:
        return self.declaration.no_weight_decay

    # ------------------------------------------------------------ timm's models
    def model_name(self, spec: ArchSpec) -> str:
        return self.declaration.model_name

    def template_from_config(self, config: Mapping[str, Any]) -> tuple[ArchSpec, Stack]:
        """The spec a recorded ``lg.config`` describes, and its stack on the
        meta device (every role's shape, no memory), read as a checkpoint's is
        from the state dict of the model timm builds from it."""
        checked = self.checked_config(config)
        args = {key: value for key, value in checked.items()
                if key not in ("model_name", TIMM_HUB_CONFIG) and not key.endswith("_assumed")}
        model = recorded_meta_model(self.declaration.model_name, args, self.family)
        return self.to_stack(model.state_dict(), config=config)

    def model_state(self, spec: ArchSpec, stack: Stack) -> dict[str, torch.Tensor]:
        return self.from_stack(spec, stack)

    def model_buffers(self, spec: ArchSpec) -> dict[str, torch.Tensor]:
        """`StagedAdapter.model_buffers` (the position indices and attention
        masks timm computes), of a model whose parameters are left
        uninitialised: they are dropped (`no_parameter_init`)."""
        with no_parameter_init():
            return super().model_buffers(spec)

    def saved_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return {name: tensor.detach() for name, tensor in model.state_dict().items()}

    def load_imports(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        return "import lgcli" if self._lg_loads(spec, path) else "import timm"

    def load_call(self, spec: ArchSpec, path: str, folder: bool | None = None) -> str:
        """The expression whose value is the model, built in timm with the
        file loaded strictly, as every family's load call is: timm's
        `checkpoint_path`; a file of another layout through timm's own
        pretrained loader, which renames it with `filter_fn` (the file and
        the head's classes in its pretrained config); a timm hub folder by
        the folder. A file timm does not read (a name that does not end in
        .safetensors, which timm reads as a pickle; shards): lg's strict load."""
        hub_folder = local_dir_call(spec, path)
        if hub_folder is not None:
            return hub_folder
        if self._lg_loads(spec, path):
            return f"lgcli.load_model({path!r})[0]"
        if not spec.extras.get(FILTERED):
            return self.file_load_call(spec, path)
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_args(spec).items())
        cfg = {"file": path, "num_classes": self.num_classes(spec), **self.data_config(spec)}
        overlay = ", ".join(f"{k}={v!r}" for k, v in cfg.items())
        return (f"timm.create_model({self.model_name(spec)!r}, pretrained=True, {args}, "
                f"pretrained_cfg_overlay=dict({overlay}))")

    def _lg_loads(self, spec: ArchSpec, path: str) -> bool:
        """Whether the load call is lg's, timm reading the file otherwise
        than as it is: a name timm reads as a pickle, or a layout timm's
        pretrained loader would change beyond renaming (it adapts the
        patch embedding of a model of neither 1 nor 3 channels)."""
        if local_dir_call(spec, path) is not None:
            return False
        if not timm_reads_as_safetensors(path):
            return True
        renamed = bool(spec.extras.get(FILTERED))
        return renamed and (not self.stages.filter_fn or spec.extras.get("in_chans") not in (1, 3))

    def owns_model(self, model: nn.Module) -> bool:
        return f"{type(model).__module__}.{type(model).__name__}" == self.declaration.model_class

    def live_sizes(self, model: nn.Module) -> dict[str, Any]:
        """A live model's sizes, as timm's arguments."""
        stages = [model.get_submodule(self.stage_blocks(i)) for i in range(len(getattr(model, self.stage_root)))]
        return {"embed_dim": int(model.embed_dim), "depths": [len(blocks) for blocks in stages],
                "num_heads": [int(blocks[0].attn.num_heads) for blocks in stages]}

    def live_config(self, model: nn.Module) -> dict[str, Any]:
        """A live model's sizes and `TimmFamily.live_arguments`."""
        live = self.declaration.live_arguments
        return {**self.live_sizes(model), **(live(model) if live is not None else {})}

    def spec_of_model(self, model: nn.Module) -> dict[str, Any]:
        if not self.owns_model(model):
            raise LgError(f"{type(model).__name__} is not a {self.declaration.name}")
        return self.live_config(model)

    def scored_by_lg(self, spec: ArchSpec) -> bool:
        return True

    @staticmethod
    def model_input(model: nn.Module) -> tuple[int, int]:
        return int(model.patch_embed.proj.in_channels), int(model.patch_embed.img_size[0])

    def architecture_of(self, model: nn.Module) -> dict[str, Any]:
        channels, image_size = self.model_input(model)
        live = self.live_sizes(model)
        return {"depth": sum(live["depths"]), "width": live["embed_dim"], "heads": live["num_heads"][0],
                "depths": live["depths"], "patch_size": int(model.patch_embed.patch_size[0]),
                "img_size": image_size, "in_chans": channels, "num_classes": int(model.num_classes),
                "parameters": sum(p.numel() for p in model.parameters())}


def _check_recorded(key: str, value: Any, found: Any) -> None:
    """A recorded argument must be of the type the tensors give it (a whole
    number of at least 1, the classes of at least 0; true or false)."""
    least = 0 if key == "num_classes" else 1
    if type(found) is bool and type(value) is not bool:
        raise LgError(f"the file's lg.config field {key} must be true or false")
    if type(found) is int and not (type(value) is int and value >= least):
        raise LgError(f"the file's lg.config field {key} must be a whole number of at least {least}")
