"""How a bench's results read: each row's interval and each size's verdict,
each cell as text (top-1, its interval, the steps to reach the random row),
the table on a terminal or in Markdown, and the summary figure (summary.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .bench_settings import FIT, RANDOM
from .errors import counted
from .tables import Cell, Column, joined, print_table


def _measure(report: dict[str, Any]) -> tuple[str, str, str]:
    """(key, its name, its number format) of the figure a bench compares."""
    if report.get("measure") == "loss":
        return "loss", "test loss", ".3f"
    return "top1", "top-1", ".1f"


def row_costs(methods: list[str], results: list[dict], condensed: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """What producing every size's model cost, per row: a learngene is
    condensed once and grown per size (a fitted row adds its fit); a resize
    method runs once per size. Seconds of this machine, as measured."""
    costs = {}
    for method in methods:
        if method == RANDOM:
            continue
        built = [r for r in results if r["method"] == method and r.get("status") == "done"]
        growth = sum(r.get("build_seconds") or 0.0 for r in built)
        made = condensed.get(method.removesuffix(FIT))
        once = float(made["seconds"]) if made else 0.0
        costs[method] = {"sizes": len(built), "condense_seconds": round(once, 1),
                         "build_seconds": round(growth, 1), "total_seconds": round(once + growth, 1)}
    return costs


def summarised(methods: list[str], sizes: list[tuple[int, int]], results: list[dict],
               measure) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each row's figure at each size with its 95 % interval (`lgcli.intervals`):
    over the seeds (a t-interval) when there are several, else a bootstrap over
    the test examples of its one run; and each size's verdict: the best row and
    the rows that tie with it (overlapping intervals)."""
    from .intervals import bootstrap_interval, t_interval, verdict

    summary: dict[str, dict[str, Any]] = {}
    verdicts: dict[str, Any] = {}
    for depth, width in sizes:
        size = f"{depth}x{width}"
        at_size: dict[str, dict[str, Any]] = {}
        for method in methods:
            runs = [r for r in results if r["method"] == method and r["size"] == size and r.get("status") == "done"]
            if not runs:
                continue
            finals = [r["row"]["final"][measure.key] for r in runs]
            if len(runs) > 1:
                interval = t_interval(finals)
            elif runs[0]["row"].get("final_examples"):
                examples = runs[0]["row"]["final_examples"]
                values = [e[0] if isinstance(e, list) else e for e in examples]
                weights = [e[1] for e in examples] if isinstance(examples[0], list) else None
                interval = bootstrap_interval(values, weights, seed=runs[0]["seed"])
            else:
                interval = t_interval(finals)
            instincts = [r["row"]["instinct"][measure.key] for r in runs]
            at_size[method] = {**interval, "finals": finals, "instinct": sum(instincts) / len(instincts)}
            summary.setdefault(method, {})[size] = at_size[method]
        verdicts[size] = verdict({m: v for m, v in at_size.items()}, measure.higher_is_better)
    return summary, verdicts


def cell_parts(cell: dict[str, Any], measure: str = "top1") -> tuple[str, ...]:
    """('83.1 (71.2)', '· 42 (2.50x)'): final top-1 (instinct) and steps to
    random's final (on text the test loss, with three decimals); the parts sit
    side by side, or one under the other in a narrow terminal."""
    from .report import steps_to_random_cell

    if cell.get("status") != "done":
        return ("n/a",)
    row = cell["row"]
    shown_as = ".3f" if measure == "loss" else ".1f"
    text = f"{row['final'][measure]:{shown_as}} ({row['instinct'][measure]:{shown_as}})"
    steps = steps_to_random_cell(row)
    return (text, f"· {steps}") if steps and row["source"] != RANDOM else (text,)


def interval_parts(summary: dict[str, Any], measure: str = "top1") -> tuple[str, ...]:
    """('83.1 ± 0.6 (71.2)',): the mean final figure, its 95 % interval's
    half-width, the mean instinct."""
    shown_as = ".3f" if measure == "loss" else ".1f"
    half = (summary["high"] - summary["low"]) / 2
    spread = f" ± {half:{shown_as}}" if summary["kind"] != "none" else ""
    return (f"{summary['mean']:{shown_as}}{spread} ({summary['instinct']:{shown_as}})",)


def table_rows(report: dict[str, Any]) -> list[list[Cell]]:
    """Methods x sizes, with what each method stores and cost to make."""
    seed = (report.get("seeds") or [None])[0]
    by = {(c["method"], c["size"]): c for c in report["cells"] if c.get("seed", seed) == seed}
    summary = report.get("summary") or {}
    several = len(report.get("seeds") or []) > 1
    rows: list[list[Cell]] = []
    for method in report["methods"]:
        stored = next((c.get("stores") for c in report["cells"] if c["method"] == method and c.get("stores")), 0)
        made = report["learngenes"].get(method.removesuffix(FIT))
        cost = f"{counted(made['steps'], 'step')}, {made['seconds']:.0f} s" if made else "-"
        if made and method.endswith(FIT):
            cost += f", + {counted(report['settings']['fit_steps'], 'fit step')} per size"
        total = report.get("costs", {}).get(method)
        every = f"{total['total_seconds']:.0f} s" if total and total["sizes"] else "-"
        measure = _measure(report)[0]
        rows.append([method, *[(interval_parts(summary[method][size], measure) + _verdict_mark(report, method, size)
                                if several and size in summary.get(method, {})
                                else cell_parts(by.get((method, size), {}), measure)
                                + (_verdict_mark(report, method, size) if size in summary.get(method, {}) else ()))
                               for size in report["sizes"]],
                     f"{stored / 1e6:.2f}M" if stored else "-", cost, every])
    return rows


def _verdict_mark(report: dict[str, Any], method: str, size: str) -> tuple[str, ...]:
    """'best' or 'tie' under the size's best row and those its interval cannot tell apart."""
    verdict = (report.get("verdicts") or {}).get(size) or {}
    if verdict.get("best") == method:
        return ("best" if not verdict.get("tied") else "best (tie)",)
    return ("tie",) if method in verdict.get("tied", ()) else ()


def headers(report: dict[str, Any]) -> list[str]:
    return ["method", *[size.replace("x", " x ") for size in report["sizes"]], "stores", "made in",
            "all sizes cost"]


def markdown_table(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(headers(report)) + " |", "|" + "---|" * len(headers(report))]
    lines += ["| " + " | ".join(joined(cell, stacked=False) for cell in row) + " |" for row in table_rows(report)]
    name = _measure(report)[1]
    shows = _what_a_cell_shows(report, name)
    caption = (f"{shows[0].upper()}{shows[1:]}; {report['data']['name']}, {_seeds_text(report)}. "
               f"{INTERVALS_LEGEND} {_budget_text(report)}All sizes cost: {ALL_SIZES_COST}.")
    return "\n".join(lines) + "\n\n" + caption + "\n"


INTERVALS_LEGEND = ("± : the 95 % interval (a t-interval over the seeds; for one seed, a bootstrap over the test "
                    "examples, in bench.json); best: the size's best mean; tie: a row whose interval overlaps the "
                    "best's (the data cannot tell them apart).")


def _seeds_text(report: dict[str, Any]) -> str:
    seeds = report.get("seeds") or [report["settings"]["seed"]]
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of seeds {seeds[0]}-{seeds[-1]}"


def _what_a_cell_shows(report: dict[str, Any], name: str, short: bool = False) -> str:
    """One seed's cell is its final figure (instinct) and the steps to
    random's final; several seeds' is the mean with its interval (the mean
    instinct), without the steps (`interval_parts`)."""
    final = f"final {name} after {counted(report['settings']['steps'], 'step')}"
    if len(report.get("seeds") or []) > 1:
        return f"mean {final} ± its 95 % interval ({'instinct' if short else 'mean instinct at step 0'})"
    if short:
        return f"{final} (instinct) · steps to random's final (speed-up)"
    return f"{final} (instinct at step 0) · steps to random's final {name} (speed-up)"


def _budget_text(report: dict[str, Any]) -> str:
    budget = report.get("budget")
    if budget is None:
        return ""
    if budget == 0:  # no path trained: the learngenes that need steps are left out
        return "Equal compute at budget 0: no path trained before the probe (resizes as made; no learngene). "
    return (f"Equal compute: every path had {budget} training steps before the probe (a resize: lg distill from "
            f"the ancestry; a learngene: its condense run, shared by every size; random: none). ")


# What the last column of the bench's table adds up.
ALL_SIZES_COST = ("seconds to make this row's model at every size it reaches (a learngene: condensed once, grown "
                  "per size; a resize method: once per size)")


def print_bench_table(report: dict[str, Any], console) -> None:
    """The bench's table within the console's width (lgcli.tables): short
    headers, each cell's parts one under the other when the sizes do not fit
    side by side, the sizes over several tables when even that is too wide,
    and a legend."""
    name = _measure(report)[1]
    # Split where too wide: the scores (sizes) first, then what each row cost.
    columns = [Column("method", "left"), *(Column(size) for size in report["sizes"]),
               Column("stores", group=1), Column("made in", wrap=True, group=1), Column("all\nsizes", group=1)]
    legend = (f"Each cell: {_what_a_cell_shows(report, name)}; n/a: the method cannot reach that size "
              f"(bench.json says why). "
              f"{INTERVALS_LEGEND} {_budget_text(report)}Sizes: "
              f"depth x width. stores: parameters kept to make every size, millions (the ancestry, or the "
              f"learngene); made in: the learngene's condense run; all sizes: {ALL_SIZES_COST}.")
    print_table(console, f"lg bench on {report['data']['name']}: {_what_a_cell_shows(report, name, short=True)}, "
                         f"{_seeds_text(report)}",
                columns, table_rows(report), legend=legend)


def summary_bars(report: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """What summary.png draws: {method: {size: {"height", "interval"}}}, a
    size a method has no finished cell at left out (drawn as n/a).

    The height is the mean of the finals bench.json's summary holds, over the
    seeds, so the bar is the table's figure (several seeds: the summary's
    mean; one: the cell's own final). With several seeds, "interval" is the
    summary's 95 % t-interval (low, high), drawn as an error bar, else None
    (one seed's bootstrap is in bench.json, not in the table either). A
    report without a summary (older, or made by hand) is read from its cells.
    """
    key = _measure(report)[0]
    summary = report.get("summary") or {}
    several = len(report.get("seeds") or []) > 1
    bars: dict[str, dict[str, dict[str, Any]]] = {}
    for method in report["methods"]:
        for size in report["sizes"]:
            held = summary.get(method, {}).get(size)
            finals = held["finals"] if held else [c["row"]["final"][key] for c in report["cells"]
                                                  if (c["method"], c["size"]) == (method, size)
                                                  and c.get("status") == "done"]
            if not finals:
                continue
            interval = (held["low"], held["high"]) if several and held and held.get("kind") != "none" else None
            bars.setdefault(method, {})[size] = {"height": sum(finals) / len(finals), "interval": interval}
    return bars


def seed_mean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A size's probe rows as its curve figure draws them: one row per method
    (rows are named by it), so each method has one colour and one legend
    entry. A method run with several seeds becomes the pointwise mean of
    their curves, at the steps they all have, with each seed's own curve
    under "seed_curves" (drawn faint in the same colour, `report.curves_figure`)
    and the rate each seed was reported at under "rates"."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["name"], []).append(row)
    drawn = []
    for runs in groups.values():
        if len(runs) == 1:
            drawn.append(runs[0])
            continue
        by_step = [{point["step"]: point for point in run["curve"]} for run in runs]
        steps = sorted(set.intersection(*(set(points) for points in by_step)))
        curve = []
        for step in steps:
            points = [points[step] for points in by_step]
            shared = [k for k, v in points[0].items() if k != "step" and isinstance(v, (int, float))
                      and all(k in point for point in points)]
            curve.append({"step": step, **{k: sum(point[k] for point in points) / len(points) for k in shared}})
        rates = sorted({run["lr"] for run in runs if run.get("lr")})
        drawn.append({"name": runs[0]["name"], "source": runs[0]["source"], "lr": None, "rates": rates,
                      "curve": curve, "seed_curves": [run["curve"] for run in runs]})
    return drawn


def summary_figure(report: dict[str, Any]):
    """Final top-1 (on text: test loss) by method, a group of bars per size,
    each method its own colour (`report.row_colours`); with several seeds the
    bar is the mean over them with its 95 % interval as an error bar
    (`summary_bars`: the figures bench.json's summary and the table hold).

    The bars start at 0 (top-1 at 0 %), so that their lengths compare. A
    cell that does not apply (n/a) is written as "n/a" where its bar would
    be, so that it cannot be read as 0 %, and random init's (mean) final figure
    is a dashed line across each size's group: the bar every other method has to beat.
    """
    from .report import import_matplotlib, row_colours

    import_matplotlib()
    import matplotlib.pyplot as plt

    sizes, methods = report["sizes"], report["methods"]
    key, name, _ = _measure(report)
    bars = summary_bars(report)
    several = len(report.get("seeds") or []) > 1
    # About a quarter inch per bar, within what a page or a screen shows.
    figure, axes = plt.subplots(figsize=(min(16.0, max(6.0, 2.0 + 0.22 * len(sizes) * len(methods))), 4.2))
    width = 0.8 / max(1, len(methods))
    for index, (method, colour) in enumerate(zip(methods, row_colours(len(methods)))):
        xs = [i + (index - (len(methods) - 1) / 2) * width for i in range(len(sizes))]
        present = [(x, bars[method][s]) for x, s in zip(xs, sizes) if s in bars.get(method, {})]
        axes.bar([x for x, _ in present], [bar["height"] for _, bar in present], width=width, color=colour,
                 label=method, hatch="//" if method == RANDOM else None)
        spread = [(x, bar) for x, bar in present if bar["interval"]]
        if spread:
            axes.errorbar([x for x, _ in spread], [bar["height"] for _, bar in spread],
                          yerr=[[bar["height"] - bar["interval"][0] for _, bar in spread],
                                [bar["interval"][1] - bar["height"] for _, bar in spread]],
                          fmt="none", ecolor="black", elinewidth=0.8, capsize=2, label="_nolegend_")
        for x, size in zip(xs, sizes):
            if size not in bars.get(method, {}):
                axes.text(x, 0.5 if key == "top1" else 0.05, "n/a", rotation=90, ha="center", va="bottom",
                          fontsize=7, color=colour)
    for i, size in enumerate(sizes):
        if size in bars.get(RANDOM, {}):
            axes.hlines(bars[RANDOM][size]["height"], i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                        linewidth=0.8)
    axes.set_ylim(bottom=0.0)
    axes.set_xticks(range(len(sizes)), [s.replace("x", " x ") for s in sizes])
    axes.set_ylabel(f"{name}{' %' if key == 'top1' else ''} after {counted(report['settings']['steps'], 'step')}")
    # Several seeds: a second line says what the bars and error bars are, as the narrowest figure fits it.
    what = f", {_seeds_text(report)}\n(error bars: 95 % interval; dashed: random init's mean final)" if several \
        else " (dashed: random init's final)"
    axes.set_title(f"lg bench on {report['data']['name']}{what}", fontsize=10 if several else None)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    figure.tight_layout()
    return figure


def plot_summary(report: dict[str, Any], path: Path) -> None:
    """`summary_figure`, written atomically to `path`."""
    from .report import save_figure

    save_figure(summary_figure(report), path)
