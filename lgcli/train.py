"""The one training loop for everything in `lg` that trains.

It trains any set of tensors: a model's own parameters (`lg eval`'s probe,
on images or on text), or the tensors a learngene builds a stock timm model
from on every step (`lgcli.learngenes.GeneratedModel`: condensing TLEG /
WAVE, fitting WAVE scalers). An optional frozen teacher's logits are the
loss's third input (knowledge distillation).

What it trains on is a `Batches`: examples it can index, made into (inputs,
targets) batches, varied per step (image augmentation, masked-LM masking)
and fed to the model. An `ImageSet` is wrapped as `ImageBatches`
(images -> class logits); token windows (`lgcli.text.TokenWindows`) are
their own (token ids -> per-token vocabulary logits, targets -100 where
nothing is predicted). One loss serves both: cross-entropy over the last
axis of the logits, ignoring targets of -100.

AdamW, linear warm-up then cosine decay to zero, optional label smoothing,
bf16 autocast on CUDA (full precision on CPU), seeded, an atomic checkpoint
every N steps, exact resume, rich progress on stderr, and DDP under
``torchrun`` (gloo on CPU, NCCL on CUDA).

Determinism is by construction, so that resume is exact and DDP matches one
process: the learning rate is a pure function of the step, the data order is
DistributedSampler's seeded permutation of each epoch (see
`lgcli.data.train_order`), and every step's randomness (augmentation,
dropout) is seeded from ``(seed, step, rank)``. A run resumed at step K
therefore replays steps K+1.. exactly as the uninterrupted run did.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from lgcli.checks import check_real, check_seed, check_whole
from lgcli.data import train_order
from lgcli.images import ImageSet
from lgcli.checkpoint.atomic import atomic_path
from lgcli.errors import LgError, one_line, os_reason, shown
from lgcli.lazy import F, torch
from lgcli.pace import duration_text
from lgcli.run_settings import check_origin
from lgcli.preprocessing import Preprocessing
from lgcli.devices import Distributed, autocast, distributed_setup, resolve_device
from lgcli.heads import image_logits, model_input, model_preprocessing
from lgcli.losses import LossFn, cross_entropy_loss
from lgcli.step_memory import step_memory_warning, time_dry_run_step

# `on_step(step, model)` after `step` optimiser steps (step 0: before any);
# called on every rank, with the unwrapped model in train mode. Returning
# True ends the run there (every rank must decide alike: the figures of
# `evaluate_accuracy` and `evaluate_text` are the same on every rank).
StepCallback = Callable[[int, "torch.nn.Module"], "bool | None"]


class StepCallbackState(Protocol):
    """What `on_step` decides by (lg condense's --until rule: its checks so far), kept in plain values."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...  # KeyError, TypeError, ValueError if damaged


# The teacher's logits a distillation run keeps (TeacherLogits): 60,000
# Fashion-MNIST images of 10 classes take 2.4 MB; ImageNet's 1.28 M of 1,000
# classes would take 5 GB, so runs like that compute them every step.
MAX_TEACHER_CACHE_BYTES = 1 << 30
# After this many steps, one line says how long the run will take (from
# their time: the first steps include warm-up costs, so it errs long).
ESTIMATE_AFTER_STEPS = 20
# Without a terminal, progress is a plain line on stderr this often.
PLAIN_LOG_SECONDS = 30

# Fields that must match for a checkpoint to be resumed: changing them would
# make the resumed run a different run, not a continuation.
RESUME_MUST_MATCH = ("steps", "batch_size", "lr", "weight_decay", "warmup_steps", "label_smoothing",
                     "seed", "augment")


@dataclass
class TrainConfig:
    """One training run's settings, checked when constructed (and again by
    `train`): a bad value is an `LgError`, not an exception from torch.

    `lr` is finite and > 0, `weight_decay` finite and >= 0, `label_smoothing`
    in [0, 1), `grad_clip` None or finite and > 0, `batch_size` >= 1, and
    `seed` a whole number in [0, 2**32 - 1]: every step's generators are
    seeded with ``seed * 1_000_003 + ...``, which stays in torch's 64-bit
    seed range for all of them."""

    steps: int
    batch_size: int = 64  # global: split evenly over DDP processes
    batch_flag: str = "--batch-size"  # the option that set it, named where a hint says to lower it
    lr: float = 5e-4
    weight_decay: float = 0.05
    warmup_steps: int = 0
    label_smoothing: float = 0.0
    grad_clip: float | None = 1.0
    seed: int = 0
    device: str = "cpu"
    augment: bool = False  # random 1-pixel-per-14 shifts and horizontal flips
    checkpoint_path: str | None = None
    checkpoint_every: int = 0  # 0: only at the end (when checkpoint_path is set)
    resume: bool = False
    force: bool = False
    num_workers: int = 0
    progress: bool = True
    description: str = "training"
    callback_every: int = 0  # 0: on_step is called at step 0 and the last step only
    # What the run is made from (lg condense: the teacher's sha256, the data,
    # the kind and shape): the checkpoint records it, and a resume of a
    # checkpoint made from anything else is refused, saying what differs.
    origin: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse settings no run can use (the messages name the CLI's flags)."""
        check_whole(self.steps, "--steps", 0)
        check_whole(self.batch_size, "--batch-size", 1)
        check_real(self.lr, "--lr", "a positive finite number", lambda v: v > 0)
        check_real(self.weight_decay, "--weight-decay", "a finite number >= 0", lambda v: v >= 0)
        check_whole(self.warmup_steps, "--warmup", 0)
        check_real(self.label_smoothing, "--label-smoothing", "a number in [0, 1)", lambda v: 0 <= v < 1)
        if self.grad_clip is not None:
            check_real(self.grad_clip, "gradient clipping", "a positive finite number", lambda v: v > 0)
        check_seed(self.seed)
        check_whole(self.checkpoint_every, "--checkpoint-every", 0)
        check_whole(self.num_workers, "num_workers", 0)
        check_whole(self.callback_every, "callback_every", 0)


@dataclass
class TrainResult:
    steps: int
    losses: list[float] = field(default_factory=list)  # global-batch mean loss per step run here
    resumed_from: int = 0


def learning_rate(step: int, config: TrainConfig) -> float:
    """The rate for optimiser step `step` (0-based): linear warm-up over
    `warmup_steps`, then half a cosine down to zero at `steps`."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    remaining = max(config.steps - config.warmup_steps, 1)
    progress = (step - config.warmup_steps) / remaining
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def step_generator(seed: int, step: int) -> torch.Generator:
    """Step `step`'s generator for what varies a batch (augmentation, masked-LM
    masking); any seed in [0, 2**32 - 1] works."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def augment_batch(images: torch.Tensor, generator: torch.Generator, rank: int = 0,
                  world_size: int = 1) -> torch.Tensor:
    """Random shifts of up to 1/14 of the side (padding with black, -1 after
    normalisation) and horizontal flips, per image, on any device.

    The draws are made for the whole global batch and this rank takes every
    `world_size`-th, the same positions `train_order` gives it, so each image
    gets the same transform under DDP as in one process."""
    batch, _, height, width = images.shape
    pad = max(1, height // 14)
    padded = F.pad(images, (pad, pad, pad, pad), value=-1.0)
    shifts = torch.randint(0, 2 * pad + 1, (batch * world_size, 2), generator=generator)[rank::world_size]
    flips = (torch.rand(batch * world_size, generator=generator) < 0.5)[rank::world_size]
    out = torch.empty_like(images)
    for i in range(batch):
        dy, dx = int(shifts[i, 0]), int(shifts[i, 1])
        crop = padded[i, :, dy:dy + height, dx:dx + width]
        out[i] = crop.flip(-1) if flips[i] else crop
    return out


def make_optimizer(model: torch.nn.Module, parameters: Iterable[torch.nn.Parameter] | None, config: TrainConfig,
                   device: torch.device) -> torch.optim.AdamW:
    """AdamW: no decay on biases, norms and embeddings-as-tokens (timm's
    `no_weight_decay`), as in DeiT; decay on weight matrices. Fused on the
    CPU, where torch's default updates one tensor at a time, 12 times slower
    (11.4 s against 0.9 s a step for 80M parameters on the 2-core machine)."""
    chosen = None if parameters is None else {id(p) for p in parameters}
    skip = set(getattr(model, "no_weight_decay", lambda: set())())
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad or (chosen is not None and id(parameter) not in chosen):
            continue
        (no_decay if parameter.ndim <= 1 or name in skip else decay).append(parameter)
    if not decay and not no_decay:
        raise LgError("nothing to train: no parameter requires a gradient")
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.999), fused=True if device.type == "cpu" else None)


class Batches(Protocol):
    """What `train` trains on: `len()` examples, made into batches.

    `batch(indices)` gives CPU tensors (inputs, targets) and may run in a
    DataLoader worker; `vary(inputs, targets, generator, rank, world_size)`
    applies the step's randomness (augmentation, masking) from the step's
    generator, drawing for the whole global batch and keeping this rank's
    share, so DDP matches one process; `logits(model, inputs)` runs a model
    (the student, or the teacher) on inputs. `unit` names an example in
    messages ("images", "windows")."""

    unit: str

    def __len__(self) -> int: ...

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]: ...

    def vary(self, inputs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator, rank: int,
             world_size: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def logits(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor: ...


class ImageBatches:
    """An `ImageSet` as `Batches`: images prepared for the model (its input
    size, its `Preprocessing`), labels as targets, optional augmentation
    (`augment_batch`)."""

    unit = "images"

    def __init__(self, data: ImageSet, image_size: int, channels: int, augment: bool = False,
                 preprocessing: Preprocessing | None = None):
        self.data, self.image_size, self.channels, self.augment = data, image_size, channels, augment
        self.preprocessing = preprocessing

    def __len__(self) -> int:
        return len(self.data)

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data.batch(indices, self.image_size, self.channels, self.preprocessing)

    def vary(self, inputs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator, rank: int,
             world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.augment:
            inputs = augment_batch(inputs, generator, rank, world_size)
        return inputs, targets

    def logits(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        return image_logits(model(inputs))


class TeacherLogits:
    """The frozen teacher's logits per train image, kept from the first time
    an image is seen: from the second epoch on, a distillation step skips
    the teacher's forward pass (a TLEG condense of 4 epochs took 0.73x the
    time, benchmarks/teacher_logits.py). Only where an image always reaches
    the teacher the same way: images without augmentation (text windows are
    re-masked per step, and a window's logits are too large to keep), and
    at most MAX_TEACHER_CACHE_BYTES."""

    def __init__(self, count: int):
        self.count = count
        self.logits: torch.Tensor | None = None  # (count, classes), made on the first batch
        self.seen: torch.Tensor | None = None

    @classmethod
    def for_run(cls, teacher: torch.nn.Module | None, data: Batches, count: int) -> "TeacherLogits | None":
        if teacher is None or not isinstance(data, ImageBatches) or data.augment:
            return None
        return cls(count)

    def get(self, indices: Sequence[int]) -> torch.Tensor | None:
        if self.seen is None or not self.count:
            return None
        where = torch.as_tensor(indices, device=self.seen.device)
        return self.logits[where] if bool(self.seen[where].all()) else None

    def put(self, indices: Sequence[int], logits: torch.Tensor) -> None:
        if self.logits is None:
            if self.count * logits.shape[-1] * 4 > MAX_TEACHER_CACHE_BYTES:
                self.count = 0  # too many to keep: every step runs the teacher
            self.logits = torch.zeros(self.count, logits.shape[-1], device=logits.device)
            self.seen = torch.zeros(self.count, dtype=torch.bool, device=logits.device)
        if self.count:
            where = torch.as_tensor(indices, device=logits.device)
            self.logits[where] = logits.detach().float()
            self.seen[where] = True


class _BatchFailure:
    """An `LgError` met while a batch was read (an image file that cannot be
    decoded), carried back as a value: raised in a DataLoader worker it would
    reach the main process re-wrapped, with the worker's traceback in its message."""

    def __init__(self, message: str):
        self.message = message


class _Batches:
    """Index lists → model-ready batches, so DataLoader workers can prefetch
    (a map-style data set: `__getitem__` and `__len__` are all DataLoader
    asks of one; deriving from torch's Dataset would import torch with this
    module)."""

    def __init__(self, data: Batches, batches: list[list[int]]):
        self.data, self.batches = data, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        try:
            return self.data.batch(self.batches[index])
        except LgError as error:
            return _BatchFailure(str(error))


def _batch_stream(data: Batches, config: TrainConfig, start_step: int, distributed: Distributed):
    probe = train_order(len(data), config.batch_size, 0, config.seed, distributed.rank, distributed.world_size)
    per_epoch = len(probe)
    if per_epoch == 0:
        raise LgError(f"the train split has {len(data)} {data.unit}, fewer than one batch of {config.batch_size}")
    epoch, offset = divmod(start_step, per_epoch)
    while True:
        batches = train_order(len(data), config.batch_size, epoch, config.seed, distributed.rank,
                              distributed.world_size)[offset:]
        loader = torch.utils.data.DataLoader(_Batches(data, batches), batch_size=None,
                                             shuffle=False, num_workers=config.num_workers)
        for indices, batch in zip(batches, loader):  # the loader keeps the order (no shuffle)
            if isinstance(batch, _BatchFailure):
                raise LgError(batch.message)
            yield indices, batch
        epoch, offset = epoch + 1, 0


def _save_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
                     config: TrainConfig, on_step_state: StepCallbackState | None = None) -> None:
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "config": asdict(config)}
    if on_step_state is not None:  # as it stands before the step's on_step: a resume calls it again
        state["on_step_state"] = on_step_state.state_dict()
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def check_resume(config: TrainConfig, stateful: bool = False) -> None:
    """Refuse, before any work is announced, a --resume whose training
    checkpoint lg cannot continue (unreadable, not lg's, made from another
    run, without the state of the run's `on_step` when `stateful`, --until):
    one line, not after the run's plan."""
    if config.resume and config.checkpoint_path and os.path.lexists(config.checkpoint_path):
        _read_checkpoint(Path(config.checkpoint_path), config, stateful)


def _read_checkpoint(path: Path, config: TrainConfig, stateful: bool = False) -> dict[str, Any]:
    """A training checkpoint's state, checked to continue this run."""
    import pickle
    import stat

    where = shown(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise LgError(f"cannot resume from {where}: not a regular file")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except LgError:
        raise
    except OSError as error:
        raise LgError(f"cannot resume from {where}: {os_reason(error)}") from None
    except pickle.UnpicklingError as error:
        # torch's own text advises weights_only=False, that is, running the
        # file's code: lg never does, so never says it.
        if "weights_only" in str(error):
            raise LgError(f"cannot resume from {where}: it holds Python objects besides tensors and numbers "
                          f"(code that unpickling would run); lg never unpickles those, and wrote no such "
                          f"file") from None
        raise LgError(f"cannot resume from {where}: damaged or truncated (not a training checkpoint torch "
                      f"can read)") from None
    except Exception:  # torch raises many types for a damaged or truncated file (IndexError among them)
        raise LgError(f"cannot resume from {where}: damaged or truncated (not a training checkpoint torch "
                      f"can read)") from None
    if not (isinstance(state, dict) and isinstance(state.get("config"), dict) and isinstance(state.get("model"), dict)
            and isinstance(state.get("optimizer"), dict) and type(state.get("step")) is int):
        raise LgError(f"cannot resume from {where}: not a training checkpoint lg wrote "
                      f"(expected model, optimizer, step and config)")
    saved = state["config"]
    if config.origin:
        check_origin(where, saved.get("origin"), config.origin)
    changed = [name for name in RESUME_MUST_MATCH if saved.get(name) != getattr(config, name)]
    if changed:
        details = ", ".join(f"{name} {saved.get(name)} -> {getattr(config, name)}" for name in changed)
        raise LgError(f"cannot resume {where}: the run's settings differ ({one_line(details)})")
    if stateful and not isinstance(state.get("on_step_state"), dict):  # written by lg before it kept the rule's state
        raise LgError(f"cannot resume {where}: an earlier lg wrote it without the state of the --until rule (its "
                      f"checks, best figure and patience), so the run could not stop where an uninterrupted one "
                      f"would; start over with --force")
    return state


def _load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig,
                     on_step_state: StepCallbackState | None = None) -> int:
    state = _read_checkpoint(path, config, on_step_state is not None)
    where = shown(path)
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if on_step_state is not None:
            on_step_state.load_state_dict(state["on_step_state"])
    except (RuntimeError, ValueError, KeyError, TypeError) as error:
        what = "weights" if on_step_state is None else "weights or --until state"
        raise LgError(f"cannot resume from {where}: its {what} do not fit this run "
                      f"({one_line(str(error).splitlines()[0] if str(error) else type(error).__name__)})") from None
    return state["step"]


def train(model: torch.nn.Module, data: ImageSet | Batches, config: TrainConfig, *,
          loss_fn: LossFn | None = None, teacher: torch.nn.Module | None = None,
          parameters: Iterable[torch.nn.Parameter] | None = None, on_step: StepCallback | None = None,
          image_size: int | None = None, channels: int | None = None,
          preprocessing: Preprocessing | None = None, cache_teacher: bool = True,
          on_step_state: StepCallbackState | None = None) -> TrainResult:
    """Train `model` in place on `data` for `config.steps` optimiser steps.

    `data` is an `ImageSet` (batches shaped for the model: `image_size` and
    `channels` default to what it takes, `preprocessing` to the model's own,
    `model_preprocessing`; `config.augment` varies them) or
    any other `Batches` (token windows). `model` is any module mapping
    inputs to logits: a timm model, a language model, or a
    `GeneratedModel` whose parameters are a learngene's tensors.
    `parameters` restricts what is trained (default: every parameter that
    requires a gradient). `teacher`, if given, is frozen and run on every
    batch; its logits are the third argument of `loss_fn`, kept per image
    where they can be (`TeacherLogits`) unless `cache_teacher` is False (a
    loss that reads more of the teacher's forward than its logits: `lg
    distill --hidden-weight`). Under torchrun
    each process passes the same model and data; the global batch is split
    between them. `on_step_state`, what `on_step` decides by (--until's
    rule), is in each checkpoint as it stood before that step's `on_step`,
    and a resume restores it and calls `on_step` at its step again (when
    due), so it decides as the uninterrupted run did.
    """
    config.check()  # again: a config's fields can be changed after it was made
    distributed = distributed_setup(config.device)
    device = resolve_device(config.device, distributed)
    if isinstance(data, ImageSet):
        model_channels, model_size = model_input(model)
        data = ImageBatches(data, image_size or model_size, channels or model_channels, config.augment,
                            preprocessing or model_preprocessing(model))
    elif config.augment:
        raise LgError(f"augmentation (shifts and flips) is for images; these are {data.unit}")
    loss_fn = loss_fn or cross_entropy_loss(config.label_smoothing)

    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval().requires_grad_(False)
    optimizer = make_optimizer(model, parameters, config, device)
    too_big = step_memory_warning(model, data, max(1, config.batch_size // distributed.world_size), teacher, device,
                                  trained=sum(p.numel() for group in optimizer.param_groups for p in group["params"]),
                                  flag=config.batch_flag)
    if too_big and distributed.rank == 0:  # said before a step the kernel would kill without a word
        print(too_big, file=sys.stderr, flush=True)
    checkpoint = Path(config.checkpoint_path) if config.checkpoint_path else None
    start_step = 0
    check_checkpoint_path(config)
    if checkpoint is not None and checkpoint.exists() and config.resume:
        start_step = _load_checkpoint(checkpoint, model, optimizer, config, on_step_state)
    elif config.resume and checkpoint is not None and distributed.rank == 0:
        print(f"lg: no checkpoint at {checkpoint} yet; starting from step 0", file=sys.stderr)
    if checkpoint is not None:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)

    trained = model
    if distributed.active:
        trained = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)

    def wants_callback(step: int) -> bool:
        return step == config.steps or (config.callback_every > 0 and step % config.callback_every == 0)

    result = TrainResult(steps=start_step, resumed_from=start_step)
    again = start_step > 0 and on_step_state is not None and wants_callback(start_step)  # its state predates it
    if on_step is not None and (start_step == 0 or again) and on_step(start_step, model) is True:
        return result

    progress = _progress(config, distributed)
    plain_log = config.progress and distributed.rank == 0 and not progress.console.is_terminal
    last_logged = time.monotonic()
    task = progress.add_task(config.description, total=config.steps, completed=start_step, loss=float("nan"))
    cache = TeacherLogits.for_run(teacher, data, len(data)) if cache_teacher else None
    started_at = time.monotonic()
    with progress:
        stream = _batch_stream(data, config, start_step, distributed)
        for step in range(start_step, config.steps):
            indices, (inputs, targets) = next(stream)
            inputs, targets = data.vary(inputs, targets, step_generator(config.seed, step), distributed.rank,
                                        distributed.world_size)
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            torch.manual_seed(config.seed * 1_000_003 + step * 1_009 + distributed.rank)  # dropout etc.
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, config)
            with autocast(device):
                teacher_logits = None if cache is None else cache.get(indices)
                if teacher is not None and teacher_logits is None:
                    with torch.no_grad():
                        teacher_logits = data.logits(teacher, inputs)
                    if cache is not None:
                        cache.put(indices, teacher_logits)
                loss = loss_fn(data.logits(trained, inputs), targets, teacher_logits)
            if not torch.isfinite(loss):
                raise LgError(f"the loss became {loss.item()} at step {step + 1}: lower --lr")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]],
                                               config.grad_clip)
            optimizer.step()
            done = step + 1
            if done == start_step + ESTIMATE_AFTER_STEPS and config.progress and distributed.rank == 0 \
                    and config.steps - done >= ESTIMATE_AFTER_STEPS:
                progress.console.print(_how_long(config, device, done - start_step, time.monotonic() - started_at,
                                                 config.steps - done), markup=False, highlight=False, soft_wrap=True)
            result.losses.append(float(distributed.mean(loss.detach().float())))
            result.steps = done
            progress.update(task, completed=done, loss=result.losses[-1])
            if plain_log and (done == config.steps or time.monotonic() - last_logged >= PLAIN_LOG_SECONDS):
                # Not a terminal (a log file, CI): rich draws nothing live, so say where we are.
                last_logged = time.monotonic()
                print(f"{config.description}: step {done}/{config.steps} loss {result.losses[-1]:.4f} "
                      f"lr {learning_rate(step, config):.3g}", file=sys.stderr, flush=True)
            if checkpoint is not None and (done == config.steps or (
                    config.checkpoint_every > 0 and done % config.checkpoint_every == 0)):
                if distributed.rank == 0:
                    _save_checkpoint(checkpoint, model, optimizer, done, config, on_step_state)
                distributed.barrier()
            if on_step is not None and wants_callback(done):
                stop = on_step(done, model)
                model.train()
                if stop is True:  # the caller's stopping rule (lg condense --until)
                    break
    return result


def check_checkpoint_path(config: TrainConfig) -> None:
    """Refuse to start over a training checkpoint without --resume or --force."""
    if config.checkpoint_path and Path(config.checkpoint_path).exists() and not (config.resume or config.force):
        raise LgError(f"{config.checkpoint_path} exists: pass --resume to continue that run or --force to start over")


def _how_long(config: TrainConfig, device: torch.device, timed_steps: int, seconds: float, left: int) -> str:
    """One line, from the first timed steps: how long the rest will take
    (printed through the progress bar's console, so a live bar stays whole)."""
    per_step = seconds / max(timed_steps, 1)
    return (f"{config.description}: {per_step:.2f} s a step on {'the CPU' if device.type == 'cpu' else device}; "
            f"about {duration_text(per_step * left)} for the {left} steps left")


# A dry run (--dry-run) times this many steps after a first, uncounted one (one-off costs), or
# fewer (one at least) once they took this long: five of a real LLM's minute-long CPU steps is too long.
TIMED_STEPS, ENOUGH_TIMING_SECONDS, step_timer = 5, 10.0, time.monotonic


def seconds_per_step(model: torch.nn.Module, data: ImageSet | Batches, config: TrainConfig, steps: int = TIMED_STEPS,
                     timing: dict[str, Any] | None = None, **train_args: Any) -> tuple[float, int]:
    """(seconds one of `config`'s steps takes, the steps timed), measured by running a few on `model`, which
    they change (give one to throw away): `steps`, or fewer once ENOUGH_TIMING_SECONDS were timed; no checkpoint
    is read or written. `train_args` are `train`'s. A batch slow to time, or too big for the CPU's memory, is
    scaled to from smaller ones (`step_memory.time_dry_run_step`; `timing` gets the batch timed)."""
    def time_at(batch: int, count: int) -> tuple[float, int]:  # a step of `batch`'s seconds, and the steps timed
        marks: list[float] = []

        def clock(step: int, trained: torch.nn.Module) -> bool:
            marks.append(step_timer())
            # marks[0]: before any step; marks[1]: after the first, which is not timed.
            return len(marks) > 2 and marks[-1] - marks[1] >= ENOUGH_TIMING_SECONDS

        trial = dataclasses.replace(config, batch_size=batch, steps=min(config.steps, count + 1),
                                    checkpoint_path=None, resume=False, progress=False, callback_every=1)
        train(model, data, trial, on_step=clock, **train_args)
        timed = marks[1:] if len(marks) > 2 else marks  # from the end of the first step, when more than one ran
        return (timed[-1] - timed[0]) / (len(timed) - 1), len(timed) - 1

    return time_dry_run_step(time_at, model, data, config.batch_size, train_args.get("teacher"), config.device,
                             steps, config.batch_flag, timing)


def _progress(config: TrainConfig, distributed: Distributed):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("loss {task.fields[loss]:.4f}"), TimeRemainingColumn(), console=console,
                    disable=not config.progress or distributed.rank != 0, transient=True)

