"""Rendering `lg eval` reports: a table that fits the terminal, and loss/accuracy curves
(PNG, PDF or SVG).

An image report's rows are read by top-1, a language model report's
(`report["task"]` causal-lm or masked-lm) by the loss."""

from __future__ import annotations

import os
from typing import Callable
from pathlib import Path

from rich.console import Console

from lgcli.arch.base import IMAGE_CLASSIFICATION
from lgcli.checkpoint.atomic import atomic_path
from lgcli.errors import LgError, UsageError, counted
from lgcli.tables import Cell, Column, print_table


def is_text(report: dict) -> bool:
    return report.get("task", IMAGE_CLASSIFICATION) != IMAGE_CLASSIFICATION


# A table column: its header (two lines at most, so that it stays narrow) and
# how a report row fills it.
EvalColumn = tuple[str, Callable[[dict], Cell]]


def eval_columns(report: dict) -> tuple[str, list[EvalColumn], str]:
    """The title, columns and legend of the `lg eval` table. One row per
    checkpoint: size, accuracy at step 0 ("instinct") and at the end of the
    probe, the mean top-1 over the curve (higher = learns faster), the dip
    (the most top-1 lost below step 0 on the way), the rate when the rows'
    rates differ (else it is in the title); for language models the same
    read by the loss (lower = better): the test loss per scored token (and
    perplexity) at step 0 and at the end, the mean loss over the curve, the
    dip (the most the loss rose above step 0). The headers are short; the
    legend says what each means."""
    settings, data, rows = report["settings"], report["data"], report["rows"]
    steps = settings["steps"]
    text = is_text(report)
    legend = ["size: depth x width", "params: parameters, millions"]
    if text:
        title = (f"{data['name']} ({report['task']}): {data['train']} train / {data['test']} test windows of "
                 f"{data['seq_len']} tokens, {data['tokenizer']}")
        plain: list[EvalColumn] = [("loss", lambda r: f"{r['final']['loss']:.4f}"),
                                   ("ppl", lambda r: f"{r['final']['perplexity']:.2f}")]
        probed: list[EvalColumn] = [
            ("loss\n@0", lambda r: f"{r['instinct']['loss']:.4f}"),
            (f"loss\n@{steps}", plain[0][1]),
            (f"ppl\n@{steps}", plain[1][1]),
            ("mean\nloss", lambda r: f"{r['mean_loss']:.4f}"),
            ("dip", lambda r: f"{r['dip']:.4f}")]
        legend.append("loss: test loss per scored token; ppl: perplexity")
        measured, mean_read, dip_read = "loss", "lower learns faster", "the most the loss rose above step 0"
    else:
        title = (f"{data['name']}: {data['train']} train / {data['test']} test images, "
                 f"{counted(data['classes'], 'class')}")
        plain = [("top-1", lambda r: f"{r['final']['top1']:.2f}"), ("top-5", lambda r: f"{r['final']['top5']:.2f}"),
                 ("loss", lambda r: f"{r['final']['loss']:.4f}")]
        probed = [("top-1\n@0", lambda r: f"{r['instinct']['top1']:.2f}"),
                  (f"top-1\n@{steps}", plain[0][1]), (f"top-5\n@{steps}", plain[1][1]),
                  (f"loss\n@{steps}", plain[2][1]),
                  ("mean\ntop-1", lambda r: f"{r['mean_top1']:.2f}"), ("dip", lambda r: f"{r['dip']:.2f}")]
        legend.append("top-1, top-5: test accuracy in %; loss: test loss")
        legend += images_prepared(rows)
        measured, mean_read, dip_read = "top-1", "higher learns faster", "the most top-1 lost below step 0"
    columns: list[EvalColumn] = [
        ("checkpoint", lambda r: r["name"]),
        ("size", lambda r: f"{r['architecture']['depth']}x{r['architecture']['width']}"),
        ("params", lambda r: f"{r['architecture']['parameters'] / 1e6:.2f}M")]
    if steps > 0:
        columns += probed
        legend += [f"@0: at step 0 (instinct); @{steps}: after {steps} fine-tuning steps",
                   f"mean: {measured} over the curve ({mean_read})", f"dip: {dip_read}"]
        rates = {row["lr"] for row in rows}
        if len(rates) > 1:
            columns.append(("lr", lambda r: f"{r['lr']:g}"))
            legend.append("lr: the rate the row is reported at")
        if any("steps_to_random_final" in row for row in rows):
            columns.append(("to\nrandom", steps_to_random_cell))
            legend.append(f"to random: steps to the random baseline's final {measured} (speed-up over it)")
        title += (f"; fine-tuned {counted(steps, 'step')}, batch {settings['batch_size']}, "
                  f"warm-up {settings['warmup']}, seed {settings['seed']}"
                  + (f", lr {next(iter(rates)):g}" if len(rates) == 1 else ""))
    else:
        columns += plain
    return title, columns, "; ".join(legend) + "."


def images_prepared(rows: list[dict]) -> list[str]:
    """How each row's images were prepared (its model's own recipe, `lgcli.preprocessing`), for the legend:
    one line when every row shares a recipe, else one per row."""
    from lgcli.preprocessing import from_record

    recipes = {row["name"]: from_record(row["preprocessing"], tuple(row["preprocessing"]["input_size"]),
                                        row["preprocessing"]["source"], any_size=True)
               for row in rows if row.get("preprocessing")}
    shown = {name: f"{recipe.describe()} ({recipe.source})" for name, recipe in recipes.items()}
    if len(set(shown.values())) == 1:
        return [f"images prepared as: {next(iter(shown.values()))}"]
    return [f"images of {name}: {text}" for name, text in shown.items()]


def steps_to_random_cell(row: dict) -> str:
    """'120 (2.5x)': steps to the random baseline's final top-1 (or loss) and the speed-up
    over the baseline; 'never' when the row does not get there; '' without a baseline."""
    if "steps_to_random_final" not in row:
        return ""
    steps = row["steps_to_random_final"]
    if steps is None:
        return "never"
    if steps == 0:
        return "0 (at start)"
    speedup = f" ({row['speedup']:.2f}x)" if row.get("speedup") is not None else ""
    # A crossing interpolated between steps 0 and 1 (0.5) is not "0": the row started below.
    return f"{steps:.0f}{speedup}" if steps >= 1 else f"{steps:.1f}{speedup}"


def print_eval_table(report: dict, console: Console) -> None:
    """The `lg eval` table within the console's width (lgcli.tables): a long
    checkpoint name moves to a key under the table rather than being cut."""
    title, columns, legend = eval_columns(report)
    print_table(console, title, [Column(header, "left" if index == 0 else "right")
                                 for index, (header, _) in enumerate(columns)],
                [[cell(row) for _, cell in columns] for row in report["rows"]],
                legend=legend, key_header="checkpoint")
    sweeps = [row for row in report["rows"] if "sweep" in row]
    if sweeps:
        key, figure = ("loss", "{:.4f}") if is_text(report) else ("top1", "{:.2f}")
        label = "loss" if key == "loss" else "top-1"
        console.print()
        rates = [run["lr"] for run in sweeps[0]["sweep"]]
        print_table(console, f"learning-rate sweep: final {label} (mean {label} over the curve)",
                    [Column("checkpoint", "left"), *(Column(f"lr\n{rate:g}") for rate in rates)],
                    [[row["name"], *[(figure.format(run["final"][key]), f"({figure.format(run[f'mean_{key}'])})")
                                     for run in row["sweep"]]] for row in sweeps],
                    key_header="checkpoint")


# What --plot writes: matplotlib writes each from the file name's suffix.
PLOT_FORMATS = ("png", "pdf", "svg")


def check_plot_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Refuse an unusable --plot path before any work is done."""
    target = Path(path)
    if target.suffix.lower().removeprefix(".") not in PLOT_FORMATS:
        raise UsageError(f"--plot {path}: give a .png, .pdf or .svg file name")  # a flag's bad value: exit 2
    if target.exists() and not force:
        raise LgError(f"{target} exists (pass --force to overwrite)")
    if not target.parent.is_dir():
        raise LgError(f"--plot {path}: no such folder {target.parent}")
    return target


def save_figure(figure, target: Path) -> None:
    """Write a matplotlib figure atomically, in the format its suffix names
    (PLOT_FORMATS), and close it. PDF and SVG carry no creation date, and
    SVG's element ids are salted with a constant instead of at random, so the
    same report draws the same bytes."""
    import matplotlib
    import matplotlib.pyplot as plt

    file_format = target.suffix.lower().removeprefix(".")
    undated = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(file_format)
    try:
        with atomic_path(target) as tmp, matplotlib.rc_context({"svg.hashsalt": "lg"}):
            figure.savefig(tmp, dpi=110, format=file_format, metadata=undated)
    finally:
        plt.close(figure)


def row_colours(count: int) -> list[tuple[float, float, float, float]]:
    """A colour per row of a figure, no two alike however many rows:
    matplotlib's tab10 up to ten rows; up to twenty, tab20's strong shades then
    its light ones (the first ten rows keep tab10's hues); beyond, viridis (a
    perceptually uniform colormap) sampled evenly."""
    import_matplotlib()
    from matplotlib import colormaps
    from matplotlib.colors import to_rgba

    if count <= 10:
        colours = list(colormaps["tab10"].colors[:count])
    elif count <= 20:
        paired = colormaps["tab20"].colors
        colours = [*paired[0::2], *paired[1::2]][:count]
    else:
        colours = [colormaps["viridis"](index / (count - 1)) for index in range(count)]
    return [to_rgba(colour) for colour in colours]


# Beyond ten rows, markers cycle too, so that neighbouring shades stay apart.
ROW_MARKERS = ("o", "s", "^", "D", "v")


def row_marker(index: int, count: int) -> str:
    return "o" if count <= 10 else ROW_MARKERS[index % len(ROW_MARKERS)]


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
    import logging

    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    # A font a figure asks for that this machine lacks (mathtext's cmex10 on a
    # perplexity axis) is replaced by DejaVu Sans with a log line per lookup:
    # not the user's concern, and stderr is for lg's own messages.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
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


def curves_figure(report: dict):
    """Test loss and top-1 against fine-tuning steps (language models: test
    loss and perplexity), a line per checkpoint, each its own colour
    (`row_colours`); the random baseline dashed. A row that stands for
    several seeds (`bench_tables.seed_mean_rows`: its curve their mean) has
    each seed's curve drawn faint in its colour, unlabelled, so that a
    method keeps one colour and one legend entry however many seeds ran."""
    import_matplotlib()
    import matplotlib.pyplot as plt

    text = is_text(report)
    second, second_label, legend_at = (("perplexity", "test perplexity", "upper right") if text
                                       else ("top1", "test top-1 (%)", "lower right"))
    figure, (loss_axes, second_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    rows = report["rows"]
    for index, (row, colour) in enumerate(zip(rows, row_colours(len(rows)))):
        steps = [point["step"] for point in row["curve"]]
        seeds = row.get("seed_curves") or []
        rates = row.get("rates") or ([row["lr"]] if row.get("lr") else [])
        label = row["name"] + (f", mean of {len(seeds)} seeds" if seeds else "") \
            + (f" (lr {', '.join(f'{rate:g}' for rate in rates)})" if rates else "")
        dashes = "--" if row["source"] == "random" else "-"
        for curve in seeds:  # behind the mean; "_"-labelled lines stay out of the legend
            faint = dict(linestyle=dashes, color=colour, alpha=0.3, linewidth=0.8, label="_seed")
            loss_axes.plot([p["step"] for p in curve], [p["loss"] for p in curve], **faint)
            second_axes.plot([p["step"] for p in curve], [p[second] for p in curve], **faint)
        style = dict(linestyle=dashes, color=colour, marker=row_marker(index, len(rows)), markersize=3, label=label)
        loss_axes.plot(steps, [point["loss"] for point in row["curve"]], **style)
        second_axes.plot(steps, [point[second] for point in row["curve"]], **style)
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
    return figure


def plot_curves(report: dict, path: str | os.PathLike, *, force: bool = False) -> None:
    """`curves_figure`, written atomically to `path` (.png, .pdf or .svg)."""
    target = check_plot_path(path, force=force)
    save_figure(curves_figure(report), target)
