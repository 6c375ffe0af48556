"""Rendering `lg eval` reports: a rich table, and loss/accuracy curves as a PNG."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lgcli.checkpoint import atomic_path
from lgcli.errors import LgError


def eval_table(report: dict) -> Table:
    """One row per checkpoint: size, accuracy at step 0 ("instinct") and at the
    end of the probe, the mean top-1 over the curve (higher = learns faster),
    the dip (the most top-1 lost below step 0 on the way) and the rate."""
    settings, data = report["settings"], report["data"]
    probed = settings["steps"] > 0
    to_random = probed and any("steps_to_random_final" in row for row in report["rows"])
    title = (f"{data['name']}: {data['train']} train / {data['test']} test images, {data['classes']} classes"
             + (f"; fine-tuned {settings['steps']} steps, batch {settings['batch_size']}, "
                f"warm-up {settings['warmup']}, seed {settings['seed']}" if probed else ""))
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


def steps_to_random_cell(row: dict) -> str:
    """'120 (2.5x)': steps to the random baseline's final top-1 and the speed-up
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
        sweep = Table(title="learning-rate sweep: final top-1 (mean top-1 over the curve)", title_justify="left")
        sweep.add_column("checkpoint")
        rates = [run["lr"] for run in sweeps[0]["sweep"]]
        for rate in rates:
            sweep.add_column(f"lr {rate:g}", justify="right")
        for row in sweeps:
            sweep.add_row(row["name"], *[f"{run['final']['top1']:.2f} ({run['mean_top1']:.2f})"
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
    """Test loss and top-1 against fine-tuning steps, a line per checkpoint,
    written atomically to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    target = check_plot_path(path, force=force)
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in report["rows"]:
        steps = [point["step"] for point in row["curve"]]
        label = row["name"] + (f" (lr {row['lr']:g})" if row.get("lr") else "")
        style = "--" if row["source"] == "random" else "-"
        loss_axes.plot(steps, [point["loss"] for point in row["curve"]], style, marker="o", markersize=3,
                       label=label)
        accuracy_axes.plot(steps, [point["top1"] for point in row["curve"]], style, marker="o", markersize=3,
                           label=label)
    data = report["data"]
    loss_axes.set(xlabel="fine-tuning step", ylabel="test loss", title=f"test loss ({data['name']})")
    accuracy_axes.set(xlabel="fine-tuning step", ylabel="test top-1 (%)", title=f"test top-1 ({data['name']})")
    for axes in (loss_axes, accuracy_axes):
        axes.grid(alpha=0.3)
    accuracy_axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    try:
        with atomic_path(target) as tmp:
            figure.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(figure)
