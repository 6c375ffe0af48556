# Sourced by the gpu_*.sh scripts, after their own `export PYTHONPATH`:
# what a device call carries in .gpu4 (README.md "Device runs"), unpacked.
#
# - The real DINOv2-S classifier, read as .gpu3/dinov2-s-fmnist: with the
#   repository's tracked files (25 MiB), its float16 folder (41 MiB) is over
#   a call's 64 MiB, so it travels as .gpu4/dinov2-s-fmnist.planes.tar.xz
#   (35 MiB: pack_classifier.py, its float16 bytes as two planes, then xz).
# - PyWavelets (BoT's wavelets), which the device's Python lacks: its
#   CPython 3.12 manylinux wheel less its tests and sample data (0.8 MiB, from
#   the 4.4 MiB wheel), as .gpu4/pywt-*-cp312.zip, unpacked into /tmp/lg-site.
#
# Each call gets a fresh working tree, so each unpacks them again (3 s).
if [ ! -d .gpu3/dinov2-s-fmnist ] && [ -f .gpu4/dinov2-s-fmnist.planes.tar.xz ]; then
  mkdir -p .gpu3 && python3 benchmarks/real/pack_classifier.py unpack .gpu4/dinov2-s-fmnist.planes.tar.xz .gpu3
fi
if ! python3 -c "import pywt" 2>/dev/null && ls .gpu4/pywt-*-cp312.zip >/dev/null 2>&1; then
  [ -d /tmp/lg-site/pywt ] || { mkdir -p /tmp/lg-site && python3 -m zipfile -e .gpu4/pywt-*-cp312.zip /tmp/lg-site; }
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/lg-site
fi
