"""The rows of `lg bench` that resize the ancestry: each training-free
method of `lg methods`, and ``block-ablation+activation``, what `lg shrink
--calibrate DATA` writes without `--method` (`lgcli.calibrated_shrink`).

Each row says which sizes it reaches and builds its model; the bench
distils every one of them at its `--budget` (`lgcli.bench`). The bench
asks this table what a row is instead of testing its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .calibrated_shrink import BENCH_ROW, WIDTH_METHOD, shrunk_in_memory
from .errors import LgError
from .loading import Loaded
from .methods import METHODS, SHRINK


@dataclass(frozen=True)
class ResizeRow:
    """A bench row whose model is the ancestry resized without training."""

    name: str
    method: str | None  # the method it names; None: lg shrink's choice given calibration data
    directions: tuple[str, ...]
    calibrated: bool  # measured on the bench's data (`--calibrate`)

    @property
    def reach_method(self) -> str:
        """The method whose checks say which sizes the row reaches: its own,
        or the calibrated default's last step (activation importance reaches
        every size that shrink does)."""
        return self.method or WIDTH_METHOD

    def unreachable(self, loaded: Loaded, depth: int, width: int) -> str | None:
        """Why the row cannot build this size (what `build` would raise), or
        None: the checks a resize makes before any work."""
        from .methods import get_method, resolve_options
        from .resize import plan_resize
        from .sizing import direction_between, target_spec

        try:
            target = target_spec(loaded.spec, depth=depth, width=width, heads_flag=None)
            direction = direction_between(loaded.spec, target, "the ancestry")
            if direction not in self.directions:
                return f"method '{self.name}' cannot {direction}"
            chosen = get_method(self.reach_method)
            plan_resize(loaded, chosen, resolve_options(chosen, {}), direction=direction, depth=depth, width=width)
        except LgError as exc:
            return str(exc)
        return None

    def build(self, loaded: Loaded, *, depth: int, width: int, seed: int, data_name: str,
              calibrate_samples: int | None, notify: Callable[[str], None]):
        """The resized model (spec, stack) and what building it did: the
        direction, the method and its options, and the blocks a data-aware
        depth step kept."""
        from .resize import resize, resize_file
        from .sizing import check_direction, direction_between, target_spec

        target = target_spec(loaded.spec, depth=depth, width=width, heads_flag=None)
        direction = direction_between(loaded.spec, target, "the ancestry")
        check_direction(loaded.spec, target, direction)
        calibration = {"calibrate": data_name, "calibrate_samples": calibrate_samples} if self.calibrated else {}
        if self.method is None:  # lg shrink --calibrate DATA without --method: the model as it writes it
            if direction not in self.directions:
                raise LgError(f"method '{self.name}' cannot {direction}")  # as `unreachable` says it
            spec, stack, report = shrunk_in_memory(resize_file, loaded, notify, depth=depth, width=width, seed=seed,
                                                   **calibration)
        else:  # a method that cannot go this way is refused by resize, in its words
            spec, stack, report = resize(loaded, direction=direction, depth=depth, width=width, method=self.method,
                                         seed=seed, **calibration)
        details: dict[str, Any] = {"direction": direction, "method": report["method"], "options": report["options"]}
        if calibration:  # the blocks a data-aware depth step kept (the first step of two)
            chose = report["steps"][0]["details"] if "steps" in report else report["details"]
            details["chosen"] = {k: v for k, v in chose.items() if k in ("kept_layers", "dropped_layers")}
        return spec, stack, details


# Every resize row of the bench, by name, in table order.
RESIZE_ROWS: dict[str, ResizeRow] = {
    **{name: ResizeRow(name, name, method.directions, method.calibrated) for name, method in METHODS.items()},
    BENCH_ROW: ResizeRow(BENCH_ROW, None, (SHRINK,), calibrated=True)}


__all__ = ["RESIZE_ROWS", "ResizeRow"]
