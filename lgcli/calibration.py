"""What a model computes on the user's data: the statistics the data-aware
resize methods read (SPEC.md "Data-aware resizing").

One forward pass of the source model over `--calibrate-samples` examples of
`--calibrate DATA`, through the family's own model (timm or transformers)
with hooks on the modules the family's adapter names (`layer_modules`: each
block, and per block the attention's output projection, the MLP's down
projection and the two norms). Nothing is kept per example: every statistic
is a running sum over positions, so memory is one batch's hidden states.

- ``cosine[i, j]`` and ``angle[i, j]``: the mean over positions of
  cos(h_i, h_j) and of arccos(cos(h_i, h_j)) / π, where h_l is the hidden
  state entering block l and h_L the last block's output. Block influence
  (ShortGPT) is ``1 - cosine[l, l + 1]``; the angular distance of the n
  blocks from l (Gromov et al. 2024) is ``angle[l, l + n]``. Gromov et al.
  take the last token of each sequence; lg averages over every position
  (every token, every image patch), which uses all the calibration data and
  serves encoders and image models alike.
- ``mlp[l, f]``: the mean |activation| of MLP neuron f of block l, taken at
  the down projection's input (for a gated MLP, gate·up: Minitron).
- ``heads[l, h]``: the mean L2 norm of head h's output entering the output
  projection (Minitron).
- ``embed[c]``: the mean |value| of embedding channel c at the two norms'
  outputs, summed over blocks (Minitron reads LayerNorm outputs).

The same call keeps the model and its examples (`Calibration.ablation`,
an `Ablation`) for the method that measures what the whole model's output
loses when blocks are skipped (`block-ablation`): those passes run only
when that method asks for them, one forward pass per set of skipped blocks,
streamed batch by batch against the full model's output on the same batch.

A model of stages (a Swin) is measured in the same one forward pass, stage
by stage (the adapter's `stage_layer_modules`): each stage's statistics are
over its own blocks and its own width, and a data-aware method runs on each
stage with that stage's (`methods.stages`).

The same data, samples and seed give the same examples, in the same order,
and so the same statistics (on one device, bit for bit).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .arch import get_adapter
from .arch.base import CAUSAL_LM, MASKED_LM, TEXT_ENCODER
from .errors import LgError, UsageError, notify_stderr
from .lazy import torch
from .stack import ArchSpec

# Examples calibrated on when --calibrate-samples is not given: enough for
# block influence to rank layers stably (ShortGPT and Minitron use a few
# hundred to a thousand sequences; the SmolLM2 study 32) and a
# forward pass of a few seconds on a CPU.
DEFAULT_CALIBRATION_SAMPLES = 64
# Examples per forward pass: bounds memory (one batch's hidden states at
# every block boundary are held at once).
CALIBRATION_BATCH = {"images": 64, "windows": 4}


@dataclass
class Calibration:
    """A model's statistics on calibration data (see the module docstring)."""

    data: str
    samples: int
    seed: int
    positions: int
    cosine: torch.Tensor  # (L + 1, L + 1)
    angle: torch.Tensor  # (L + 1, L + 1)
    mlp: torch.Tensor  # (L, F)
    heads: torch.Tensor  # (L, H)
    embed: torch.Tensor  # (D,)
    seconds: float = 0.0
    # A model of stages: one Calibration per stage (the fields above are
    # then its first stage's); a stage after the first also holds the
    # previous stage's `embed`, which its patch merging's input follows.
    stages: tuple["Calibration", ...] = ()
    input_embed: torch.Tensor | None = None
    # The model and examples kept for skipped-block passes (`Ablation`);
    # nothing runs until a method asks.
    ablation: "Ablation | None" = None
    # Tokens per window of a language model's calibration (the default --calibrate-seq-len resolved); None
    # for images.
    seq_len: int | None = None

    @property
    def depth(self) -> int:
        return self.mlp.shape[0]

    def block_influence(self) -> torch.Tensor:
        """BI_l = 1 - E[cos(h_l, h_{l+1})] for each block l (ShortGPT)."""
        return 1 - torch.diagonal(self.cosine, offset=1)

    def angular_distance(self, n: int) -> torch.Tensor:
        """d(l, n) = E[arccos(cos(h_l, h_{l+n}))] / π for l = 0..L-n (Gromov et al.)."""
        return torch.diagonal(self.angle, offset=n)

    def describe(self) -> dict[str, Any]:
        # No wall time: what is recorded in a file must be the same for the
        # same data and seed (the time is in the command's report).
        return {"data": self.data, "samples": self.samples, "seed": self.seed, "positions": self.positions,
                **({} if self.seq_len is None else {"seq_len": self.seq_len})}


def calibration_examples(model: torch.nn.Module, spec: ArchSpec, data: Any, *, samples: int, seed: int,
                         seq_len: int | None, companions: Mapping[str, Any], where: str,
                         notify: Callable[[str], None] = notify_stderr, at_most: bool = False,
                         flag: str = "--calibrate", seq_len_flag: str = "--calibrate-seq-len") -> tuple[Any, str]:
    """(a `Batches` of exactly `samples` examples, the data's name) of
    `data` for `model`: images at its input size and channels, or token
    windows of its tokenizer. The examples are a seeded draw from the train
    split. Data of the wrong kind, or fewer examples than asked, is refused;
    with `at_most` (a caller whose user did not ask for a number, as `lg
    condense --widths`), `samples` is a cap and a smaller split is taken whole.
    Errors name the data by `flag` and the window length by `seq_len_flag`,
    the options the user gave them with."""
    from .data import builtin_names, load_data
    from .images import ImageData, check_channels
    from .preprocessing import preprocessing_of_spec
    from .text import TextData, builtin_texts, text_data_for
    from .train import ImageBatches

    adapter = get_adapter(spec.family)
    name = getattr(data, "name", None) or os.fspath(data)
    generator = torch.Generator().manual_seed(seed)
    channels = _image_channels(adapter, spec)
    if channels is not None:
        if seq_len is not None:
            raise UsageError(f"{seq_len_flag} is for language models; this is an image model")
        if isinstance(data, TextData) or (isinstance(data, str) and data in builtin_texts()):
            raise LgError(f"{flag} {name} is a text; this model takes images "
                          f"(an image folder, fashion-mnist-mini, fashion-mnist, mnist)")
        images = data if isinstance(data, ImageData) else load_data(data, seed=seed, flag=flag)
        check_channels(images, channels)
        pool = images.train
        samples = _samples_taken(len(pool), samples, name, "images", at_most)
        chosen = torch.randperm(len(pool), generator=generator)[:samples].sort().values.tolist()
        # The model's own preprocessing (`lgcli.preprocessing`): the statistics
        # are of the inputs it was trained on, at the size it is fed.
        preprocessing = preprocessing_of_spec(spec, adapter)
        return ImageBatches(pool.subset(chosen), preprocessing.size, channels, preprocessing=preprocessing), name
    if isinstance(data, ImageData) or (isinstance(data, str) and data in builtin_names()):
        raise LgError(f"{flag} {name} is an image dataset; this model is a language model (give a text "
                      f"file, a folder of .txt files, or kjv-mini)")
    # Windows of plain token ids whatever the model's task: nothing is
    # scored, so a masked LM needs no mask token here.
    text = text_data_for([("the source", model, companions, where)], CAUSAL_LM, data, seq_len=seq_len, seed=seed,
                         notify=notify, flag=flag, seq_len_flag=seq_len_flag)
    pool = text.train
    samples = _samples_taken(len(pool), samples, name, f"windows of {text.seq_len} tokens", at_most)
    chosen = torch.randperm(len(pool), generator=generator)[:samples].sort().values.tolist()
    return pool.subset(chosen), name


def _image_channels(adapter, spec: ArchSpec) -> int | None:
    """The channels an image model takes, classifier or model of features
    alike (the size it is fed is its preprocessing's); None for a language model."""
    try:
        return int(adapter.input_size(spec)[0])
    except LgError:
        return None


def _samples_taken(available: int, samples: int, name: str, unit: str, at_most: bool) -> int:
    """How many of `available` examples to draw: `samples`, refused when
    there are fewer; with `at_most`, a cap (a smaller split is taken whole)."""
    if at_most:
        samples = min(samples, max(available, 1))
    if available < samples:
        raise LgError(f"--calibrate {name} has {available} {unit} to calibrate on, fewer than "
                      f"--calibrate-samples {samples}: give more data or ask for fewer samples")
    return samples


def calibrate(model: torch.nn.Module, spec: ArchSpec, examples: Any, *, name: str, seed: int,
              device: str = "cpu") -> Calibration:
    """Run `examples` (a `Batches`) through `model` (the family's own model of
    `spec`) and gather the statistics, on `device`. A model of stages (a
    Swin) is measured stage by stage in the same forward pass: the result's
    `stages` holds one Calibration per stage, over that stage's blocks
    (h_0 enters its first block, after the patch merging before it; h_L
    leaves its last, before the merging after it)."""
    started = time.perf_counter()
    adapter = get_adapter(spec.family)
    if spec.stages:
        groups = list(zip(adapter.stage_layer_modules(spec, model), spec.stages))
    else:
        groups = [(adapter.layer_modules(spec, model), spec)]
    named = dict(model.named_modules())
    for modules, _ in groups:
        missing = [m for m in ("block", "o", "fc2") if m not in modules] + \
            [m for names in modules.values() for m in names if m not in named]
        if missing:  # a family declaration that does not match its library's model: lg's bug
            raise RuntimeError(f"{spec.family}: no module for {missing[0]} in the model")
    where = torch.device(device)
    model = model.to(where).eval()
    sums = [_Sums(len(modules["block"]), part, where) for modules, part in groups]
    hooks: list = []
    try:
        for (modules, _), part_sums in zip(groups, sums):
            hooks += _hooks(modules, named, part_sums)
        per_batch = CALIBRATION_BATCH.get(examples.unit, 8)
        with torch.inference_mode():
            for start in range(0, len(examples), per_batch):
                inputs, _ = examples.batch(range(start, min(start + per_batch, len(examples))))
                _forward(model, inputs.to(where), examples.unit)
                for part_sums in sums:
                    part_sums.add_hidden()
    finally:
        for hook in hooks:
            hook.remove()
    seconds = time.perf_counter() - started
    results = [part_sums.result(name=name, samples=len(examples), seed=seed, seconds=seconds) for part_sums in sums]
    measure = output_measure(adapter, spec)
    if not spec.stages:
        whole = results[0]
    else:
        for previous, stage in zip(results, results[1:]):
            # The patch merging before a stage reads the previous stage's
            # channels: its input axis keeps what that stage's embedding keeps.
            stage.input_embed = previous.embed
        first = results[0]  # the positions a model of stages is measured at: its first stage's patches
        whole = Calibration(data=name, samples=len(examples), seed=seed, positions=first.positions,
                            cosine=first.cosine, angle=first.angle, mlp=first.mlp, heads=first.heads,
                            embed=first.embed, seconds=seconds, stages=tuple(results))
    for (modules, _), part in zip(groups, results):
        # Each stack of blocks (a stage of a Swin) skips its own blocks; the
        # time its passes take is the whole calibration's.
        part.ablation = Ablation(model=model, examples=examples, blocks=[named[b] for b in modules["block"]],
                                 measure=measure, device=where, clock=whole)
    if spec.stages:
        whole.ablation = None  # a model of stages is ablated stage by stage
    if examples.unit != "images":
        whole.seq_len = int(examples.inputs.shape[1])
    return whole


def _hooks(modules: Mapping[str, list[str]], named: Mapping[str, torch.nn.Module], sums: "_Sums") -> list:
    """Hooks on one stack of blocks (a plain model's, or one stage's) that feed `sums`."""
    depth = len(modules["block"])

    def capture_input(index: int):
        def hook(module, args, kwargs):
            sums.hidden[index] = _first_tensor(args, kwargs)
        return hook

    def capture_last(module, args, output):
        sums.hidden[depth] = _first_tensor((output,) if torch.is_tensor(output) else output, {})

    def capture_heads(index: int):
        def hook(module, args, kwargs):
            sums.add_heads(index, _first_tensor(args, kwargs))
        return hook

    def capture_mlp(index: int):
        def hook(module, args, kwargs):
            sums.add_mlp(index, _first_tensor(args, kwargs))
        return hook

    def capture_norm(module, args, output):
        sums.add_embed(_first_tensor((output,) if torch.is_tensor(output) else output, {}))

    hooks = []
    for index, block in enumerate(modules["block"]):
        hooks.append(named[block].register_forward_pre_hook(capture_input(index), with_kwargs=True))
    hooks.append(named[modules["block"][-1]].register_forward_hook(capture_last))
    for index, module in enumerate(modules["o"]):
        hooks.append(named[module].register_forward_pre_hook(capture_heads(index), with_kwargs=True))
    for index, module in enumerate(modules["fc2"]):
        hooks.append(named[module].register_forward_pre_hook(capture_mlp(index), with_kwargs=True))
    for module in (*modules.get("norm1", ()), *modules.get("norm2", ())):
        hooks.append(named[module].register_forward_hook(capture_norm))
    return hooks


def _first_tensor(args: tuple, kwargs: Mapping[str, Any]) -> torch.Tensor:
    """The hidden states a module is called with (positionally or by name)."""
    if args and torch.is_tensor(args[0]):
        return args[0]
    for key in ("hidden_states", "x", "input"):
        if torch.is_tensor(kwargs.get(key)):
            return kwargs[key]
    raise RuntimeError("a hooked module was called without a tensor input")


class _Sums:
    """Running float64 sums of every statistic over positions."""

    def __init__(self, depth: int, spec: ArchSpec, device: torch.device) -> None:
        self.depth, self.heads_count, self.head_dim = depth, spec.heads, spec.head_dim
        self.hidden: list[torch.Tensor | None] = [None] * (depth + 1)
        double = dict(dtype=torch.float64, device=device)
        self.cosine = torch.zeros(depth + 1, depth + 1, **double)
        self.angle = torch.zeros(depth + 1, depth + 1, **double)
        self.positions = 0
        self.mlp = [None] * depth
        self.heads = torch.zeros(depth, spec.heads, **double)
        self.embed: torch.Tensor | None = None
        self.mlp_positions = [0] * depth
        self.head_positions = [0] * depth
        self.embed_positions = 0

    def add_hidden(self) -> None:
        if any(h is None for h in self.hidden):
            raise RuntimeError("a block was not run by the model's forward")
        states = torch.stack([h.reshape(-1, h.shape[-1]).float() for h in self.hidden])  # (L+1, P, D)
        states = torch.nn.functional.normalize(states, dim=-1)
        cos = torch.einsum("ipd,jpd->ijp", states, states).clamp(-1, 1)  # per position
        self.cosine += cos.sum(-1).double()
        self.angle += (torch.arccos(cos) / math.pi).sum(-1).double()
        self.positions += states.shape[1]
        self.hidden = [None] * (self.depth + 1)

    def add_mlp(self, index: int, activation: torch.Tensor) -> None:
        flat = activation.reshape(-1, activation.shape[-1]).float()
        total = flat.abs().sum(0).double()
        self.mlp[index] = total if self.mlp[index] is None else self.mlp[index] + total
        self.mlp_positions[index] += flat.shape[0]

    def add_heads(self, index: int, output: torch.Tensor) -> None:
        flat = output.reshape(-1, self.heads_count, self.head_dim).float()
        self.heads[index] += flat.norm(dim=-1).sum(0).double()
        self.head_positions[index] += flat.shape[0]

    def add_embed(self, output: torch.Tensor) -> None:
        flat = output.reshape(-1, output.shape[-1]).float()
        total = flat.abs().sum(0).double()
        self.embed = total if self.embed is None else self.embed + total
        self.embed_positions += flat.shape[0]

    def result(self, *, name: str, samples: int, seed: int, seconds: float) -> Calibration:
        if self.positions == 0 or any(m is None for m in self.mlp):
            raise RuntimeError("the calibration pass saw no data")
        cpu = dict(device="cpu", dtype=torch.float64)
        mlp = torch.stack([m / n for m, n in zip(self.mlp, self.mlp_positions)]).to(**cpu)
        heads = (self.heads / torch.tensor(self.head_positions, dtype=torch.float64,
                                           device=self.heads.device)[:, None]).to(**cpu)
        # The mean over every norm's every position: the sum over blocks of
        # each norm's mean, over 2L (the ranking is the same).
        embed = (self.embed / self.embed_positions).to(**cpu) if self.embed is not None else torch.zeros(0, **cpu)
        return Calibration(data=name, samples=samples, seed=seed, positions=self.positions,
                           cosine=(self.cosine / self.positions).to(**cpu),
                           angle=(self.angle / self.positions).to(**cpu), mlp=mlp, heads=heads, embed=embed,
                           seconds=seconds)


# What the whole model's output is compared by when blocks are skipped:
# KL(full || skipped) of the output distributions (a classifier's classes, a
# language model's vocabulary at every position), or 1 - cos of the final
# hidden states (after the final norm) of a model with no head.
KL_DIVERGENCE, COSINE_DISTANCE = "kl", "1-cos"


def output_measure(adapter, spec: ArchSpec) -> str:
    """KL_DIVERGENCE for a model with logits (an image classifier, a causal
    or masked language model), COSINE_DISTANCE for a model of features (an
    image backbone with no head, a text encoder)."""
    task = adapter.task(spec)
    if task in (CAUSAL_LM, MASKED_LM):
        return KL_DIVERGENCE
    if task == TEXT_ENCODER:
        return COSINE_DISTANCE
    return KL_DIVERGENCE if adapter.num_classes(spec) else COSINE_DISTANCE


@dataclass
class Ablation:
    """What the whole model's output loses when some of one stack's blocks
    are skipped (Shortened LLaMA, Kim et al. 2024; SLEB, Song et al. 2024).

    A skipped block's output is replaced by its input (a forward hook on the
    block module the family's adapter names), so the model computes as if
    the block were not there; its output is then compared, position by
    position, with the full model's on the same examples: the mean over
    positions of KL(p_full || p_skipped) for logits, of 1 - cos(h_full,
    h_skipped) for features (`output_measure`). The examples are streamed
    in their batches: one batch's outputs are held at a time, and each
    divergence is a running float64 sum over positions."""

    model: torch.nn.Module
    examples: Any
    blocks: list
    measure: str
    device: torch.device
    clock: Calibration  # whose `seconds` the passes add to
    passes: int = 0  # forward passes run so far, the full model's included

    @property
    def depth(self) -> int:
        return len(self.blocks)

    def divergences(self, skipped: list[tuple[int, ...]], base: tuple[int, ...] = (),
                    first_batch: Callable[[float, int], None] | None = None) -> list[float]:
        """For each tuple of block indices, the mean divergence of the model
        with those blocks skipped from the full model: per batch, one pass
        of the full model and one per tuple. `first_batch(seconds, batches)`
        is told how long the first batch's passes took, and how many
        batches there are (so a caller can say how long the rest will take).

        Every tuple holds the blocks `base` (greedy's blocks removed so far).
        The blocks before a tuple's first block outside `base` compute what
        they compute in the model without `base`, so they are not run again:
        their outputs from one pass of that model (the full model's when
        `base` is empty, else one more pass per batch) are replayed, the
        same numbers bit for bit, for a fraction of the cost."""
        if any(not set(base) <= set(blocks) for blocks in skipped):
            raise ValueError("every set of skipped blocks must hold the base blocks")
        started = time.perf_counter()
        totals = [0.0] * len(skipped)
        positions = 0
        per_batch = CALIBRATION_BATCH.get(self.examples.unit, 8)
        model = self.model.eval()
        with torch.inference_mode():
            for start in range(0, len(self.examples), per_batch):
                inputs, _ = self.examples.batch(range(start, min(start + per_batch, len(self.examples))))
                inputs = inputs.to(self.device)
                block_outputs: list[Any] = [None] * self.depth
                full = self._reference(self._run(model, inputs, (), record=block_outputs if not base else None))
                if base:
                    self._run(model, inputs, base, record=block_outputs)
                for index, blocks in enumerate(skipped):
                    first = min(set(blocks) - set(base), default=self.depth)
                    output = self._run(model, inputs, blocks, replay=block_outputs[:first])
                    divergence = self._divergence(full, output)
                    totals[index] += float(divergence.sum(dtype=torch.float64))
                positions += full.shape[0]
                if first_batch is not None and start == 0:
                    first_batch(time.perf_counter() - started, -(-len(self.examples) // per_batch))
        self.clock.seconds += time.perf_counter() - started
        if positions == 0:
            raise RuntimeError("the ablation pass saw no data")
        return [total / positions for total in totals]

    def _run(self, model: torch.nn.Module, inputs: torch.Tensor, skipped: tuple[int, ...], *,
             record: list | None = None, replay: list | None = None) -> torch.Tensor:
        """One pass with the blocks `skipped`; `record` receives every
        block's output, and the first len(`replay`) blocks return those
        outputs instead of running (a skipped one among them still returns
        its input: its skip hook has the last word)."""
        replayed = self.blocks[:len(replay or ())]
        for block, output in zip(replayed, replay or ()):
            block.forward = _replay(output)
        hooks = [self.blocks[b].register_forward_hook(_skip_block, with_kwargs=True) for b in skipped]
        if record is not None:  # after the skip hooks: a skipped block's output is its input
            hooks += [block.register_forward_hook(_recorder(record, index)) for index, block in enumerate(self.blocks)]
        try:
            output = self._output(model, inputs)
        finally:
            for hook in hooks:
                hook.remove()
            for block in replayed:
                del block.forward  # the class's forward again
        self.passes += 1
        return output

    def _output(self, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """The model's output the measure compares: logits, or the final
        hidden states (timm: `forward_features`, after the final norm;
        transformers: `last_hidden_state`)."""
        if self.examples.unit == "images":
            if self.measure == COSINE_DISTANCE and hasattr(model, "forward_features"):
                output = model.forward_features(inputs)
            else:
                output = model(inputs)
        else:
            # No key/value cache: a replayed block would leave its layer of it empty.
            output = model(input_ids=inputs, **({"use_cache": False} if _takes(model, "use_cache") else {}))
        if not torch.is_tensor(output):
            output = output.logits if self.measure == KL_DIVERGENCE else output.last_hidden_state
        return output.float().reshape(-1, output.shape[-1])  # one row per position

    def _reference(self, output: torch.Tensor) -> torch.Tensor:
        if self.measure == KL_DIVERGENCE:
            return torch.log_softmax(output, dim=-1)
        return torch.nn.functional.normalize(output, dim=-1)

    def _divergence(self, reference: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """Per position: KL(p || q) = sum_v p_v (log p_v - log q_v), or 1 - cos(h, h')."""
        if self.measure == KL_DIVERGENCE:
            log_q = torch.log_softmax(output, dim=-1)
            return (reference.exp() * (reference - log_q)).sum(-1)
        # 1 - cos(a, b) = |a/|a| - b/|b||^2 / 2: exactly 0 for equal outputs,
        # and without 1 - cos's cancellation when they are close.
        return (reference.double() - torch.nn.functional.normalize(output, dim=-1).double()).square().sum(-1) / 2


def _takes(model: torch.nn.Module, argument: str) -> bool:
    import inspect

    return argument in inspect.signature(model.forward).parameters


def _recorder(outputs: list, index: int):
    """A forward hook that keeps block `index`'s output in `outputs`."""
    def hook(module, args, output):
        outputs[index] = output
    return hook


def _replay(output: Any) -> Callable[..., Any]:
    """A block's forward that returns what the block returned in the full pass."""
    def forward(*args, **kwargs):
        return output
    return forward


def _skip_block(module, args, kwargs, output):
    """A forward hook that makes a block the identity: its output is its
    input (the first of a tuple, the rest as the block returned them)."""
    hidden = _first_tensor(args, kwargs)
    if torch.is_tensor(output):
        return hidden
    if isinstance(output, (tuple, list)):
        return type(output)((hidden, *output[1:]))
    raise RuntimeError(f"a block returned {type(output).__name__}, which the ablation pass cannot skip")


def _forward(model: torch.nn.Module, inputs: torch.Tensor, unit: str) -> None:
    """One calibration batch through the family's own model: images, or token windows."""
    if unit == "images":
        model(inputs)
    else:
        model(input_ids=inputs)


def planned_calibration(model: torch.nn.Module, examples: Any, name: str, passes: int, skipping: int = 0,
                        device: str = "cpu") -> dict[str, Any]:
    """A dry run's calibration: the examples checked, and about how long
    `passes` passes over them (`skipping` of them with blocks skipped, as
    block ablation's own line counts them) will take, from one batch of `model` timed on
    `device` after one untimed (a first call's overhead is no pass's). It
    tends to overstate a greedy ablation, whose later, shallower passes cost less."""
    where = torch.device(device)
    model = model.to(where).eval()
    per_batch = CALIBRATION_BATCH.get(examples.unit, 8)
    inputs, _ = examples.batch(range(min(per_batch, len(examples))))
    inputs = inputs.to(where)
    with torch.inference_mode():
        for _ in range(2):  # the second call is timed
            started = time.perf_counter()
            _forward(model, inputs, examples.unit)
    pass_seconds = (time.perf_counter() - started) * math.ceil(len(examples) / per_batch)
    return {"data": name, "samples": len(examples), "measured": False, "passes": passes,
            "passes_skipping_blocks": skipping, "pass_seconds": round(pass_seconds, 3),
            "estimated_seconds": round(pass_seconds * passes, 1)}


def calibration_device(device: str | None) -> str:
    """Where the calibration pass runs: a GPU when there is one (auto)."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


__all__ = ["Ablation", "Calibration", "calibrate", "output_measure", "KL_DIVERGENCE", "COSINE_DISTANCE", "calibration_examples", "calibration_device",
           "DEFAULT_CALIBRATION_SAMPLES", "planned_calibration"]
