"""`lg methods`: the resize methods and learngene kinds, read from their
registries (`lgcli.methods.METHODS`, `lgcli.learngenes.KINDS`) and their
declared options (`lgcli.options.Option`), never from a list kept here: a
method or kind added to a registry is listed, options and all.

    >>> from lgcli.catalogue import catalogue
    >>> [method["name"] for method in catalogue()["methods"]]
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.console import Console

from .learngenes import KINDS
from .methods import CALIBRATED_DEFAULTS, DEFAULT_METHODS, FALLBACK_METHODS, GROW, METHODS, SHRINK
from .options import Option
from .tables import Column, print_table

BOTH = "both"


def option_record(option: Option) -> dict[str, Any]:
    """An option as its declaration states it, JSON-ready."""
    return {"name": option.name, "flag": option.flag, "type": option.type.__name__, "default": option.default,
            "choices": list(option.choices) if option.choices else None, "minimum": option.minimum,
            "maximum": option.maximum, "help": option.help}


def direction_of(directions: Sequence[str]) -> str:
    """shrink, grow, or both."""
    return BOTH if set(directions) == {SHRINK, GROW} else directions[0]


def catalogue() -> dict[str, list[dict[str, Any]]]:
    """Every resize method and learngene kind: its direction, its options and
    its one-line description. A learngene builds a model of any size it can
    reach with `lg shrink` or `lg grow` alike: its direction is both."""
    methods = [{"name": method.name, "directions": list(method.directions),
                "direction": direction_of(method.directions),
                "default_for": [direction for direction, name in DEFAULT_METHODS.items() if name == method.name],
                "fallback_for": [direction for direction, name in FALLBACK_METHODS.items() if name == method.name],
                "calibrated_default_for": [axis for axis, name in CALIBRATED_DEFAULTS.items() if name == method.name],
                "description": method.summary, "options": [option_record(option) for option in method.options]}
               for method in METHODS.values()]
    learngenes = [{"name": kind.name, "directions": [SHRINK, GROW], "direction": BOTH, "trains": kind.trains,
                   "description": kind.summary,
                   "condense_options": [option_record(option) for option in kind.condense_options],
                   "grow_options": [option_record(option) for option in kind.expand_options]}
                  for kind in KINDS.values()]
    return {"methods": methods, "learngenes": learngenes}


def shown_option(option: dict[str, Any]) -> str:
    """`--qkv-axis=heads` (as it can be typed), `--template-dim` (no default),
    `--[no-]fit-globals` (a switch): one word, so a table wraps between options."""
    if option["type"] == "bool":
        return f"--[no-]{option['flag'][2:]}"
    return option["flag"] if option["default"] is None else f"{option['flag']}={option['default']}"


def shown_options(options: list[dict[str, Any]]) -> str:
    return " ".join(map(shown_option, options)) or "-"


# The columns after the name: prose, wrapped between words in a narrow terminal.
PROSE = [Column("direction", "left", wrap=True), Column("options", "left", wrap=True),
         Column("what it does", "left", wrap=True)]


def print_catalogue(report: dict[str, list[dict[str, Any]]], console: Console) -> None:
    """Two tables within the console's width: the resize methods, then the learngene kinds."""
    method_rows = []
    for method in report["methods"]:
        # "shrink (default)": lg shrink's default; "both (grow default)": lg grow's;
        # "both (grow default where clone cannot)": the default's fallback.
        defaults = [direction for direction in method["default_for"] if direction != method["direction"]]
        default = (f" ({' and '.join(defaults)} default)" if defaults
                   else " (default)" if method["default_for"] else "")
        for direction in method["fallback_for"]:
            default += f" ({direction} default where {DEFAULT_METHODS[direction]} cannot)"
        for axis in method["calibrated_default_for"]:  # "shrink (default for the depth given calibration data)"
            default += f" (default for the {axis} given calibration data)"
        method_rows.append([method["name"], method["direction"] + default, shown_options(method["options"]),
                            method["description"]])
    print_table(console, "Resize methods: lg shrink SRC --method NAME, lg grow SRC --method NAME",
                [Column("method", "left"), *PROSE], method_rows,
                legend="direction: lg shrink takes a method of shrink or both, lg grow one of grow or both. "
                       "options: the method's own flags, with their defaults (lg grow --help says what each does).")
    console.print()
    kind_rows = [[kind["name"], kind["direction"],
                  f"condense: {shown_options(kind['condense_options'])}\ngrow: {shown_options(kind['grow_options'])}",
                  kind["description"]] for kind in report["learngenes"]]
    print_table(console, "Learngene kinds: lg condense TEACHER --method KIND -o LG, then lg grow LG (or lg shrink LG)",
                [Column("kind", "left"), *PROSE], kind_rows,
                legend="direction: a learngene builds a model of any size it can reach, with lg shrink or lg grow "
                       "alike. condense: flags of lg condense --method KIND; grow: flags of lg grow (or lg shrink) "
                       "on a learngene of the kind, with their defaults (lg condense --help, lg grow --help say "
                       "what each does).")


__all__ = ["catalogue", "print_catalogue", "option_record"]
