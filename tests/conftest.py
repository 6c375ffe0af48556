"""Shared helpers: tiny timm ViTs with non-trivial weights, and ways to run `lg`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The tests' models are tiny: one thread runs them as fast as two on an idle
# machine and several times faster on cores shared with other work (on the
# 2-core development machine beside a 2-thread benchmark, tests/test_bench.py
# and test_intervals.py took 27 s at one thread, 92 s at two). Set before
# torch is imported, so lg run in a subprocess inherits it; a value the user
# set is kept. Tests of thread counts set their own (test_thread_invariance).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[1]

# A small ViT in each shape the adapter must recognise (timm kwargs).
# `python -c` this, then lg's arguments: lg runs and is sent SIGTERM at its first optimiser step.
SIGTERM_AT_FIRST_STEP = ("import os, signal, sys, torch\n"
                         "real_step = torch.optim.AdamW.step\n"
                         "def step(self, *a, **k):\n"
                         "    os.kill(os.getpid(), signal.SIGTERM)\n"
                         "    return real_step(self, *a, **k)\n"
                         "torch.optim.AdamW.step = step\n"
                         "from lgcli.cli import main\n"
                         "main(sys.argv[1:])\n")
TINY = dict(depth=2, embed_dim=64, num_heads=2, patch_size=8, img_size=32, in_chans=3, num_classes=5)
VIT_VARIANTS = {
    "cls-token": dict(),
    "avg-pool-no-cls": dict(class_token=False, global_pool="avg"),
    "cls-with-fc-norm": dict(global_pool="avg", fc_norm=True),
    "register-tokens": dict(reg_tokens=3),
    "no-embed-class": dict(no_embed_class=True, reg_tokens=1),
    "layer-scale": dict(init_values=1e-5),
    "no-qkv-bias": dict(qkv_bias=False),
    "qk-norm": dict(qk_norm=True, num_heads=4),
    "no-head": dict(num_classes=0),
    "pre-norm": dict(model_name="vit_base_patch16_clip_224"),  # timm's pre-norm ViT: CLIP's, LayerNorm eps 1e-5
    "grayscale-3-heads": dict(in_chans=1, embed_dim=96, num_heads=3, img_size=28, patch_size=7),
    "distilled": dict(model_name="deit_base_distilled_patch16_224"),
}


def make_vit(variant: str = "cls-token", seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny timm ViT whose every parameter is random and non-trivial.

    Layer-scale gammas, biases and norm weights are perturbed too: with timm's
    init (gammas 1e-5, zero biases, unit norms) a wrong mapping of those
    tensors would go unnoticed in the outputs.
    """
    kwargs = {**TINY, **VIT_VARIANTS[variant], **overrides}
    name = kwargs.pop("model_name", "vit_base_patch16_224")
    torch.manual_seed(seed)
    model = timm.create_model(name, **kwargs)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param.dim() <= 1 and ("norm" in param_name or "gamma" in param_name):
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.add_(0.05 * torch.randn_like(param))
    return model.eval()


def write_plain(model: torch.nn.Module, path: Path) -> Path:
    """Save a state dict as a foreign safetensors file (no lg metadata)."""
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def sample_input(model: torch.nn.Module, batch: int = 2, seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    size = model.patch_embed.img_size
    return torch.randn(batch, model.patch_embed.proj.in_channels, size[0], size[1])



def sharpened_teacher_and_shrink(folder: Path, train_images, **vit) -> tuple[Path, Path]:
    """A teacher for distillation tests (a tiny ViT of `vit`'s sizes trained
    8 steps on `train_images`, its head sharpened so that its logits are far
    from uniform) and its shrink to one block: their files in `folder`."""
    import lgcli
    from lgcli.resize import resize_file
    from lgcli.train import TrainConfig, train

    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **vit)
    train(model, train_images, TrainConfig(steps=8, batch_size=16, lr=2e-3, progress=False))
    with torch.no_grad():
        model.head.weight.mul_(20.0)
    teacher = folder / "teacher.safetensors"
    lgcli.save_model(model.eval(), teacher)
    shrunk = folder / "shrunk.safetensors"
    resize_file(teacher, shrunk, direction="shrink", depth=1, notify=lambda m: None)
    return teacher, shrunk


def printed_model(path, heads: int | None = None) -> torch.nn.Module:
    """The model `lg inspect`'s load line builds and loads (strictly), run as
    printed: what a user who copies the line gets (`lg inspect --heads N`'s
    for a file that records no heads: without them it prints none)."""
    from lgcli import inspect_checkpoint

    report = inspect_checkpoint(path, heads=heads)
    scope: dict = {}
    exec(report["load_imports"] + "\nmodel = " + report["load_call"], scope)
    return scope["model"].eval()

@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: str


def run_lg(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> Result:
    """Run `lg` in a subprocess, as a user would (pipes, exit codes, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "lgcli", *map(str, args)], input=stdin,
                          capture_output=True, cwd=cwd, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return Result(proc.returncode, proc.stdout, proc.stderr.decode())


def run_lg_inproc(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> Result:
    """Run `lg` in this process (fast), from `cwd` if given: captures stdout bytes and stderr text."""
    from lgcli.cli import main

    out, err = io.BytesIO(), io.StringIO()

    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    stdin_wrapper = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    old, before = (sys.stdout, sys.stderr, sys.stdin), os.getcwd()
    sys.stdout, sys.stderr, sys.stdin = stdout, err, stdin_wrapper
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        main(list(map(str, args)))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        stdout.flush()
        sys.stdout, sys.stderr, sys.stdin = old
        os.chdir(before)
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def lg():
    return run_lg_inproc
