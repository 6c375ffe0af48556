"""Rebuild the embedded Fashion-MNIST subset from the full dataset.

    python -m lgcli.datasets.make_fashion_mnist_mini   # needs dataset-fashion-mnist

Takes 400 training and 100 test images per class (seed 0) from the official
splits, so the embedded test images are never in any training split.
"""

from lgcli.data import EMBEDDED_DIR, FASHION_MNIST_CLASSES, FASHION_MNIST_DIR, balanced_subset, load_idx_dataset, write_idx

TRAIN_IMAGES, TEST_IMAGES, SEED = 4000, 1000, 0


def main() -> None:
    full = load_idx_dataset(FASHION_MNIST_DIR, "fashion-mnist", FASHION_MNIST_CLASSES)
    EMBEDDED_DIR.mkdir(parents=True, exist_ok=True)
    for prefix, split, count in (("train", full.train, TRAIN_IMAGES), ("t10k", full.test, TEST_IMAGES)):
        chosen = balanced_subset(split.labels, count, SEED)
        write_idx(EMBEDDED_DIR / f"{prefix}-images-idx3-ubyte.gz", split.images[chosen].squeeze(1))
        write_idx(EMBEDDED_DIR / f"{prefix}-labels-idx1-ubyte.gz", split.labels[chosen].to(dtype=split.images.dtype))


if __name__ == "__main__":
    main()
