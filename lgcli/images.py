"""Image data sets as lg trains and scores on them: images in memory
(TensorImages) or in a folder (FolderImages), a subset of either, a data
set's train and test splits (ImageData), and each image prepared as a
model's preprocessing says (timm's eval transform)."""

from __future__ import annotations

import copy as copy_module
import dataclasses
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from lgcli.errors import LgError, counted, os_reason
from lgcli.lazy import F, np, torch
from lgcli.preprocessing import Preprocessing, default_preprocessing
from lgcli.checks import short_line, shown_path


IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
# The PIL decoders those suffixes need; nothing else is tried on a file (a
# PostScript file named .png never reaches Ghostscript).
PIL_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP", "TIFF", "PPM")
# The most pixels one image may have (width x height), checked from its header
# before decoding: PIL's default decompression-bomb threshold, fixed here so
# that a changed `PIL.Image.MAX_IMAGE_PIXELS` does not change what lg accepts.
# An RGB image at the limit decodes to 256 MiB.
MAX_IMAGE_PIXELS = 89_478_485


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
        raise LgError(f"the preprocessing's {name} has {len(values)} values but the model takes "
                      f"{counted(channels, 'channel')}")
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

        arrays = [with_image(self.paths[index], pixels) for index in indices]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


def file_problem(path: Path) -> str | None:
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


def with_image(path: Path, use: Callable[[Any], Any]) -> Any:
    """`use(image)` on the PIL image at `path`, opened only as one of
    `PIL_FORMATS` and only when its header states at most `MAX_IMAGE_PIXELS`
    pixels; anything that goes wrong is an `LgError` naming the file."""
    from PIL import Image, UnidentifiedImageError

    where = shown_path(path)
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
        signed = _format_signed(path)  # a file that begins as an image but is not one is damaged, not foreign
        reason = (f"it begins as a {signed} image, but its data is damaged" if signed else
                  "it is not a PNG, JPEG, BMP, GIF, WebP, TIFF or PPM/PGM image")
    except OSError as error:  # truncated data, and files gone or changed since the folder was listed
        reason = os_reason(error) if error.errno is not None else short_line(str(error))
    except RecursionError:
        reason = "its structure is nested too deeply to decode"
    except Exception as error:  # PIL's decoders raise many types for damaged data (SyntaxError, ValueError, ...)
        reason = f"its data is damaged ({short_line(f'{type(error).__name__}: {error}', 120)})"
    raise LgError(f"cannot read image {where}: {reason}")


# The first bytes of each format lg reads (PIL_FORMATS), to tell a damaged image from a file of another kind.
FORMAT_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
                     (b"BM", "BMP"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"P5", "PGM"), (b"P6", "PPM"))


def _format_signed(path: Path) -> str | None:
    """The format whose signature `path` begins with, if any (WebP: RIFF....WEBP)."""
    try:
        with open(path, "rb") as file:
            head = file.read(12)
    except OSError:
        return None
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return next((name for signature, name in FORMAT_SIGNATURES if head.startswith(signature)), None)


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


def _label_key(name: str) -> str:
    """A class name as folders and configs both spell it: its letters and digits, without case
    ("Ankle boot", "ankle_boot"; "T-shirt/top", which no folder can be named, as "tshirttop")."""
    return "".join(ch for ch in name.casefold() if ch.isalnum())


def in_label_order(data: ImageData, names: Sequence[str]) -> ImageData | None:
    """`data` with each class numbered as a classifier whose classes are
    `names` (by index) numbers it, where its classes are those names, or
    some of them (`_label_key`: a folder of bags and coats is scored on a
    Fashion-MNIST head's ten classes); None where they are not.
    An image folder's classes come in sorted order, which is seldom the
    model's (Fashion-MNIST's "Ankle boot" is class 9, not 0)."""
    keys = [_label_key(name) for name in names]
    own = [_label_key(name) for name in data.classes]
    if not set(own) <= set(keys) or len(set(keys)) != len(keys) or len(set(own)) != len(own):
        return None
    order = torch.tensor([keys.index(_label_key(name)) for name in data.classes])

    def renumbered(split: ImageSet) -> ImageSet:
        copy = copy_module.copy(split)
        copy.labels = order[split.labels]
        return copy

    return dataclasses.replace(data, train=renumbered(data.train), test=renumbered(data.test), classes=list(names))


def in_models_label_order(data: ImageData, named: list[list[str] | None], notify: Callable[[str], None]) -> ImageData:
    """`data` numbered as the classifiers number their classes, where they
    name them (`named`, each `lgcli.heads.class_names`: a transformers config's id2label) and
    the data's classes are those names; said when that changes the
    numbering. Where the names differ from the data's, the data's sorted
    order stands, and that is said too: the score would otherwise mislead."""
    stated = {tuple(names) for names in named if names is not None}
    if len(stated) != 1:  # none names its classes, or they disagree: the data's own order
        return data
    names = list(stated.pop())
    ordered = in_label_order(data, names)
    if ordered is None:
        if len(names) == data.num_classes:
            notify(f"the model names its classes ({_first_few(names)}) and {data.name}'s are others "
                   f"({_first_few(data.classes)}): class i of the data, in its order, is taken as the model's class i")
        return data
    if not torch.equal(ordered.test.labels, data.test.labels) or ordered.num_classes != data.num_classes:
        own = {_label_key(name) for name in data.classes}
        numbered = [f"{i} {name}" for i, name in enumerate(names) if _label_key(name) in own]
        notify(f"{data.name}'s classes numbered as the model names them (id2label): {_first_few(numbered)}"
               + (f" (of its {ordered.num_classes})" if ordered.num_classes != data.num_classes else ""))
    return ordered


def _first_few(items: list[str], shown_at_most: int = 4) -> str:
    return ", ".join(items[:shown_at_most]) + (", ..." if len(items) > shown_at_most else "")


def match_channels(images: torch.Tensor, channels: int) -> torch.Tensor:
    """Repeat grayscale to the model's channels; refuse anything else."""
    have = images.shape[1]
    if have == channels:
        return images
    if have == 1:
        return images.expand(-1, channels, -1, -1)
    raise LgError(f"the data has {have}-channel images but the model takes {counted(channels, 'channel')}")


def check_channels(data: ImageData, channels: int) -> None:
    """Fail early (before any training) when the data cannot feed a model."""
    if data.channels != channels and data.channels != 1:
        raise LgError(f"{data.name} has {data.channels}-channel images but the model takes {channels} "
                      f"channels (only grayscale can be repeated to fit)")
