"""Rendering `lg eval` reports: a rich table, and loss/accuracy curves as a PNG.

An image report's rows are read by top-1, a language model report's
(`report["task"]` causal-lm or masked-lm) by the loss."""

from __future__ import annotations

import os
from typing import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lgcli.arch.base import IMAGE_CLASSIFICATION
from lgcli.checkpoint.atomic import atomic_path
from lgcli.errors import LgError


def is_text(report: dict) -> bool:
    return report.get("task", IMAGE_CLASSIFICATION) != IMAGE_CLASSIFICATION


# A table column: its header and how a report row fills it.
Column = tuple[str, Callable[[dict], str]]


def eval_table(report: dict) -> Table:
    """One row per checkpoint: size, accuracy at step 0 ("instinct") and at the
    end of the probe, the mean top-1 over the curve (higher = learns faster),
    the dip (the most top-1 lost below step 0 on the way) and the rate; for
    language models the same read by the loss (lower = better): the test
    loss per scored token (and perplexity) at step 0 and at the end, the mean
    loss over the curve, the dip (the most the loss rose above step 0)."""
    settings, data = report["settings"], report["data"]
    steps = settings["steps"]
    if is_text(report):
        title = (f"{data['name']} ({report['task']}): {data['train']} train / {data['test']} test windows of "
                 f"{data['seq_len']} tokens, {data['tokenizer']}")
        probed: list[Column] = [
            ("loss @0", lambda r: f"{r['instinct']['loss']:.4f}"),
            (f"loss @{steps}", lambda r: f"{r['final']['loss']:.4f}"),
            ("perplexity", lambda r: f"{r['final']['perplexity']:.2f}"),
            ("mean loss", lambda r: f"{r['mean_loss']:.4f}"),
            ("dip", lambda r: f"{r['dip']:.4f}")]
        plain: list[Column] = [("loss", lambda r: f"{r['final']['loss']:.4f}"),
                               ("perplexity", lambda r: f"{r['final']['perplexity']:.2f}")]
    else:
        title = f"{data['name']}: {data['train']} train / {data['test']} test images, {data['classes']} classes"
        plain = [("top-1", lambda r: f"{r['final']['top1']:.2f}"), ("top-5", lambda r: f"{r['final']['top5']:.2f}"),
                 ("loss", lambda r: f"{r['final']['loss']:.4f}")]
        probed = [("top-1 @0", lambda r: f"{r['instinct']['top1']:.2f}"),
                  (f"top-1 @{steps}", lambda r: f"{r['final']['top1']:.2f}"), *plain[1:],
                  ("mean top-1", lambda r: f"{r['mean_top1']:.2f}"), ("dip", lambda r: f"{r['dip']:.2f}")]
    columns: list[Column] = [
        ("checkpoint", lambda r: r["name"]),
        ("depth x width", lambda r: f"{r['architecture']['depth']} x {r['architecture']['width']}"),
        ("params", lambda r: f"{r['architecture']['parameters'] / 1e6:.2f}M")]
    if steps > 0:
        columns += [*probed, ("lr", lambda r: f"{r['lr']:g}")]
        if any("steps_to_random_final" in row for row in report["rows"]):
            columns.append(("steps to random's final", steps_to_random_cell))
        title += (f"; fine-tuned {steps} steps, batch {settings['batch_size']}, "
                  f"warm-up {settings['warmup']}, seed {settings['seed']}")
    else:
        columns += plain
    table = Table(title=title, title_justify="left")
    for index, (header, _) in enumerate(columns):
        table.add_column(header, justify="left" if index == 0 else "right")
    for row in report["rows"]:
        table.add_row(*[cell(row) for _, cell in columns])
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


def import_matplotlib():
    """matplotlib, drawing to files only; with a HOME it cannot write (a
    read-only home, a service account), its cache goes to a temporary folder
    instead of warning on stderr."""
    import os
    import tempfile

    if "MPLCONFIGDIR" not in os.environ and not _matplotlib_config_writable():
        import atexit
        import shutil

        os.environ["MPLCONFIGDIR"] = folder = tempfile.mkdtemp(prefix="lg-matplotlib-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    return matplotlib


def _matplotlib_config_writable() -> bool:
    """Whether matplotlib's own config and cache folder (~/.config/matplotlib,
    or under XDG_CONFIG_HOME) exists or can be made, and can be written."""
    import os

    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    folder = os.path.join(base, "matplotlib")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.path.isdir(folder) and os.access(folder, os.W_OK)


def plot_curves(report: dict, path: str | os.PathLike, *, force: bool = False) -> None:
    """Test loss and top-1 against fine-tuning steps (language models: test
    loss and perplexity), a line per checkpoint, written atomically to `path` (PNG)."""
    import_matplotlib()
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
