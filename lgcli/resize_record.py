"""What a resize's output records of it in its provenance (`lgcli.save`'s
`method` and `options`): what `lg shrink` / `lg grow` write, and what code
that resizes with `lgcli.resize.resize` and saves with `lgcli.save` hands
on, so that its file says the same (lg distill reads which teacher blocks a
student holds from it)."""

from __future__ import annotations

from typing import Any

from .methods import get_method


def recorded_options(report: dict[str, Any]) -> dict[str, Any]:
    """The options `resize`'s `report` records in the file: its direction
    and method options, heur-lg's and auto-lg's seed, what a data-aware
    method chose (`calibration_record`), the budget a shape was picked for."""
    recorded = {"direction": report["command"], **report["options"]}
    if report["seed"] is not None and report["method"] in ("heur-lg", "auto-lg"):
        recorded["seed"] = report["seed"]
    if get_method(report["method"]).calibrated:
        recorded.update(calibration_record(report))
    if "budget" in report:  # the shape was chosen for a budget: the file says which
        recorded["memory" if report["budget"]["unit"] == "bytes" else "params"] = report["budget"]["budget"]
    return recorded


def calibration_record(report: dict[str, Any]) -> dict[str, Any]:
    """What a data-aware resize records in the file it writes: the
    calibration and what the statistics chose, so that a reader can tell
    which layers, heads and channels of the source it holds."""
    details = report["details"]

    def chosen(part: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in part.items() if key.startswith(("kept_", "dropped_"))}

    if "stages" in details:  # a Swin: one calibration pass, each stage's own choice
        return {"calibration": details["stages"][0]["calibration"],
                "chosen": {"stages": [chosen(stage) for stage in details["stages"]]}}
    return {"calibration": details["calibration"], "chosen": chosen(details)}
