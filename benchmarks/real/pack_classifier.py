"""Pack a model folder of 16-bit safetensors for a device call, smaller
than tar and xz alone make it, and unpack it there byte for byte.

A device call carries at most 64 MiB with the repository's tracked files.
The float16 DINOv2-S classifier is 41 MiB; xz makes it 37 MiB, because a
float16's low byte is nearly random and its high byte (sign, exponent, the
top mantissa bits) is not, and interleaved they compress as noise. Written
as two planes, every high byte and then every low byte, xz compresses the
high plane well: 35 MiB (measured on the classifier, 2026-11-27).

    python benchmarks/real/pack_classifier.py half ~/.cache/lg-real/dinov2-s-fmnist .gpu3/dinov2-s-fmnist
    python benchmarks/real/pack_classifier.py pack .gpu3/dinov2-s-fmnist .gpu4/dinov2-s-fmnist.planes.tar.xz
    python benchmarks/real/pack_classifier.py unpack .gpu4/dinov2-s-fmnist.planes.tar.xz .gpu3   # on the device

The archive holds the folder, each 16-bit safetensors file `F` replaced by
`F.planes` (its header, then the planes); `unpack` writes `F` back exactly
(the round trip is checked by the sha256 `pack` records in the archive).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import struct
import tarfile
from pathlib import Path

PLANES = ".planes"
SIXTEEN_BITS = {"F16", "BF16", "I16", "U16"}


def _split(data: bytes) -> bytes | None:
    """A safetensors file's bytes as header + high plane + low plane, or
    None when a tensor is not 16-bit (the planes would not line up)."""
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    if any(k != "__metadata__" and v["dtype"] not in SIXTEEN_BITS for k, v in header.items()):
        return None
    head, body = data[:8 + size], data[8 + size:]
    return head + body[1::2] + body[0::2]


def _join(data: bytes) -> bytes:
    size = struct.unpack("<Q", data[:8])[0]
    head, planes = data[:8 + size], data[8 + size:]
    half = len(planes) // 2
    body = bytearray(len(planes))
    body[1::2], body[0::2] = planes[:half], planes[half:]
    return head + bytes(body)


def pack(folder: Path, archive: Path) -> None:
    sums = {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.iterdir()):
            data, name = path.read_bytes(), path.name
            if path.suffix == ".safetensors" and (split := _split(data)) is not None:
                sums[name] = hashlib.sha256(data).hexdigest()
                data, name = split, name + PLANES
            info = tarfile.TarInfo(f"{folder.name}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        record = json.dumps(sums).encode()
        info = tarfile.TarInfo(f"{folder.name}/{PLANES}.sha256.json")
        info.size = len(record)
        tar.addfile(info, io.BytesIO(record))
    archive.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    print(f"{archive}: {archive.stat().st_size / 2**20:.2f} MiB")


def unpack(archive: Path, into: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(archive.read_bytes())), mode="r") as tar:
        tar.extractall(into, filter="data")
    for record in into.glob(f"*/{PLANES}.sha256.json"):
        for name, digest in json.loads(record.read_text()).items():
            planes = record.parent / (name + PLANES)
            data = _join(planes.read_bytes())
            if hashlib.sha256(data).hexdigest() != digest:
                raise SystemExit(f"{planes}: does not unpack to the packed file")
            (record.parent / name).write_bytes(data)
            planes.unlink()
        record.unlink()


def half(folder: Path, into: Path) -> None:
    """A float16 copy of a Hugging Face model folder: every float32 tensor of
    its safetensors files rounded to float16 (metadata kept), config.json's
    dtype said so, every other file copied as it is."""
    import shutil

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    if into.exists():
        raise SystemExit(f"{into}: exists")
    into.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata()
                tensors = {k: f.get_tensor(k) for k in f.keys()}
            tensors = {k: v.half() if v.dtype == torch.float32 else v for k, v in tensors.items()}
            save_file(tensors, str(into / path.name), metadata=metadata)
        elif path.name == "config.json":
            config = json.loads(path.read_text())
            for key in ("torch_dtype", "dtype"):
                if key in config:
                    config[key] = "float16"
            (into / path.name).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        elif path.is_file():
            shutil.copy2(path, into / path.name)
    size = sum(p.stat().st_size for p in into.iterdir())
    print(f"{into}: float16, {size / 2**20:.2f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("half", "pack", "unpack"))
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args()
    {"half": half, "pack": pack, "unpack": unpack}[args.action](args.source, args.target)


if __name__ == "__main__":
    main()
