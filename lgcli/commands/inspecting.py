"""`lg inspect` (what a checkpoint or learngene is, and the line that loads
it) and `lg methods` (the methods and kinds the registries list)."""

from __future__ import annotations

import json
import shlex
from typing import Any, Optional

import typer
from rich.table import Table

from ..card import condensed_score
from ..errors import counted
from .common import HeadsOption, out_console, print_json, stages_text, table_console, write_data


def inspect(
    file: str = typer.Argument(..., metavar="FILE",
                               help="Checkpoint: .safetensors, '-' for stdin, a sharded folder, .pth/.bin, "
                                    "or a hub id org/name[@revision] in the local Hugging Face cache."),
    heads: Optional[int] = HeadsOption,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report instead of a table."),
) -> None:
    """What a checkpoint is, and the exact line that loads it."""
    from ..inspection import inspect_checkpoint

    report = inspect_checkpoint(file, heads=heads)
    if as_json:
        print_json(report)
        return
    render_inspect(report)


def assumed_heads_text(report: dict[str, Any]) -> str:
    """How lg chose heads the file does not record (`lgcli.arch.declared.conventional_heads`),
    in the numbers the table shows: the rule is stated only where it gives
    the heads shown, so the label cannot contradict the head dim beside it."""
    from ..arch.declared import CONVENTIONAL_HEAD_DIM as usual, conventional_heads

    heads, head_dim = report["heads"], report["head_dim"]
    kv_heads = report.get("kv_heads") or heads
    width, kv_width = heads * head_dim, kv_heads * head_dim
    chosen = f"{counted(heads, 'head')} of {head_dim}"
    if conventional_heads(width, kv_width) != heads:  # not lg's convention (a layout of its own): no rule to state
        return f"assumed: not recorded; lg took {chosen}; pass --heads"
    if head_dim == usual:
        return f"assumed: not recorded; lg took heads {usual} wide, the usual size; pass --heads"
    # Heads of the usual size did not fit: whichever width they did not divide (the queries', else the keys').
    undivided = f"the width {width}" if width % usual else f"the {kv_width} key/value outputs"
    split = "it" if kv_width == width else f"the {width} query and {kv_width} key/value outputs alike"
    # conventional_heads breaks a tie (as near below as above) towards more heads: said only where there was one.
    other = 2 * width // usual - heads if 2 * width % usual == 0 else 0
    tie = ", the larger on a tie" if 0 < other != heads and width % other == 0 \
        and kv_width % (width // other) == 0 else ""
    return (f"assumed: not recorded, and {usual}-wide heads do not divide {undivided}: lg took {chosen}, "
            f"the count nearest {width}/{usual} that divides {split}{tie}; pass --heads")


def _provenance_rows(report: dict[str, Any]) -> list[tuple[str, Any]]:
    rows = []
    for step_number, step in enumerate(report["provenance"]):
        label = "made by" if step_number == 0 else "  from"
        # A source lg did not write records only its name (and no way it was made).
        desc = step.get("method") or step.get("kind") or "not made by lg"
        if step.get("file"):
            desc = f"{step['file']}: {desc}"
        options = dict(step.get("options") or {})
        chosen = options.pop("chosen", None)
        if options:
            desc += " " + json.dumps(options, sort_keys=True)
        rows.append((label, desc))
        if isinstance(chosen, dict):
            rows.append(("  chose", _chosen_text(chosen)))
    return rows


def _chosen_text(chosen: dict[str, Any]) -> str:
    """What a data-aware method kept, in a line (`lg inspect --json` has every index)."""
    return _chosen_parts(chosen) + " (every index: lg inspect --json)"


def _chosen_parts(chosen: dict[str, Any]) -> str:
    if "stages" in chosen:  # a model of stages (Swin): each stage chose its own
        return " | ".join(f"stage {index + 1}: {_chosen_parts(stage)}"
                          for index, stage in enumerate(chosen["stages"]))
    parts = []
    if "kept_layers" in chosen:
        parts.append(f"layers {chosen['kept_layers']}")
    if "kept_heads" in chosen:
        parts.append("heads per layer " + "; ".join(",".join(map(str, h)) for h in chosen["kept_heads"]))
    if "kept_mlp" in chosen:
        parts.append(f"{len(chosen['kept_mlp'][0]) if chosen['kept_mlp'] else 0} MLP neurons per layer")
    if "kept_embed" in chosen:
        parts.append(f"{len(chosen['kept_embed'])} embedding channels")
    return "; ".join(parts)


def _print_rows(title: str, rows: list[tuple[str, Any]]) -> None:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, str(value))
    out_console().print(table, markup=False, highlight=False)


def render_learngene(report: dict[str, Any]) -> None:
    params = report["parameters"]
    condensed = report.get("condensed") or {}
    data = (condensed.get("data") or {}).get("name", "?")
    rows: list[tuple[str, Any]] = [
        ("kind", f"learngene ({report['learngene']})"),
        ("family", report["family"]),
        ("holds", report["holds"]),
        ("auxiliary model", f"{stages_text(report['stages'])}, "
                            + (f"{report['num_classes']} classes" if report.get("num_classes") is not None
                               else str(report.get("task")))) if report.get("stages") else
        ("auxiliary model", f"depth {report['aux_depth']}, width {report['width']}, {counted(report['heads'], 'head')} "
                            + (f"sharing {report['kv_heads']} key/value heads "
                               if report.get("kv_heads") not in (None, report["heads"]) else "")
                            + f"(head dim {report['head_dim']}), MLP {report['mlp_dim']}, "
                            + (f"{report['num_classes']} classes" if report.get("num_classes") is not None
                               else str(report.get("task")))),
    ]
    if report.get("templates"):
        rows.append(("templates", ", ".join(f"{role} {shape}" for role, shape in report["templates"].items())))
    rows += [
        ("parameters", f"{params['total']:,} (per-layer {params['learngene']:,}, globals {params['globals']:,})"),
        ("becomes", report["becomes"]),
    ]
    if isinstance(condensed.get("accuracy"), dict) and isinstance(condensed.get("teacher_accuracy"), dict):
        rows.append(("accuracy", f"{condensed_score(condensed, 'teacher')} as the auxiliary model on {data}"))
    elif isinstance(condensed.get("loss"), dict) and isinstance(condensed.get("teacher_loss"), dict):
        rows.append(("scored", f"{condensed_score(condensed, 'teacher')} as the auxiliary model on {data}"))
    if condensed.get("steps"):
        took = f", {condensed['seconds']:.0f} s" if isinstance(condensed.get("seconds"), (int, float)) else ""
        until = condensed.get("until")
        if isinstance(until, dict) and until.get("stopped"):  # lg condense --until: where and why it stopped
            took += f" (--until {until.get('fraction')}: {until['stopped']})"
        start = (report.get("provenance") or [{}])[0].get("options", {}).get("init")
        if start in ("ancestry", "random"):
            took += ", started from the teacher's weights" if start == "ancestry" else ", from random weights"
        rows.append(("condensed in", f"{condensed['steps']} steps{took}"))
    if report.get("preprocessing"):  # what its descendants' images are prepared by
        rows.append(("preprocessing", _preprocessing_text(report["preprocessing"])))
    rows += [("bytes", f"{report['bytes']:,}"), ("sha256", report["sha256"])]
    rows += _provenance_rows(report)
    _print_rows(report["file"], rows)
    write_data(f"build a model with:\n  {report['expand_call']}\nin Python:\n  import lgcli\n"
               f"  gene = {report['load_call']}\n")


def _stage_rows(stages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A model of stages (Swin): its sizes per stage, in order."""
    return [("stages", str(len(stages))),
            *((label, ", ".join(str(stage[key]) for stage in stages))
              for label, key in (("depths", "depth"), ("widths", "width"), ("heads", "heads")))]


def _preprocessing_text(recipe: dict[str, Any]) -> str:
    """How an image model's images are prepared, and from where: one row of `lg inspect`."""
    def values(numbers: list[float]) -> str:
        return ",".join(f"{v:g}" for v in (numbers[:1] if len(set(numbers)) == 1 else numbers))

    return (f"mean {values(recipe['mean'])}, std {values(recipe['std'])}, {recipe['interpolation']}, "
            f"{recipe['crop_mode']}, crop {recipe['crop_pct']:g} (from {recipe['source']})")


def render_inspect(report: dict[str, Any]) -> None:
    """The table of a model (a learngene's: `render_learngene`) and its load line."""
    if report["kind"] == "learngene":
        render_learngene(report)
        return
    table = Table(title=f"{report['file']}", show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    heads = f"{report['heads']}" + (f" ({assumed_heads_text(report)})" if report["heads_assumed"] else "")
    params = report["parameters"]
    rows = [
        *((("hub id", report["hub"]),) if report.get("hub") else ()),
        ("kind", report["kind"]),
        ("family", report["family"]),
        *(_stage_rows(report["stages"]) if report.get("stages") else
          (("depth", report["depth"]), ("width", report["width"]), ("heads", heads))),
        *((("key/value heads", report["kv_heads"]),) if report.get("kv_heads", report["heads"]) != report["heads"]
          else ()),
        ("head dim", report["head_dim"]),
        ("mlp dim", report["mlp_dim"]),
        *((label, report[key]) for key, label in report["family_fields"] if report[key] is not None),
        ("parameters", f"{params['total']:,} (blocks {params['blocks']:,}, embeddings "
                       f"{params['embeddings']:,}, norm {params['norm']:,}, head {params['head']:,})"),
        ("dtypes", ", ".join(f"{k} {v:,}" for k, v in report["dtypes"].items())),
        *((("preprocessing", _preprocessing_text(report["preprocessing"])),) if report.get("preprocessing") else ()),
        ("bytes", f"{report['bytes']:,}"),
        ("sha256", report["sha256"]),
    ]
    rows += _provenance_rows(report)
    for name, value in rows:
        table.add_row(name, str(value))
    console = out_console()
    console.print(table, markup=False, highlight=False)
    if report["heads_assumed"]:
        # Every split of the width into heads loads strictly: a line with heads lg guessed would build a model
        # that computes another function without a word, and one with a blank to fill would not run as printed.
        write_data(f"load with:\n  the file does not record its attention heads; with the model's own as N, "
                   f"this prints the line: lg inspect {shlex.quote(report['file'])} --heads N\n")
        return
    # Printed plainly so it can be copied as is (rich would wrap it).
    write_data(f"load with:\n  {report['load_imports']}\n  model = " + report["load_call"] + "\n")


# ---- lg methods ----

def methods_command(
    as_json: bool = typer.Option(False, "--json", help="Print the list as JSON instead of tables."),
) -> None:
    """The resize methods and learngene kinds: direction, options and what each does."""
    from ..catalogue import catalogue, print_catalogue

    report = catalogue()
    if as_json:
        print_json(report)
    else:
        print_catalogue(report, table_console())
