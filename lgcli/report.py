"""Rendering `lg eval` reports: a rich table, and loss/accuracy curves as a PNG.

An image report's rows are read by top-1, a language model report's
(`report["task"]` causal-lm or masked-lm) by the loss."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lgcli.arch.base import IMAGE_CLASSIFICATION
from lgcli.checkpoint import atomic_path
from lgcli.errors import LgError


def is_text(report: dict) -> bool:
    return report.get("task", IMAGE_CLASSIFICATION) != IMAGE_CLASSIFICATION


def eval_table(report: dict) -> Table:
    """One row per checkpoint: size, accuracy at step 0 ("instinct") and at the
    end of the probe, the mean top-1 over the curve (higher = learns faster),
    the dip (the most top-1 lost below step 0 on the way) and the rate; for
    language models the same read by the loss (lower = better)."""
    if is_text(report):
        return text_table(report)
    settings, data = report["settings"], report["data"]
    probed = settings["steps"] > 0
    to_random = probed and any("steps_to_random_final" in row for row in report["rows"])
    title = (f"{data['name']}: {data['train']} train / {data['test']} test images, {data['classes']} classes"
             + _probe_title(settings))
    table = Table(title=title, title_justify="left")
    table.add_column("checkpoint")
    table.add_column("depth x width", justify="right")
    table.add_column("params", justify="right")
    if probed:
        table.add_column("top-1 @0", justify="right")
        table.add_column(f"top-1 @{settings['steps']}", justify="right")
        table.add_column("top-5", justify="right")
        table.add_column("loss", justify="right")
        table.add_column("mean top-1", justify="right")
        table.add_column("dip", justify="right")
        table.add_column("lr", justify="right")
        if to_random:
            table.add_column("steps to random's final", justify="right")
    else:
        table.add_column("top-1", justify="right")
        table.add_column("top-5", justify="right")
        table.add_column("loss", justify="right")
    for row in report["rows"]:
        arch, final = row["architecture"], row["final"]
        cells = [row["name"], f"{arch['depth']} x {arch['width']}", f"{arch['parameters'] / 1e6:.2f}M"]
        if probed:
            cells += [f"{row['instinct']['top1']:.2f}", f"{final['top1']:.2f}", f"{final['top5']:.2f}",
                      f"{final['loss']:.4f}", f"{row['mean_top1']:.2f}", f"{row['dip']:.2f}",
                      f"{row['lr']:g}"]
            if to_random:
                cells.append(steps_to_random_cell(row))
        else:
            cells += [f"{final['top1']:.2f}", f"{final['top5']:.2f}", f"{final['loss']:.4f}"]
        table.add_row(*cells)
    return table


def _probe_title(settings: dict) -> str:
    if not settings["steps"] > 0:
        return ""
    return (f"; fine-tuned {settings['steps']} steps, batch {settings['batch_size']}, "
            f"warm-up {settings['warmup']}, seed {settings['seed']}")


def text_table(report: dict) -> Table:
    """A language model report's table: the test loss per scored token (and
    perplexity) at step 0 and at the end, the mean loss over the curve
    (lower = learns faster), the dip (the most the loss rose above step 0)."""
    settings, data = report["settings"], report["data"]
    probed = settings["steps"] > 0
    to_random = probed and any("steps_to_random_final" in row for row in report["rows"])
    title = (f"{data['name']} ({report['task']}): {data['train']} train / {data['test']} test windows of "
             f"{data['seq_len']} tokens, {data['tokenizer']}" + _probe_title(settings))
    table = Table(title=title, title_justify="left")
    table.add_column("checkpoint")
    table.add_column("depth x width", justify="right")
    table.add_column("params", justify="right")
    if probed:
        table.add_column("loss @0", justify="right")
        table.add_column(f"loss @{settings['steps']}", justify="right")
        table.add_column("perplexity", justify="right")
        table.add_column("mean loss", justify="right")
        table.add_column("dip", justify="right")
        table.add_column("lr", justify="right")
        if to_random:
            table.add_column("steps to random's final", justify="right")
    else:
        table.add_column("loss", justify="right")
        table.add_column("perplexity", justify="right")
    for row in report["rows"]:
        arch, final = row["architecture"], row["final"]
        cells = [row["name"], f"{arch['depth']} x {arch['width']}", f"{arch['parameters'] / 1e6:.2f}M"]
        if probed:
            cells += [f"{row['instinct']['loss']:.4f}", f"{final['loss']:.4f}", f"{final['perplexity']:.2f}",
                      f"{row['mean_loss']:.4f}", f"{row['dip']:.4f}", f"{row['lr']:g}"]
            if to_random:
                cells.append(steps_to_random_cell(row))
        else:
            cells += [f"{final['loss']:.4f}", f"{final['perplexity']:.2f}"]
        table.add_row(*cells)
    return table


def steps_to_random_cell(row: dict) -> str:
    """'120 (2.5x)': steps to the random baseline's final top-1 (or loss) and the speed-up
    over the baseline; 'never' when the row does not get there; '' without a baseline."""
    if "steps_to_random_final" not in row:
        return ""
    steps = row["steps_to_random_final"]
    if steps is None:
        return "never"
    if steps == 0:
        return "0 (at the start)"
    speedup = f" ({row['speedup']:.2f}x)" if row.get("speedup") is not None else ""
    return f"{steps:.0f}{speedup}"


def print_eval_table(report: dict, console: Console) -> None:
    console.print(eval_table(report), markup=False, highlight=False)
    sweeps = [row for row in report["rows"] if "sweep" in row]
    if sweeps:
        key, figure = ("loss", "{:.4f}") if is_text(report) else ("top1", "{:.2f}")
        label = "loss" if key == "loss" else "top-1"
        sweep = Table(title=f"learning-rate sweep: final {label} (mean {label} over the curve)",
                      title_justify="left")
        sweep.add_column("checkpoint")
        rates = [run["lr"] for run in sweeps[0]["sweep"]]
        for rate in rates:
            sweep.add_column(f"lr {rate:g}", justify="right")
        for row in sweeps:
            sweep.add_row(row["name"], *[f"{figure.format(run['final'][key])} ({figure.format(run[f'mean_{key}'])})"
                                         for run in row["sweep"]])
        console.print(sweep, markup=False, highlight=False)


def check_plot_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Refuse an unusable --plot path before any work is done."""
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise LgError(f"--plot {path}: give a .png file name")
    if target.exists() and not force:
        raise LgError(f"{target} exists (pass --force to overwrite)")
    if not target.parent.is_dir():
        raise LgError(f"--plot {path}: no such folder {target.parent}")
    return target


def plot_curves(report: dict, path: str | os.PathLike, *, force: bool = False) -> None:
    """Test loss and top-1 against fine-tuning steps (language models: test
    loss and perplexity), a line per checkpoint, written atomically to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    target = check_plot_path(path, force=force)
    text = is_text(report)
    second, second_label, legend_at = (("perplexity", "test perplexity", "upper right") if text
                                       else ("top1", "test top-1 (%)", "lower right"))
    figure, (loss_axes, second_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in report["rows"]:
        steps = [point["step"] for point in row["curve"]]
        label = row["name"] + (f" (lr {row['lr']:g})" if row.get("lr") else "")
        style = "--" if row["source"] == "random" else "-"
        loss_axes.plot(steps, [point["loss"] for point in row["curve"]], style, marker="o", markersize=3,
                       label=label)
        second_axes.plot(steps, [point[second] for point in row["curve"]], style, marker="o", markersize=3,
                         label=label)
    data = report["data"]
    loss_axes.set(xlabel="fine-tuning step", ylabel="test loss" + (" per token" if text else ""),
                  title=f"test loss ({data['name']})")
    second_axes.set(xlabel="fine-tuning step", ylabel=second_label,
                    title=f"{second_label.removesuffix(' (%)')} ({data['name']})")
    if text:
        second_axes.set_yscale("log")  # perplexity falls by orders of magnitude from a random init
    for axes in (loss_axes, second_axes):
        axes.grid(alpha=0.3)
    second_axes.legend(fontsize=8, loc=legend_at)
    figure.tight_layout()
    try:
        with atomic_path(target) as tmp:
            figure.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(figure)
