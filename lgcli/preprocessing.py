"""How a model wants its images: one answer, used by every command that feeds one.

An image model was trained on images prepared one way (resized with some
resampling, perhaps centre-cropped, scaled to [0, 1], then ``(x - mean) /
std`` per channel), and is measured or trained fairly only on images prepared
the same way. `Preprocessing` is that recipe in timm's terms (its
`pretrained_cfg` fields: mean, std, interpolation, crop_pct, crop_mode,
input_size), with where lg found it (`source`). It is read, in this order:

1. lg's metadata (``lg.preprocessing``): what lg fed the model, recorded in
   every image model and learngene lg writes;
2. what the model's own ecosystem states, asked of its family's adapter
   (`stated_preprocessing`): a timm hub folder's `pretrained_cfg`, the
   default pretrained config of the registered timm model a file's
   architecture is, a Hugging Face folder's ``preprocessor_config.json``;
3. lg's own default (`NORMALIZE_MEAN`, ...: what lg fed every model before it
   read any of these), for a file lg wrote before it recorded it, and for a
   file that states nothing: then said on stderr as assumed.

`--mean`, `--std` and `--interpolation` override it (`with_overrides`).
The answer travels with the model's spec (`spec.extras[PREPROCESSING]`) into
everything lg writes from it: lg's metadata, a timm hub folder's
`pretrained_cfg`, a Hugging Face folder's ``preprocessor_config.json``, the
load line's `pretrained_cfg_overlay` and the model card.

`lgcli.recipe.preprocessing_of(x)` answers for a path, a `Checkpoint`, a `Loaded`, a spec,
or a model `lgcli.load_model` built; `lgcli.images.ImageSet.batch` applies it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from .errors import LgError, UsageError, shown

# lg's own preprocessing, what lg fed every image model before it read each
# model's own (and still feeds one that states none, and its example models,
# trained so): squashed to the model's square input size with bilinear
# resampling (no crop), scaled to [0, 1], then (x - 0.5) / 0.5 on every channel.
NORMALIZE_MEAN = 0.5
NORMALIZE_STD = 0.5
IMAGE_INTERPOLATION = "bilinear"

# The key of a spec's extras that holds its `Preprocessing`, and the
# attribute of a model `lgcli.load_model` built.
PREPROCESSING = "preprocessing"
MODEL_ATTRIBUTE = "lg_preprocessing"

# The resampling filters lg applies (PIL's, as timm and transformers name them).
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")
# PIL's resampling codes, as a preprocessor_config.json's `resample` states them.
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
# squash: both edges scaled to input_size / crop_pct, then the centre cut;
# center: the shorter edge scaled to input_size / crop_pct (the aspect kept),
# then the centre cut. timm's `transforms_imagenet_eval`.
CROP_MODES = ("squash", "center")
DEFAULT_CROP_PCT = 1.0
DEFAULT_CROP_MODE = "squash"
# What timm's resolve_data_config takes when a pretrained_cfg leaves a field out.
TIMM_MISSING = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "interpolation": "bicubic",
                "crop_pct": 0.875, "crop_mode": "center"}
RECORD_FIELDS = ("mean", "std", "interpolation", "crop_pct", "crop_mode")
# lg scales pixels to [0, 1]; a processor scaling otherwise is refused.
RESCALE_FACTOR = 1 / 255


@dataclass(frozen=True)
class Preprocessing:
    """How one model's images are prepared: resized with `interpolation` (to
    ``floor(size / crop_pct)``, as `crop_mode` says), the centre
    `input_size` cut, scaled to [0, 1], then ``(x - mean) / std`` per
    channel. `source` says where lg found it."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    crop_pct: float
    input_size: tuple[int, int, int]  # (channels, height, width) the model takes
    # Where lg found it: a note, not part of the recipe (two models prepared
    # alike compare equal wherever their recipes were read from).
    source: str = field(compare=False)
    crop_mode: str = DEFAULT_CROP_MODE
    # lg's default taken for a model that states none: said where images are
    # fed (`preprocessing_of`), and recorded as assumed, never as fact.
    assumed: bool = False
    # The edge images are fed at where it is not the model's own: a model
    # that takes any size (transformers' DINOv2 interpolates its positions
    # at run time) is fed at its image processor's size, as transformers
    # feeds it, not its config's (518 px: five times the tokens of the 224
    # its processor prepares). None: `input_size`.
    image_size: int | None = None

    @property
    def channels(self) -> int:
        return self.input_size[0]

    @property
    def size(self) -> int:
        """The edge of the images fed."""
        return self.image_size or self.input_size[1]

    def scale_size(self, size: int | None = None) -> int:
        """The edge images are resized to before the centre cut (timm's formula)."""
        return math.floor((size or self.size) / self.crop_pct)

    def record(self) -> dict[str, Any]:
        """What lg's metadata (``lg.preprocessing``) holds."""
        return {"mean": list(self.mean), "std": list(self.std), "interpolation": self.interpolation,
                "crop_pct": self.crop_pct, "crop_mode": self.crop_mode, **({"assumed": True} if self.assumed else {}),
                # Only where it differs from the model's: a record without
                # it (every one written before) means the model's own size.
                **({"image_size": self.image_size} if self.image_size else {})}

    def timm_cfg(self) -> dict[str, Any]:
        """The fields of a timm `pretrained_cfg` that say the same (its
        input_size the caller's: the model's)."""
        return {"mean": self.mean, "std": self.std, "interpolation": self.interpolation,
                "crop_pct": self.crop_pct, "crop_mode": self.crop_mode}

    def report(self) -> dict[str, Any]:
        """For `lg inspect --json`: every field and the source; input_size as
        timm's data config says it, the (channels, height, width) images are
        fed at (a DINOv2 folder's 224 px, not its config's 518)."""
        return {**self.record(), "assumed": self.assumed, "input_size": [self.channels, self.size, self.size],
                "source": self.source}

    def describe(self) -> str:
        """One line for a table: ``mean 0.5 std 0.5, bilinear, squash, crop 1``."""
        def numbers_of(values):
            return ",".join(f"{v:g}" for v in (values[:1] if len(set(values)) == 1 else values))

        return (f"mean {numbers_of(self.mean)} std {numbers_of(self.std)}, {self.interpolation}, "
                f"{self.crop_mode}, crop {self.crop_pct:g}" + (f", {self.image_size} px" if self.image_size else ""))

    def same_recipe(self, other: "Preprocessing") -> bool:
        """Whether both prepare images alike (their sources aside)."""
        return {**self.record(), "assumed": False} == {**other.record(), "assumed": False}

    def with_overrides(self, mean: Any = None, std: Any = None, interpolation: str | None = None) -> "Preprocessing":
        """`--mean`, `--std`, `--interpolation` over this recipe (None: kept);
        checked as a recorded one is, the flags named."""
        if mean is None and std is None and interpolation is None:
            return self
        given = [name for name, value in (("--mean", mean), ("--std", std), ("--interpolation", interpolation))
                 if value is not None]
        record = {**self.record(), **{k: v for k, v in (("mean", mean), ("std", std),
                                                         ("interpolation", interpolation)) if v is not None}}
        # What the user gave is no longer assumed; what they left is the recipe's.
        record.pop("assumed", None)
        return from_record(record, self.input_size, f"{self.source}; {', '.join(given)} given",
                           names={"mean": "--mean", "std": "--std", "interpolation": "--interpolation"},
                           any_size=self.image_size is not None)


def default_preprocessing(input_size: tuple[int, int, int], source: str, assumed: bool = False) -> Preprocessing:
    """lg's own preprocessing for a model of `input_size`."""
    channels = int(input_size[0])
    return Preprocessing(mean=(NORMALIZE_MEAN,) * channels, std=(NORMALIZE_STD,) * channels,
                         interpolation=IMAGE_INTERPOLATION, crop_pct=DEFAULT_CROP_PCT,
                         input_size=tuple(int(v) for v in input_size), source=source, crop_mode=DEFAULT_CROP_MODE,
                         assumed=assumed)


# ---- reading and checking a recipe ----

def _per_channel(value: Any, name: str, channels: int, positive: bool) -> tuple[float, ...]:
    """A mean or std: one number, or one per channel (one is repeated)."""
    values = [value] if isinstance(value, numbers.Real) and not isinstance(value, bool) else value
    if isinstance(values, str) or not isinstance(values, (list, tuple)) or not values:
        raise LgError(f"{name} must be a number or a list of numbers, found {shown(repr(value)[:60])}")
    numbers_ = []
    for item in values:
        if not isinstance(item, numbers.Real) or isinstance(item, bool) or not math.isfinite(float(item)):
            raise LgError(f"{name} must hold finite numbers, found {shown(repr(item)[:60])}")
        if positive and float(item) <= 0:
            raise LgError(f"{name} must be positive (it divides each channel), found {float(item):g}")
        numbers_.append(float(item))
    if len(numbers_) == 1:
        return (numbers_[0],) * channels
    if len(numbers_) != channels:
        raise LgError(f"{name} has {len(numbers_)} values but the model takes {channels} "
                      f"channel{'s' if channels != 1 else ''}")
    return tuple(numbers_)


def check_interpolation(value: Any, name: str = "interpolation") -> str:
    if not isinstance(value, str) or value not in INTERPOLATIONS:
        raise LgError(f"{name} must be one of {', '.join(INTERPOLATIONS)}, found {shown(repr(value)[:60])}")
    return value


def from_record(record: Mapping[str, Any], input_size: tuple[int, int, int], source: str,
                names: Mapping[str, str] | None = None, any_size: bool = False) -> Preprocessing:
    """A recipe from timm's pretrained_cfg fields (or lg's metadata, which
    holds the same), each checked; fields left out take timm's defaults.
    `names` says how each field is named in a refusal (a flag, a key). An
    `image_size` other than the model's (lg's metadata of a model that
    takes any size: `Preprocessing.image_size`) is refused unless `any_size`."""
    if not isinstance(record, Mapping):
        raise LgError(f"{source}: must be a JSON object")
    names = {field: (names or {}).get(field, field) for field in RECORD_FIELDS}
    channels = int(input_size[0])

    def get(field: str) -> Any:
        value = record.get(field)
        return TIMM_MISSING[field] if value is None else value

    crop_pct = get("crop_pct")
    if (not isinstance(crop_pct, numbers.Real) or isinstance(crop_pct, bool) or not math.isfinite(float(crop_pct))
            or not 0 < float(crop_pct) <= 1):
        raise LgError(f"{names['crop_pct']} must be a number in (0, 1], found {shown(repr(crop_pct)[:60])}")
    assumed = record.get("assumed", False)
    if not isinstance(assumed, bool):
        raise LgError(f"assumed must be true or false, found {shown(repr(assumed)[:60])}")
    crop_mode = get("crop_mode")
    if crop_mode not in CROP_MODES:
        raise LgError(f"{names['crop_mode']} must be one of {', '.join(CROP_MODES)} (lg applies these), "
                      f"found {shown(repr(crop_mode)[:60])}")
    image_size = record.get("image_size")
    if image_size is not None:
        if not isinstance(image_size, numbers.Integral) or isinstance(image_size, bool) or image_size <= 0:
            raise LgError(f"image_size must be a positive whole number, found {shown(repr(image_size)[:60])}")
        if image_size == int(input_size[1]):
            image_size = None
        elif not any_size:
            raise LgError(f"image_size is {image_size}, but the model takes {int(input_size[1])}-pixel images only")
    return Preprocessing(mean=_per_channel(get("mean"), names["mean"], channels, positive=False),
                         std=_per_channel(get("std"), names["std"], channels, positive=True),
                         interpolation=check_interpolation(get("interpolation"), names["interpolation"]),
                         crop_pct=float(crop_pct), input_size=tuple(int(v) for v in input_size),
                         source=f"{source}, assumed: no file in its provenance states preprocessing" if assumed
                         else source,
                         crop_mode=crop_mode, assumed=assumed,
                         image_size=None if image_size is None else int(image_size))


def _edge(value: Any, field: str) -> tuple[str, int]:
    """A preprocessor_config.json size: ('square', n) for height = width =
    n, ('shortest_edge', n), or a plain int (older files: square)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0:
        return "square", int(value)
    if isinstance(value, Mapping):
        if "shortest_edge" in value and set(value) <= {"shortest_edge", "longest_edge"}:
            edge = value["shortest_edge"]
            if isinstance(edge, numbers.Integral) and not isinstance(edge, bool) and edge > 0:
                return "shortest_edge", int(edge)
        elif set(value) == {"height", "width"}:
            height, width = value["height"], value["width"]
            if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in (height, width)):
                if height != width:
                    raise LgError(f"{field} is {height}x{width}: lg feeds square images")
                return "square", int(height)
    raise LgError(f"{field} must be a positive whole number or an object of height and width or shortest_edge, "
                  f"found {shown(repr(value)[:80])}")


def from_image_processor(config: Any, input_size: tuple[int, int, int],
                         source: str = "preprocessor_config.json", any_size: bool = False) -> Preprocessing:
    """The recipe a Hugging Face image processor's config (the JSON of a
    preprocessor_config.json, every field present: the adapter fills what a
    file leaves out with its class's defaults) states, in timm's terms:
    ``size`` {height, width} is a squash, {shortest_edge} keeps the aspect
    (crop_mode center); a centre crop to ``crop_size`` makes crop_pct the
    crop over the size. A field that is malformed, or that disagrees with
    the model or the other fields, is refused naming it. Images of another
    size than the model's are fed at the processor's where the model takes
    any size (`any_size`), else at the model's, cut in the same proportion."""
    name = "preprocessor_config.json"
    if not isinstance(config, Mapping):
        raise LgError(f"{name} must be a JSON object")
    channels = int(input_size[0])

    def flag(field: str, absent: bool = True) -> bool:
        value = config.get(field, absent)
        if not isinstance(value, bool):
            raise LgError(f"{name}: {field} must be true or false, found {shown(repr(value)[:60])}")
        return value

    if flag("do_rescale"):
        factor = config.get("rescale_factor", RESCALE_FACTOR)
        if (not isinstance(factor, numbers.Real) or isinstance(factor, bool)
                or not math.isclose(float(factor), RESCALE_FACTOR, rel_tol=1e-6)):
            raise LgError(f"{name}: rescale_factor must be 1/255 (lg scales pixels to [0, 1]), "
                          f"found {shown(repr(factor)[:60])}")
    else:
        raise LgError(f"{name}: do_rescale is false: the model takes pixels in [0, 255], and lg feeds [0, 1]")
    if flag("do_normalize"):
        try:
            mean = _per_channel(config.get("image_mean"), "image_mean", channels, positive=False)
            std = _per_channel(config.get("image_std"), "image_std", channels, positive=True)
        except LgError as error:
            raise LgError(f"{name}: {error}") from None
    else:
        mean, std = (0.0,) * channels, (1.0,) * channels
    resample = config.get("resample", 2)
    if isinstance(resample, bool) or resample not in PIL_RESAMPLE:
        raise LgError(f"{name}: resample must be one of PIL's filters {sorted(PIL_RESAMPLE)} "
                      f"({', '.join(f'{k} {v}' for k, v in PIL_RESAMPLE.items())}), found {shown(repr(resample)[:60])}")
    try:
        how, edge = _edge(config.get("size"), "size") if flag("do_resize") else ("square", int(input_size[1]))
        # A class without a centre crop (ViT's) has no do_center_crop.
        cut = _edge(config.get("crop_size"), "crop_size")[1] if flag("do_center_crop", False) else None
    except LgError as error:
        raise LgError(f"{name}: {error}") from None
    size = edge if cut is None else cut
    if cut is not None and cut > edge:
        raise LgError(f"{name}: crop_size {cut} is larger than the size {edge} it is cut from")
    crop_pct = size / edge
    # timm resizes to floor(size / crop_pct): keep that the processor's edge.
    while math.floor(size / crop_pct) < edge:
        crop_pct = math.nextafter(crop_pct, 0.0)
    image_size = None
    if size != int(input_size[1]) and any_size:
        image_size = size
        source = (f"{source}: {size}-pixel images, the positions (stored for {input_size[1]}) "
                  f"interpolated as transformers does")
    elif size != int(input_size[1]):  # fed at the model's own size, cut in the same proportion
        source = f"{source}, which prepares {size}-pixel images: fed at the model's {input_size[1]}"
    return Preprocessing(mean=mean, std=std, interpolation=PIL_RESAMPLE[resample], crop_pct=crop_pct,
                         input_size=tuple(int(v) for v in input_size), source=source,
                         crop_mode="squash" if how == "square" else "center", image_size=image_size)


def image_processor_fields(preprocessing: Preprocessing) -> dict[str, Any]:
    """The fields of a preprocessor_config.json that state `preprocessing`
    (a Hugging Face image processor then prepares images as lg does)."""
    size, scale = preprocessing.size, preprocessing.scale_size()
    resize = {"height": scale, "width": scale} if preprocessing.crop_mode == "squash" else {"shortest_edge": scale}
    resample = next(code for code, name in PIL_RESAMPLE.items() if name == preprocessing.interpolation)
    return {"do_resize": True, "size": resize, "resample": resample, "do_center_crop": scale != size,
            "crop_size": {"height": size, "width": size}, "do_rescale": True, "rescale_factor": RESCALE_FACTOR,
            "do_normalize": True, "image_mean": list(preprocessing.mean), "image_std": list(preprocessing.std)}


# ---- the overriding flags ----

def parse_numbers(text: str | None, flag: str) -> tuple[float, ...] | None:
    """`--mean 0.485,0.456,0.406` (or one number for every channel)."""
    if text is None or text == "":
        return None
    try:
        values = tuple(float(part) for part in str(text).split(","))
    except ValueError:
        raise UsageError(f"{flag} must be numbers separated by commas (one, or one per channel), "
                         f"got {shown(str(text))}") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"{flag} must be finite numbers, got {shown(str(text))}")
    return values


@dataclass(frozen=True)
class Overrides:
    """`--mean`, `--std`, `--interpolation`: what a user says over every model's own."""

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    interpolation: str | None = None

    @classmethod
    def parse(cls, mean: str | None = None, std: str | None = None, interpolation: str | None = None) -> "Overrides":
        if interpolation is not None and interpolation not in INTERPOLATIONS:
            raise UsageError(f"--interpolation must be one of {', '.join(INTERPOLATIONS)}, got {shown(interpolation)}")
        overrides = cls(parse_numbers(mean, "--mean"), parse_numbers(std, "--std"), interpolation)
        if overrides.std is not None and any(v <= 0 for v in overrides.std):
            raise UsageError(f"--std must be positive (it divides each channel), got {shown(str(std))}")
        return overrides

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.mean, self.std, self.interpolation))

    def apply(self, preprocessing: Preprocessing) -> Preprocessing:
        try:
            return preprocessing.with_overrides(self.mean, self.std, self.interpolation)
        except LgError as error:
            raise UsageError(str(error)) from None


# ---- where a model's recipe is found ----

def resolve(checkpoint, spec, adapter) -> Preprocessing | None:
    """The recipe of a model read from `checkpoint` as `spec` (None: not an
    image model): lg's metadata, else what its ecosystem states (the
    adapter), else lg's default (assumed when lg did not write it: said
    where images are fed, `preprocessing_of`)."""
    try:
        input_size = tuple(int(v) for v in adapter.input_size(spec))
    except LgError:
        return None  # a model of tokens
    recorded = checkpoint.lg.get(PREPROCESSING)
    if recorded is not None:
        try:
            return from_record(recorded, input_size, "lg metadata", any_size=adapter.any_image_size)
        except LgError as error:
            raise LgError(f"refused: metadata lg.preprocessing: {error}") from None
    found = adapter.stated_preprocessing(spec, checkpoint.companions, input_size)
    if found is not None:
        return found
    if checkpoint.lg:
        return default_preprocessing(input_size,
                                     "lg's default, as the file was written by lg before it recorded preprocessing")
    return default_preprocessing(input_size, f"lg's default, assumed: {checkpoint.label} states no preprocessing",
                                 assumed=True)


def preprocessing_of_spec(spec, adapter) -> Preprocessing | None:
    """The recipe a spec carries; for one that carries none (a live model's),
    what its ecosystem states of that architecture, else lg's default (None:
    a model of tokens). What lg records in the files it writes."""
    found = spec.extras.get(PREPROCESSING)
    if found is not None:
        return found
    try:
        input_size = tuple(int(v) for v in adapter.input_size(spec))
    except LgError:
        return None
    found = adapter.stated_preprocessing(spec, {}, input_size)
    return found or default_preprocessing(input_size, "lg's default")


def attach(model, preprocessing: Preprocessing | None):
    """`model` told how its images are prepared (`MODEL_ATTRIBUTE`, what
    `lgcli.train` feeds it by); returned."""
    if preprocessing is not None:
        setattr(model, MODEL_ATTRIBUTE, preprocessing)
    return model


def overridden(loaded, overrides: Overrides | None):
    """`loaded` (a `lgcli.loading.Loaded`) with `overrides` applied to its
    spec's recipe, so every model and file made from it carries them."""
    if not overrides:
        return loaded
    if loaded.spec.extras.get(PREPROCESSING) is None:
        raise UsageError("--mean, --std and --interpolation prepare images; this model takes tokens")
    loaded.spec = with_preprocessing(loaded.spec, overrides.apply(loaded.spec.extras[PREPROCESSING]))
    return loaded


def with_preprocessing(spec, preprocessing: Preprocessing | None):
    """`spec` carrying `preprocessing` in its extras (None: as it is)."""
    if preprocessing is None:
        return spec
    return replace(spec, extras={**spec.extras, PREPROCESSING: preprocessing})


