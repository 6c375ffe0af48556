"""The timm toolkit every timm family shares (no family of its own): the
block keys timm's transformer blocks have in common, timm hub folders
(what `timm.models.save_for_hf` writes: config.json naming the
`architecture`, its `model_args` and `pretrained_cfg`, beside
model.safetensors) read and written as timm reads and writes them, the
strict-load check, the bound on a recorded size, and models built for
weights without the initialisation those weights replace
(`no_parameter_init`).

The declared families' adapters (timm_family.py's `TimmAdapter`,
timm_staged.py's `StagedTimmAdapter`) import this one; it imports no family
module (tests/test_arch_imports.py).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from typing import Any, Iterator, Mapping

from ..errors import LgError, shown
from ..lazy import nn, torch
from ..preprocessing import PREPROCESSING, Preprocessing, default_preprocessing, from_record
from ..stack import ArchSpec, Stack
from .base import IMAGE_CLASSIFICATION

# A recorded configuration (a learngene's, a hub folder's) describing more
# parameters than this is refused before any model is built from it.
MAX_RECORDED_PARAMS = 20_000_000_000

# A timm transformer block's parameters (after "blocks.N." in a ViT,
# "layers.I.blocks.N." in a Swin) -> canonical role. attn.qkv fuses three
# (`QKV_ROLES`).
BLOCK_KEYS = {
    "norm1.weight": "norm1_weight",
    "norm1.bias": "norm1_bias",
    "attn.q_norm.weight": "q_norm_weight",
    "attn.q_norm.bias": "q_norm_bias",
    "attn.k_norm.weight": "k_norm_weight",
    "attn.k_norm.bias": "k_norm_bias",
    "attn.proj.weight": "o",
    "attn.proj.bias": "o_bias",
    "ls1.gamma": "ls1",
    "norm2.weight": "norm2_weight",
    "norm2.bias": "norm2_bias",
    "mlp.fc1.weight": "fc1",
    "mlp.fc1.bias": "fc1_bias",
    "mlp.fc2.weight": "fc2",
    "mlp.fc2.bias": "fc2_bias",
    "ls2.gamma": "ls2",
}
QKV_WEIGHT, QKV_BIAS = "attn.qkv.weight", "attn.qkv.bias"
QKV_ROLES = {QKV_WEIGHT: ("q", "k", "v"), QKV_BIAS: ("q_bias", "k_bias", "v_bias")}
# Where a spec keeps the config.json of the timm hub folder it was read from.
TIMM_HUB_CONFIG = "timm_hub_config"
# In-place writes of a tensor's values (never of its shape, dtype or flags),
# by name: what torch's and timm's initialisers are made of. The random
# fills; what timm's trunc_normal_ does after its uniform_ (erfinv_, mul_,
# add_, clamp_: as costly as the fill, on values the load replaces); a
# norm's ones and zeros (fill_, zero_); BEiT's rescaling (div_, mul_); and
# the nn.init functions torch hands a TorchFunctionMode whole, not as the
# fills inside them (constant_, kaiming_uniform_; normal_ and uniform_ share
# the tensor methods' names).
PARAMETER_VALUE_WRITES = frozenset({
    "normal_", "uniform_", "bernoulli_", "exponential_", "random_", "cauchy_", "log_normal_", "geometric_",
    "erfinv_", "mul_", "div_", "add_", "sub_", "clamp_", "clamp_min_", "clamp_max_", "fill_", "zero_", "copy_",
    "constant_", "kaiming_uniform_"})


def is_timm_hub_config(config: Any) -> bool:
    """Whether a folder's config.json is timm's (save_for_hf, push_to_hf_hub):
    a timm `architecture` name with its model_args or pretrained_cfg, and no
    transformers `model_type`."""
    return (isinstance(config, Mapping) and "model_type" not in config
            and isinstance(config.get("architecture"), str)
            and ("model_args" in config or "pretrained_cfg" in config))


def timm_hub_meta_model(config: Mapping[str, Any], model_class: type, reads: str) -> tuple[nn.Module, str]:
    """(the model timm builds from a timm hub folder's config.json, on the
    meta device: shapes only; its architecture name), refused unless it is a
    `model_class` (lg `reads` those)."""
    import timm
    # The parser both of timm's folder loaders use (local-dir:, hf-hub:).
    from timm.models._hub import _parse_model_cfg

    for key in ("model_args", "pretrained_cfg"):
        if key in config and not isinstance(config[key], Mapping):
            raise LgError(f"config.json's {key} must be a JSON object, found {json_shown(config[key])}")
    name = config["architecture"]
    if not timm.is_model(name):
        raise LgError(f"config.json's architecture {json_shown(name)} is not a timm model")
    pretrained_cfg, name, model_args = _parse_model_cfg(copy.deepcopy(dict(config)), {})
    check_recorded_size(model_args, "config.json")
    try:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = timm.create_model(name, pretrained=False, pretrained_cfg=pretrained_cfg, **model_args)
    except (TypeError, ValueError, AssertionError, RuntimeError, KeyError) as exc:
        raise LgError(f"config.json does not describe a model timm builds ({exc})".splitlines()[0]) from None
    if not isinstance(model, model_class):
        raise LgError(f"config.json's architecture {json_shown(name)} is not a timm {model_class.__name__} "
                      f"(it builds {type(model).__name__}); lg reads {reads}")
    return model, name


@contextlib.contextmanager
def no_parameter_init() -> Iterator[None]:
    """Models built inside skip every write to a parameter's values (a
    `PARAMETER_VALUE_WRITES` call on an `nn.Parameter`): timm's random
    initialisation, for a model whose every parameter is replaced next (a
    strict load: one that did not cover them all would raise) or dropped (a
    model built for its buffers). Buffers, persistent or not, are computed
    as ever (Swin's and BEiT's position indices, Swin's attention masks,
    BEiT's zero key bias), as is a write through a view of a parameter.
    timm's construction of a ViT-B took 2.5 s of the 4.2 s lg spent
    building it from weights, filling and transforming random numbers the
    load then overwrote; it takes 0.1 s inside. transformers'
    `no_init_weights` does the same for its models; timm's own
    `weight_init='skip'` is taken by some of its models only (not BEiT),
    still runs the modules' own initialisers, and is kept on the model.
    The mode is this thread's alone (torch keeps one stack per thread)."""
    from torch.overrides import TorchFunctionMode

    parameter = torch.nn.Parameter

    class ParameterValueWritesSkipped(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", None) in PARAMETER_VALUE_WRITES:
                # A tensor method's self; an nn.init function's `tensor` (torch passes it by name).
                written = args[0] if args else kwargs.get("tensor")
                if isinstance(written, parameter):
                    return written  # what every one of these returns: the tensor written
            return func(*args, **kwargs)

    with ParameterValueWritesSkipped():
        yield


def local_dir_call(spec: ArchSpec, path: str) -> str | None:
    """The line that loads a timm hub folder (the folder says the rest), or
    None for a model read from a file or a stream."""
    if TIMM_HUB_CONFIG in spec.extras and path != "<file>":
        return f"timm.create_model({'local-dir:' + path!r}, pretrained=True)"
    return None


def timm_hub_folder_config(hub: Mapping[str, Any], sizes: Mapping[str, Any], num_features: int,
                           num_classes: int, spec: ArchSpec | None = None) -> dict[str, Any]:
    """A timm hub folder's config.json (`hub`, the source's) with a resized
    model's sizes: timm builds `architecture` with `model_args` over its
    defaults, so every size a resize changes is written there. Its
    `pretrained_cfg` states the preprocessing `spec` carries (the source's,
    or what lg trained it with), so timm's `resolve_data_config` prepares
    images as lg did."""
    config = copy.deepcopy(dict(hub))
    config["model_args"] = {**(config.get("model_args") or {}), **sizes, "num_classes": num_classes}
    config["num_features"] = num_features
    config["num_classes"] = num_classes
    if isinstance(config.get("pretrained_cfg"), dict):
        config["pretrained_cfg"]["num_classes"] = num_classes
    preprocessing = spec.extras.get(PREPROCESSING) if spec is not None else None
    if preprocessing is not None:
        config["pretrained_cfg"] = {**(config.get("pretrained_cfg") or {}),
                                    **{k: list(v) if isinstance(v, tuple) else v
                                       for k, v in preprocessing.timm_cfg().items()}}
    return config


def timm_stated_preprocessing(spec: ArchSpec, input_size: tuple[int, int, int]) -> Preprocessing | None:
    """What a timm hub folder's `pretrained_cfg` says of a model's images
    (timm's defaults for the fields it leaves out, as `resolve_data_config`
    takes them); None for a model not read from a hub folder."""
    hub = spec.extras.get(TIMM_HUB_CONFIG)
    if hub is None:
        return None
    cfg = hub.get("pretrained_cfg") or {}
    try:
        return from_record(cfg, input_size, "timm hub folder's config.json pretrained_cfg")
    except LgError as error:
        raise LgError(f"config.json's pretrained_cfg: {error}") from None


def check_recorded_size(args: Mapping[str, Any], where: str) -> None:
    """Refuse recorded sizes over MAX_RECORDED_PARAMS before timm builds even
    a meta-device model of them (a depth of 1e9 would take hours)."""
    depth, width = args.get("depth", 12), args.get("embed_dim", 768)
    ratio = args.get("mlp_ratio", 4.0)
    stages = args.get("depths")
    if isinstance(stages, (list, tuple)) and stages and all(positive_number(v) for v in stages):
        # A model of stages (Swin): bounded as if every block had the last, widest stage's width.
        depth = sum(stages)
        width = width * 2 ** (len(stages) - 1) if positive_number(width) else width
    if not all(positive_number(v) for v in (depth, width, ratio)):
        return  # timm or check_config refuses the value itself
    rough = depth * width * width * (4 + 2 * ratio)
    if rough > MAX_RECORDED_PARAMS:
        raise LgError(f"{where} describes a model of about {rough:.3g} parameters "
                      f"(depth {depth}, width {width}); lg reads at most {MAX_RECORDED_PARAMS:.3g}")


def positive_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def json_shown(value: Any) -> str:
    """A recorded value as a refusal quotes it (shortened, made printable)."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return shown(text if len(text) <= 40 else text[:37] + "...")


def refuse_unloadable(expected: Mapping[str, tuple[int, ...]],
                      state: Mapping[str, torch.Tensor | tuple[int, ...]]) -> None:
    """Refuse a state dict (tensors, or shapes alone) that timm would not
    load strictly into the model whose shapes are `expected`."""
    for key in sorted(set(expected) ^ set(state)):
        problem = "lacks" if key in expected else "has an unexpected"
        raise LgError(f"refusing to write: the model {problem} tensor {key} for the timm config it records")
    for key, shape in expected.items():
        found = tuple(getattr(state[key], "shape", state[key]))
        if found != shape:
            raise LgError(f"refusing to write: {key} has shape {found}; the timm config "
                          f"it records builds {shape}")


def timm_reads_as_safetensors(path: str) -> bool:
    """Whether timm's `checkpoint_path` reads `path` as safetensors (by its
    name; any other it unpickles). "<file>" is a stream, shown as a file."""
    return path.endswith(".safetensors") or path == "<file>"


class TimmClassifier:
    """What every timm family's adapter shares, whatever its blocks: an
    image classifier with timm's head conventions (`num_classes`,
    `reset_classifier`): `base.FamilyAdapter`'s task and head members; one
    safetensors file loaded by timm, whose model timm builds by name
    (`create_model`, strictly loaded by `load_model`), counted from the
    family's `model_shapes`. A family gives `model_name(spec)` and
    `model_args(spec)` (timm.create_model's name and keyword arguments) and
    its `model_shapes(spec)`; its adapter derives from this class beside its
    reader (timm_family.py's `TimmAdapter`, timm_staged.py's
    `StagedTimmAdapter`)."""

    writes_folder = False
    library = "timm"
    fine_tune = ("timm's `train.py` (or your own loop) on the model the load line builds; it takes the "
                 "images at the size and channels the line gives")

    def create_model(self, spec: ArchSpec, seed: int | None = None) -> nn.Module:
        """timm's own random initialisation of this architecture."""
        import timm

        if seed is not None:
            torch.manual_seed(seed)
        # Its pretrained_cfg says how lg feeds it (as the load line's overlay
        # does), so that timm.data.resolve_data_config(model=model) agrees.
        return timm.create_model(self.model_name(spec), pretrained=False,
                                 pretrained_cfg_overlay=self.data_config(spec), **self.model_args(spec))

    def data_config(self, spec: ArchSpec) -> dict[str, Any]:
        """The timm pretrained_cfg fields that say how lg feeds a model of `spec`."""
        input_size = tuple(self.input_size(spec))
        recipe = spec.extras.get(PREPROCESSING) or default_preprocessing(input_size, "lg's default")
        return {"input_size": input_size, **recipe.timm_cfg()}

    def load_model(self, spec: ArchSpec, stack: Stack) -> nn.Module:
        """A timm model holding these weights, loaded strictly: built without
        initialising the parameters the strict load replaces, every one
        (`no_parameter_init`)."""
        with no_parameter_init():
            model = self.create_model(spec)
        model.load_state_dict(self.from_stack(spec, stack), strict=True)
        return model

    def random_stack(self, spec: ArchSpec, seed: int | None = None) -> Stack:
        """timm's random initialisation, as a Stack (for methods that mix in random layers)."""
        return self.to_stack(self.create_model(spec, seed=seed).state_dict(), config=self.config(spec))[1]

    def check_loadable(self, spec: ArchSpec, state: Mapping[str, torch.Tensor | tuple[int, ...]]) -> None:
        """Refuse a state dict (tensors, or shapes alone) that timm would not
        load strictly into the model of `spec`, against the family's
        `model_shapes` (the one count of a model: nothing is built, timm is
        not imported; tests check those shapes are timm's model's, key for
        key)."""
        refuse_unloadable(self.model_shapes(spec).state(), state)

    def parameter_count(self, spec: ArchSpec) -> int:
        return self.model_shapes(spec).parameter_count()

    def largest_role_elements(self, spec: ArchSpec) -> int:
        return self.model_shapes(spec).largest_role_elements()

    @staticmethod
    def rewrite_companion(name: str, data: bytes, spec: ArchSpec) -> bytes:
        return data  # nothing copied beside a timm model's weights states a size

    def file_load_call(self, spec: ArchSpec, path: str) -> str:
        """The expression whose value is the model built in timm by name with
        the file loaded strictly (timm's `checkpoint_path`), as every family's
        load call is; a name timm would read as a pickle (not .safetensors):
        lg's strict load. The data config rides in pretrained_cfg_overlay, so
        that timm.data.resolve_data_config(model=model) feeds the model as lg does."""
        if not timm_reads_as_safetensors(path):
            return f"lgcli.load_model({path!r})[0]"
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_args(spec).items())
        overlay = ", ".join(f"{k}={v!r}" for k, v in self.data_config(spec).items())
        return (f"timm.create_model({self.model_name(spec)!r}, pretrained=False, checkpoint_path={path!r}, {args}, "
                f"pretrained_cfg_overlay=dict({overlay}))")

    @staticmethod
    def task(spec: ArchSpec) -> str:
        return IMAGE_CLASSIFICATION

    @staticmethod
    def model_task(model: nn.Module) -> str:
        return IMAGE_CLASSIFICATION

    @staticmethod
    def num_classes(spec: ArchSpec) -> int | None:
        """The classes the family recorded when it read the head (0: none)."""
        return spec.extras.get("num_classes")

    @staticmethod
    def classes_of(model: nn.Module) -> int:
        return int(model.num_classes)

    @staticmethod
    def reset_head(model: nn.Module, num_classes: int) -> None:
        model.reset_classifier(num_classes)  # timm's: a new head, timm's initialisation
