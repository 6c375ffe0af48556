"""Running out of memory is one line that says so (it was "internal error:
this is a bug in lg ... RuntimeError: [enforce fail at alloc_cpu.cpp:127]
..."), whichever way torch or Python says it, with exit status 1 and the
traceback only under --debug."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lgcli.evaluate
import lgcli.inspection
from lgcli.cli import out_of_memory, out_of_memory_message

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fmnist_vit.safetensors"

CPU_MESSAGE = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
               "to allocate 1610612736 bytes. Error code 12 (Cannot allocate memory)")
CUDA_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
                "1.06 GiB is free. Of the allocated memory 75.3 GiB is allocated by PyTorch, and 1.1 GiB is reserved "
                "by PyTorch but unallocated.\nIf reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


class OutOfMemoryError(RuntimeError):
    """Stands for torch.OutOfMemoryError (torch.cuda.OutOfMemoryError): found by its name, not imported."""


def chained() -> BaseException:
    try:
        raise RuntimeError(CPU_MESSAGE)
    except RuntimeError as exc:
        try:
            raise ValueError("the batch could not be built") from exc
        except ValueError as outer:
            return outer


# (the exception, what the line must say was asked)
OUT_OF_MEMORY = {
    "cpu-allocator": (lambda: RuntimeError(CPU_MESSAGE), "tried to allocate 1.5 GiB"),
    "cuda": (lambda: OutOfMemoryError(CUDA_MESSAGE), "tried to allocate 2.00 GiB on the GPU"),
    "memory-error": (lambda: MemoryError(), "more memory than this machine has free"),
    "runtime-out-of-memory": (lambda: RuntimeError("MPS backend out of memory (MPS allocated: 1.2 GB)"),
                              "more memory than this machine has free"),
    "enomem": (lambda: OSError(errno.ENOMEM, "Cannot allocate memory"), "more memory than this machine has free"),
    "raised-from": (chained, "tried to allocate 1.5 GiB"),
}


def raising(monkeypatch, module, name, make):
    def fail(*args, **kwargs):
        raise make()
    monkeypatch.setattr(module, name, fail)


def assert_one_line(result, *phrases):
    lines = result.stderr.strip().splitlines()
    assert result.code == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("lg: error: out of memory: "), result.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("case", OUT_OF_MEMORY)
def test_running_out_of_memory_in_a_command_is_one_line(lg, monkeypatch, case):
    make, asked = OUT_OF_MEMORY[case]
    raising(monkeypatch, lgcli.evaluate, "evaluate", make)
    line = assert_one_line(lg("eval", EXAMPLE, "--steps", "1"), asked)
    assert line.endswith("; try a smaller --batch-size")  # lg eval takes --batch-size


def test_a_command_without_a_batch_is_told_what_it_can_lower(lg, monkeypatch):
    raising(monkeypatch, lgcli.inspection, "inspect_checkpoint", OUT_OF_MEMORY["cpu-allocator"][0])
    line = assert_one_line(lg("inspect", EXAMPLE), "tried to allocate 1.5 GiB", "a machine with more memory")
    assert "try a smaller --batch-size" not in line  # lg inspect has no such flag


def test_bench_names_both_of_its_batches(lg, monkeypatch):
    import lgcli.bench

    raising(monkeypatch, lgcli.bench, "bench", OUT_OF_MEMORY["cuda"][0])
    assert_one_line(lg("bench", EXAMPLE, "--data", "fashion-mnist-mini", "--sizes", "3x64", "-o", "unused"),
                    "on the GPU; try a smaller --batch-size or --condense-batch-size")


def test_debug_shows_the_exception_itself(lg, monkeypatch):
    monkeypatch.setenv("LG_DEBUG", "")  # --debug sets it: restored after the test
    raising(monkeypatch, lgcli.evaluate, "evaluate", OUT_OF_MEMORY["cpu-allocator"][0])
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        lg("eval", EXAMPLE, "--steps", "1", "--debug")


@pytest.mark.parametrize("exc", [RuntimeError("shape mismatch: 3 and 4"), ValueError("out of range"),
                                 OSError(errno.EIO, "Input/output error"), KeyError("memory")])
def test_other_failures_are_not_called_out_of_memory(lg, monkeypatch, exc):
    assert out_of_memory(exc) is None
    raising(monkeypatch, lgcli.evaluate, "evaluate", lambda: exc)
    result = lg("eval", EXAMPLE, "--steps", "1")
    assert result.code == 1 and "out of memory" not in result.stderr


def test_a_library_the_system_will_not_load_is_said_as_such(lg, monkeypatch):
    """`import torch` under an address-space limit (ulimit -v) too low for its
    libraries fails with the loader's ImportError: a limit to raise, not a bug."""
    raising(monkeypatch, lgcli.evaluate, "evaluate",
            lambda: ImportError("libtorch_cuda.so: failed to map segment from shared object"))
    result = lg("eval", EXAMPLE, "--steps", "1")
    assert result.code == 1 and result.stderr.strip() == (
        "lg: error: out of memory: the system would not load libtorch_cuda.so into this process (failed to map "
        "segment from shared object); raise its memory limit (ulimit -v, the container's) or free memory")
    raising(monkeypatch, lgcli.evaluate, "evaluate", lambda: ImportError("cannot import name 'x' from 'y'"))
    assert "internal error" in lg("eval", EXAMPLE, "--steps", "1").stderr


def test_the_message_reads_the_sizes_torch_gives():
    assert out_of_memory(RuntimeError(CPU_MESSAGE.replace("1610612736", "34816000"))) == "tried to allocate 33.2 MiB"
    assert out_of_memory(MemoryError()) == ""
    assert out_of_memory_message(MemoryError(), ("--batch-size",)) == (
        "out of memory: the request needs more memory than this machine has free; try a smaller --batch-size")


# A real failed allocation: lg eval's probe, once everything it imports is
# loaded, then its address space capped 512 MiB above what it holds and a
# batch of 4,000 images (over 1 GiB of activations at its first step).
REAL = f"""
import resource, sys
from lgcli.cli import main
main(["eval", {str(EXAMPLE)!r}, "--steps", "1", "--batch-size", "16", "--subset", "64", "--test-subset", "16"])
size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
limit = size + 512 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print("LIMITED", file=sys.stderr, flush=True)
main(["eval", {str(EXAMPLE)!r}, "--steps", "1", "--batch-size", "4000", "--test-subset", "16"])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status: Linux")
def test_a_real_allocation_failure_is_one_line():
    env = {**{k: v for k, v in os.environ.items() if k != "LG_DEBUG"}, "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", REAL], capture_output=True, text=True, env=env, timeout=300)
    assert "LIMITED" in proc.stderr, proc.stderr
    after = proc.stderr.split("LIMITED", 1)[1]
    errors = [line for line in after.splitlines() if line.startswith("lg: error:")]
    assert proc.returncode == 1, proc.stderr
    assert len(errors) == 1 and errors[0].startswith("lg: error: out of memory: "), after
    assert errors[0].endswith("; try a smaller --batch-size") and "Traceback" not in after


@pytest.mark.parametrize("args", [["methods"], ["methods", "--json"], ["inspect", str(EXAMPLE)],
                                  ["inspect", str(EXAMPLE), "--json"],
                                  ["shrink", str(EXAMPLE), "--depth", "2", "-o", "-"]])
def test_a_reader_that_goes_away_is_no_error(args):
    """`lg methods | head -1`: the reader closes the pipe before lg writes. lg
    exits 0 and says nothing (click exited 1 for the EPIPE, silently); so
    for a checkpoint streamed to a reader gone (`-o - | head -c 100`)."""
    process = subprocess.Popen([sys.executable, "-m", "lgcli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # gone before the first byte
    said = process.stderr.read()
    assert process.wait(timeout=120) == 0 and said == b"", said
