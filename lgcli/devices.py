"""The devices lg trains and scores on (--device: auto, cpu, cuda, cuda:N),
the process group torchrun describes, and bf16 autocast on CUDA."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from lgcli.errors import LgError, UsageError, shown
from lgcli.lazy import dist, torch


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        if self.active:
            value = value.detach().clone()
            dist.all_reduce(value)
            value /= self.world_size
        return value

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.active:
            value = value.clone()
            dist.all_reduce(value)
        return value

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


def distributed_setup(device: str) -> Distributed:
    """Join the process group torchrun describes in the environment (if any)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


# The devices lg trains and scores on: `--device` takes these (cuda:N, one GPU of several).
DEVICE_NAMES = re.compile(r"auto|cpu|cuda(:[0-9]{1,3})?", re.ASCII)


def concrete_device(device: str) -> str:
    """`--device auto`: "cuda" when torch sees a CUDA device, else "cpu";
    cpu, cuda or cuda:N as given. Anything else (meta, a device that holds
    no data; mps or another device torch may have but lg does not run on)
    is a usage mistake (exit 2), and cuda where there is none (or cuda:N
    past the last GPU) a problem of the machine (exit 1): either is refused
    in one line here, as a command starts: not after its plan, nor as an
    internal error."""
    if not isinstance(device, str) or not DEVICE_NAMES.fullmatch(device):
        holds_no_data = " (it holds no data: lg trains and scores real numbers)" if str(device).startswith(
            "meta") else ""
        raise UsageError(f"--device {shown(device)}: not a device lg runs on{holds_no_data}; give auto, cpu, cuda "
                         f"or cuda:N")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LgError(f"--device {device}: no CUDA device is available here (use --device cpu)")
    if device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        which = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise LgError(f"--device {device}: this machine has {count} CUDA device{'s' * (count != 1)} ({which})")
    return device


def check_device(device: str | None) -> None:
    """Refuse a --device that `concrete_device` refuses, before any work,
    leaving the value as it was given (None: not given): a resize reads
    `auto` its own way (the CPU's streamed path), not as CUDA when present."""
    if device is not None:
        concrete_device(device)


def auto_device_note(device: str) -> str | None:
    """What `--device auto` chose, for a message (None for any other value).
    Said once the input is checked, so a bad input still gets one line."""
    if device != "auto":
        return None
    chosen = concrete_device(device)
    where = (f"CUDA ({torch.cuda.get_device_name()}, bf16 autocast)" if chosen == "cuda"
             else "the CPU (no CUDA device found)")
    return f"--device auto: running on {where}"


def resolve_device(device: str, distributed: Distributed) -> torch.device:
    device = concrete_device(device)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise LgError("--device cuda: no CUDA device is available here (use --device cpu)")
        if distributed.active:
            return torch.device("cuda", distributed.local_rank)
        return torch.device(device)
    if device != "cpu":
        raise LgError(f"--device must be auto, cpu or cuda, got {device!r}")
    return torch.device("cpu")


def autocast(device: torch.device):
    # bf16 on CUDA only: CPU bf16 autocast is slow on most CPUs and changes
    # results between machines for no gain.
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
