"""Perplexity of Llama folders on held-out King James text, and ShortGPT's layer drop as a reference.

The measure (issue 28): 8 sequences x 256 tokens of ``<cache>/kjv/test.txt`` (written by fetch.py), cut
from the text tokenised as one stream by the folder's own tokenizer (no special tokens added) at 8 evenly
spaced window positions, always the same; each sequence's 255 next-token predictions (the first token has
no context) are scored in float32, and the perplexity is exp of their mean cross-entropy. Rows of one table
compare only under one tokenizer: each row records the sha256 of the token ids it was scored on.

ShortGPT (Men et al. 2024, "ShortGPT: Layers in Large Language Models are More Redundant Than You
Expect"): the block influence of layer i is BI_i = 1 - E_t[cos(h_in_t, h_out_t)], the mean over the tokens
of calibration text of the cosine between the hidden state a layer reads and the one it writes; the n
layers of least influence are removed. Measured here on 8 sequences x 256 tokens of
``<cache>/kjv/calibrate.txt`` (disjoint from the test text). This is a reference for lg's data-aware
methods, in the benchmarks only. Beside it, Gromov et al. 2024's contiguous block of least angular distance
(`angular_distances`), on the same calibration states, and any fixed set of layers (``--drop-layers``).

    C=~/.cache/lg-real
    python -m lgcli shrink $C/smollm2-135m --depth 20 --method select -o $C/smollm2-d20-select
    python benchmarks/real/smollm2_perplexity.py original=$C/smollm2-135m select=$C/smollm2-d20-select \\
        --shortgpt 10 --angular 10 --drop-layers 19-28

A folder may be given as NAME=FOLDER to name its row. ``--shortgpt N`` adds a row for the first folder with
its N least influential layers dropped (``--shortgpt-out DIR`` saves that model); ``--angular N`` two rows
for the first folder without its block of N layers of least angular distance, measured at the last token
(the paper's choice) and over all tokens; ``--drop-layers 19-28`` a row for the first folder without those
layers (0-based, inclusive ranges, commas between). A pruned row's seconds include the calibration pass.
Each row is printed in a table and appended as a JSON line to ``--results`` (default
benchmarks/real/results.jsonl).

As functions: `token_windows`, `perplexity`, `layer_states`, `block_influence`, `angular_distances`,
`drop_layers`.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path(os.environ.get("LG_REAL_CACHE", "~/.cache/lg-real")).expanduser()
DEFAULT_RESULTS = HERE / "results.jsonl"
SEQUENCES, LENGTH = 8, 256


def token_windows(tokenizer, text: str, sequences: int = SEQUENCES, length: int = LENGTH):
    """[sequences, length] token ids: the text tokenised as one stream (no special tokens), cut into
    consecutive windows of `length`, of which `sequences` evenly spaced ones are kept (first and last
    included), so the sample spans the whole text and is the same on every run."""
    import torch

    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    windows = len(ids) // length
    if windows < sequences:
        raise SystemExit(f"the text holds {windows} windows of {length} tokens, fewer than {sequences}")
    starts = [round(i * (windows - 1) / max(1, sequences - 1)) * length for i in range(sequences)]
    return torch.tensor([ids[s:s + length] for s in starts], dtype=torch.long)


class ResultRows:
    """A study's rows, each appended to `path` as a JSON line the moment it
    lands (with `machine` and the time); a rerun skips the rows already
    there, so the study resumes. `only`: the row names to run (empty: all)."""

    def __init__(self, path: Path, machine: str, only: str = ""):
        self.path, self.machine = path, machine
        self.only = {name for name in only.split(",") if name}
        lines = path.read_text().splitlines() if path.exists() else []
        self.done = {json.loads(line)["row"] for line in lines if line.strip()}

    def wanted(self, row: str) -> bool:
        return row not in self.done and (not self.only or row in self.only)

    def land(self, row: str, **fields) -> None:
        record = {"row": row, **fields, "machine": self.machine, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        print(json.dumps(record), flush=True)
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        self.done.add(row)


def perplexity(model, windows, batch_size: int = 2) -> tuple[float, float, int]:
    """(perplexity, mean next-token cross-entropy in nats, tokens predicted) of a causal LM on `windows`
    ([N, L] token ids on the model's device): every position but the first of each window predicted."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            batch = windows[start:start + batch_size]
            logits = model(input_ids=batch, use_cache=False).logits.float()
            losses = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                       batch[:, 1:].reshape(-1), reduction="sum")
            total += float(losses)
            count += batch[:, 1:].numel()
    loss = total / count
    return math.exp(loss), loss, count


def decoder_layers(model):
    """The model's list of decoder layers (Llama, Mistral, Qwen2: model.model.layers)."""
    return model.model.layers


def layer_states(model, windows, batch_size: int = 2) -> list:
    """The residual stream at every layer boundary, read by hooks on the decoder layers during the model's
    own forward: [L + 1] tensors [N, T, D] (float32, CPU), entry i the hidden state layer i reads and entry
    L the last layer's output (before the final norm)."""
    import torch

    layers = decoder_layers(model)
    gathered: list[list] = [[] for _ in range(len(layers) + 1)]

    def before(index):
        def hook(module, args, kwargs):
            gathered[index].append((args[0] if args else kwargs["hidden_states"]).float().cpu())
        return hook

    def after(module, args, kwargs, output):
        gathered[-1].append((output[0] if isinstance(output, tuple) else output).float().cpu())

    handles = [layer.register_forward_pre_hook(before(i), with_kwargs=True) for i, layer in enumerate(layers)]
    handles.append(layers[-1].register_forward_hook(after, with_kwargs=True))
    try:
        with torch.no_grad():
            for start in range(0, len(windows), batch_size):
                model(input_ids=windows[start:start + batch_size], use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return [torch.cat(parts) for parts in gathered]


def block_influence(states) -> list[float]:
    """ShortGPT's block influence of every layer i: 1 - cos(h_i, h_i+1), averaged over every token."""
    import torch

    return [1.0 - float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())
            for a, b in zip(states[:-1], states[1:])]


def angular_distances(states, block: int, last_token: bool = True) -> list[float]:
    """Gromov et al. 2024 ("The Unreasonable Ineffectiveness of the Deeper Layers"): for each start l, the
    angular distance arccos(cos(h_l, h_l+n)) / pi between the stream before layer l and after layer
    l + n - 1, averaged over sequences at their last token (the paper's choice; `last_token=False`
    averages over every token instead). The block of least distance is the one to drop."""
    import torch

    distances = []
    for start in range(len(states) - block):
        a, b = states[start], states[start + block]
        if last_token:
            a, b = a[:, -1], b[:, -1]
        cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1).clamp(-1, 1)
        distances.append(float((torch.arccos(cosine) / math.pi).mean()))
    return distances


def drop_layers(model, dropped: list[int]):
    """The model without the decoder layers `dropped`, in place: the layer list, the config's depth (and
    layer_types where the config has them) and each attention's layer index (its KV-cache slot) follow."""
    import torch

    layers = decoder_layers(model)
    kept = [i for i in range(len(layers)) if i not in set(dropped)]
    model.model.layers = torch.nn.ModuleList(layers[i] for i in kept)
    for new_index, layer in enumerate(model.model.layers):
        if hasattr(layer.self_attn, "layer_idx"):
            layer.self_attn.layer_idx = new_index
        if hasattr(layer, "layer_idx"):
            layer.layer_idx = new_index
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i] for i in kept]
    model.config.num_hidden_layers = len(kept)
    return model


def parse_layers(spec: str) -> list[int]:
    """'19-28' or '2,3,12-17' as a sorted list of layer indices."""
    layers = set()
    for part in spec.split(","):
        first, _, last = part.partition("-")
        layers.update(range(int(first), int(last or first) + 1))
    return sorted(layers)


def load(folder: Path, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    return model, tokenizer


def machine(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="Llama folders, each as FOLDER or NAME=FOLDER")
    parser.add_argument("--text", type=Path, default=DEFAULT_CACHE / "kjv" / "test.txt")
    parser.add_argument("--calibrate", type=Path, default=DEFAULT_CACHE / "kjv" / "calibrate.txt")
    parser.add_argument("--sequences", type=int, default=SEQUENCES)
    parser.add_argument("--length", type=int, default=LENGTH)
    parser.add_argument("--shortgpt", type=int, metavar="N",
                        help="add a row: the first folder with its N layers of least block influence dropped")
    parser.add_argument("--shortgpt-out", type=Path, help="save that model (and tokenizer) here")
    parser.add_argument("--angular", type=int, metavar="N",
                        help="add rows: the first folder without the block of N consecutive layers of least "
                             "angular distance (Gromov et al.), measured at the last token and over all tokens")
    parser.add_argument("--drop-layers", action="append", default=[], metavar="LIST",
                        help="add a row: the first folder without these layers, e.g. 19-28 or 2,3,12-17")
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="JSON lines appended here")
    args = parser.parse_args()

    text = args.text.expanduser().read_text(encoding="utf-8")
    text_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    rows = []
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])

    def record(name: str, folder: str, model, windows, started: float, extra: dict | None = None) -> None:
        value, loss, count = perplexity(model, windows.to(args.device))
        row = {"benchmark": "smollm2_perplexity", "row": name, "folder": folder,
               "depth": model.config.num_hidden_layers, "perplexity": value, "loss": loss, "tokens": count,
               "sequences": args.sequences, "length": args.length, "text": str(args.text), "text_sha256": text_sha,
               "token_ids_sha256": hashlib.sha256(windows.numpy().tobytes()).hexdigest(),
               "dtype": "float32", "device": args.device, "machine": machine(args.device),
               "seconds": round(time.perf_counter() - started, 1),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": command, **(extra or {})}
        rows.append(row)
        print(f"{name}: perplexity {value:,.4g} ({row['seconds']} s)", file=sys.stderr, flush=True)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        with args.results.open("a") as handle:
            handle.write(json.dumps(row) + "\n")

    first = None
    for item in args.folders:
        name, _, path = item.rpartition("=")
        folder = Path(path).expanduser()
        name = name or folder.name
        started = time.perf_counter()
        model, tokenizer = load(folder, args.device)
        windows = token_windows(tokenizer, text, args.sequences, args.length)
        record(name, str(folder), model, windows, started)
        if first is None:
            first = (name, folder, model, tokenizer)
        else:
            del model

    if args.shortgpt or args.angular or args.drop_layers:
        name, folder, model, tokenizer = first
        windows = token_windows(tokenizer, text, args.sequences, args.length)
        # (row, layers dropped, folder to save to, what to record, seconds spent choosing the layers)
        choices = []
        if args.shortgpt or args.angular:
            started = time.perf_counter()
            calibration_text = args.calibrate.expanduser().read_text(encoding="utf-8")
            calibration = token_windows(tokenizer, calibration_text, args.sequences, args.length)
            states = layer_states(model, calibration.to(args.device))
            measured = time.perf_counter() - started
            calibrated = {"calibration": str(args.calibrate), "calibration_tokens": calibration.numel(),
                          "calibration_seconds": round(measured, 1)}
            if args.shortgpt:
                influence = block_influence(states)
                dropped = sorted(sorted(range(len(influence)), key=influence.__getitem__)[:args.shortgpt])
                print(f"block influence per layer: {', '.join(f'{v:.3f}' for v in influence)}", file=sys.stderr)
                choices.append((f"{name} shortgpt -{args.shortgpt}", dropped, args.shortgpt_out,
                                {"method": "ShortGPT block influence (all tokens)", "block_influence": influence,
                                 **calibrated}, measured))
            for last_token in (True, False) if args.angular else ():
                distances = angular_distances(states, args.angular, last_token)
                begin = min(range(len(distances)), key=distances.__getitem__)
                where = "last token" if last_token else "all tokens"
                print(f"angular distance of {args.angular} layers from each start ({where}): "
                      f"{', '.join(f'{v:.3f}' for v in distances)}", file=sys.stderr)
                choices.append((f"{name} angular -{args.angular} ({where})", list(range(begin, begin + args.angular)),
                                None, {"method": f"Gromov et al. angular distance ({where})",
                                       "distances": distances, **calibrated}, measured))
            del states
        for spec in args.drop_layers:
            choices.append((f"{name} drop {spec}", parse_layers(spec), None, {"method": "fixed layers"}, 0.0))
        for label, dropped, out, extra, measured in choices:
            print(f"{label}: drops layers {dropped}", file=sys.stderr)
            started = time.perf_counter() - measured
            pruned, _ = load(folder, args.device)
            drop_layers(pruned, dropped)
            record(label, str(folder), pruned, windows, started, {**extra, "dropped_layers": dropped})
            if out:
                pruned.save_pretrained(out)
                tokenizer.save_pretrained(out)
                print(f"saved to {out}", file=sys.stderr)
            del pruned

    print("| row | depth | perplexity | seconds |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['row']} | {row['depth']} | {row['perplexity']:,.4g} | {row['seconds']} |")
    hashes = {row["token_ids_sha256"] for row in rows}
    if len(hashes) > 1:
        print("note: the rows were scored on different token ids (different tokenizers): not comparable",
              file=sys.stderr)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
