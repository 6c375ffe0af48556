"""Training-free resize methods, one module each, and their registry.

A method is ``run(stack, source_spec, target_spec, options, context) ->
MethodResult``: it sees the canonical Stack only (named axes, no key names)
and returns the target-sized Stack plus a JSON-ready report of what it did.
Each module declares its `Method` record, options included; this registry
only lists them. `lgcli.resize` checks the request, resolves options and
writes the result.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..errors import UsageError
from ..options import resolve_options as resolve_declared
from ..stack import ArchSpec
from . import activation, angular, block_ablation, block_influence, bot, clone, depth_upscale, identity_insert, layers, select, stacking, tleg_fit
from .calibrated import CALIBRATION_NEEDED
from .common import GROW, SHRINK, Method, MethodContext, MethodResult

METHODS: dict[str, Method] = {m.name: m for m in (
    bot.METHOD, select.METHOD, layers.HEUR_LG, layers.AUTO_LG, clone.METHOD, tleg_fit.METHOD,
    block_influence.METHOD, angular.METHOD, block_ablation.METHOD, activation.METHOD,
    depth_upscale.METHOD, identity_insert.METHOD, stacking.METHOD)}


# The methods `lg shrink` and `lg grow` use when --method is not given, chosen
# by `lg bench` on the example model and on the real DINOv2-S (docs/methods.md
# "Defaults"): across sizes, on instinct and final accuracy both. A grow
# clones (the function kept) where clone reaches the size, and falls back to
# auto-lg where it does not (a width that is no whole multiple of a BERT, CLIP,
# Swin or timm ViT with norm_pre): on a real model auto-lg's random channels
# leave it at chance (10.0 % against 86.3 %).
DEFAULT_METHODS = {SHRINK: "select", GROW: "clone"}
FALLBACK_METHODS = {GROW: "auto-lg"}
# A shrink given --calibrate and no --method measures each axis that changes
# by its method, both in turn when both change (`lgcli.calibrated_shrink`;
# docs/methods.md "Without --method": measured on SmolLM2 and the real DINOv2-S).
CALIBRATED_DEFAULTS = {"depth": "block-ablation", "width": "activation"}


# The methods of each direction, as `lg shrink` and `lg grow` list them for
# --method: the default first, then the registry's order.
RESIZE_METHODS: dict[str, tuple[str, ...]] = {
    direction: (DEFAULT_METHODS[direction], *(name for name, m in METHODS.items()
                                              if direction in m.directions and name != DEFAULT_METHODS[direction]))
    for direction in (SHRINK, GROW)}


def default_method(direction: str, refusal: Callable[[str], str | None] = lambda name: None,
                   notify: Callable[[str], None] = lambda message: None) -> str:
    """The default for `direction`; `refusal(name)` says why a method cannot
    make the size asked (None: it can), and then the direction's fallback is
    taken, said with that reason: the default (clone) keeps the function and
    the fallback does not, which a user must not learn from the logits."""
    method = DEFAULT_METHODS[direction]
    why = refusal(method) if direction in FALLBACK_METHODS else None
    if why is None:
        return method
    fallback = FALLBACK_METHODS[direction]
    if refusal(fallback) is None:  # a request no method can make is refused once, by the fallback, unannounced
        notify(f"{direction}: {method}, the default, cannot make this size ({why}); {fallback} instead, which "
               f"does not keep the function")
    return fallback


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise UsageError(f"unknown method '{name}' (known: {', '.join(METHODS)})") from None


def checked_request(name: str, direction: str, given: Mapping[str, Any]) -> tuple[Method, dict[str, Any]]:
    """A named method and its options, checked before any model is read: it
    resizes this way, takes the options given (each in its range), and has
    calibration data where it measures the model."""
    method = get_method(name)
    if direction not in method.directions:
        raise UsageError(f"method '{name}' cannot {direction} (it can: {', '.join(method.directions)})")
    options = resolve_options(method, given)
    if method.calibrated and options.get("calibrate") is None:
        raise UsageError(CALIBRATION_NEEDED)
    return method, options


def resolve_options(method: Method, given: Mapping[str, Any]) -> dict[str, Any]:
    """The method's declared defaults updated with the options given (None =
    not given); an option the method does not take is an error."""
    return resolve_declared(f"method '{method.name}'", method.options, given)


def source_layers(method: Method, details: Mapping[str, Any], source: ArchSpec,
                  target: ArchSpec) -> list[int | None] | None:
    """The source layer each target layer holds, as the method's report (`details`) records it: what a family
    whose config states something per layer (Qwen2's attention kinds) writes each layer's from
    (`arch.base.with_layer_sources`). A depth-only method's copies (`layers`), a data-aware one's kept layers,
    heur-lg's and auto-lg's inherited ones (None for their random layers, which hold none), clone's plan (an
    identity block copies the layer it follows), weight selection's first N. None where a target layer is
    no one source layer (BoT and tleg-fit blend them) and on a model of stages (a report per stage)."""
    if source.stages:
        return None
    for copied in ("layers", "kept_layers"):
        if copied in details:
            return list(details[copied])
    if "inherited" in details:
        inherited = {int(layer): held for layer, held in details["inherited"].items()}
        return [inherited.get(layer) for layer in range(target.depth)]
    if method is clone.METHOD:
        return [layer for layer, _ in clone.insertion_plan(source.depth, target.depth, details["insert"])]
    return list(range(target.depth)) if method.keeps_first_layers else None


__all__ = ["METHODS", "CALIBRATED_DEFAULTS", "DEFAULT_METHODS", "FALLBACK_METHODS", "RESIZE_METHODS", "default_method", "Method", "MethodContext",
           "MethodResult", "get_method", "resolve_options", "checked_request", "source_layers",
           "GROW", "SHRINK"]
