"""Training-free resize methods, one module each, and their registry.

A method is ``run(stack, source_spec, target_spec, options, context) ->
MethodResult``: it sees the canonical Stack only (named axes, no key names)
and returns the target-sized Stack plus a JSON-ready report of what it did.
`lgcli.resize` checks the request, resolves options and writes the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import LgError
from ..stack import ArchSpec, Stack
from . import bot, clone, layers, select, tleg_fit
from .common import MethodContext, MethodResult

GROW, SHRINK = "grow", "shrink"
DIRECTIONS = (GROW, SHRINK)


@dataclass(frozen=True)
class Method:
    name: str
    run: Callable[[Stack, ArchSpec, ArchSpec, dict[str, Any], MethodContext], MethodResult]
    directions: tuple[str, ...]
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # option -> allowed values (None: checked by `validate`)
    choices: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    # (options, source, target, direction) -> None; raises LgError early
    validate: Callable[[dict[str, Any], ArchSpec, ArchSpec, str], None] | None = None


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("bot", bot.bot, (SHRINK, GROW),
           "BoT: wavelet approximation band (shrink) / zero-detail inverse DWT (grow)",
           bot.DEFAULTS, bot.CHOICES,
           lambda options, source, target, direction: bot.validate(options, source, direction)),
    Method("select", select.select, (SHRINK,),
           "weight selection: first-N layers, uniformly spaced elements", select.DEFAULTS, select.CHOICES),
    Method("heur-lg", layers.heur_lg, (SHRINK, GROW),
           "Heur-LG: the last N source layers on top, random layers below",
           layers.DEFAULTS, layers.CHOICES),
    Method("auto-lg", layers.auto_lg, (SHRINK, GROW),
           "Auto-LG: the first N source layers at the bottom, random layers above",
           layers.DEFAULTS, layers.CHOICES),
    Method("clone", clone.clone, (GROW,),
           "function-preserving growth: tiled width, identity blocks for depth",
           clone.DEFAULTS, clone.CHOICES,
           lambda options, source, target, direction: clone.validate(source, target)),
    Method("tleg-fit", tleg_fit.tleg_fit, (SHRINK, GROW),
           "least-squares TLEG line per element over depth, evaluated at the new depth",
           tleg_fit.DEFAULTS, tleg_fit.CHOICES),
)}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise LgError(f"unknown method '{name}' (known: {', '.join(METHODS)})") from None


def resolve_options(method: Method, given: Mapping[str, Any]) -> dict[str, Any]:
    """The method's defaults updated with the options given (None = not given);
    an option the method does not take, or a value outside its choices, is an
    error."""
    options = dict(method.defaults)
    for name, value in given.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if name not in method.defaults:
            takes = ", ".join("--" + o.replace("_", "-") for o in method.defaults) or "no options"
            raise LgError(f"{flag} does not apply to method '{method.name}' (it takes {takes})")
        allowed = method.choices.get(name)
        if allowed is not None and value not in allowed:
            raise LgError(f"{flag} must be one of {', '.join(allowed)}, not '{value}'")
        options[name] = value
    return options


__all__ = ["METHODS", "Method", "MethodContext", "MethodResult", "get_method", "resolve_options",
           "GROW", "SHRINK", "DIRECTIONS"]
