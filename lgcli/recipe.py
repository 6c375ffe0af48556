"""How a given model wants its images: `preprocessing_of` answers for a
path, a `Checkpoint`, a `Loaded`, a spec or a live model, from what
`lgcli.preprocessing` reads (lg's metadata, a timm pretrained_cfg, a
registered timm model's default, a Hugging Face preprocessor_config.json),
else lg's default, said as assumed. It reads checkpoints and asks a live
model its input, so it sits above `lgcli.loading` and `lgcli.train`; the
recipes themselves are `lgcli.preprocessing`'s.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from .errors import LgError, notify_stderr, shown
from .preprocessing import MODEL_ATTRIBUTE, PREPROCESSING, Overrides, Preprocessing, default_preprocessing


def preprocessing_of(source: Any, *, overrides: Overrides | None = None,
                     notify: Callable[[str], None] = notify_stderr, name: str | None = None) -> Preprocessing | None:
    """How the model `source` wants its images: `source` is a path (or
    `Checkpoint`, `Loaded`), a spec, or a model `lgcli.load_model` built
    (one built otherwise: lg's default, said as assumed). None for a model
    of tokens. `overrides` (--mean, --std, --interpolation) apply over it.

    This is what every command that feeds a model images calls: lg eval,
    bench, condense, grow --data, and a distillation or calibration run
    (`lgcli.images.ImageSet.batch(..., preprocessing=...)` applies it).
    `name`: the model's, for a live one, when the recipe is said to be assumed."""
    found = _found(source, notify)
    if found is not None and found.assumed and not (overrides and overrides.mean and overrides.std):
        why = found.source.split("assumed: ", 1)[-1]  # "X states no preprocessing"
        named = name or _name(source)  # which model, when several are read (lg eval A B)
        why = why if named is None or why.startswith(named) else f"{named}: {why}"
        notify(f"{why}: lg assumes {found.describe()}; give --mean, --std and --interpolation if the model was "
               f"trained otherwise")
    return overrides.apply(found) if overrides and found is not None else found


def _name(source: Any) -> str | None:
    """A path's or read checkpoint's name as lg shows it (None: a spec or a live model)."""
    from .loading import Loaded

    if isinstance(source, Loaded):
        return shown(str(source.checkpoint.source))
    return shown(str(source)) if isinstance(source, (str, os.PathLike)) else None


def _found(source: Any, notify: Callable[[str], None]) -> Preprocessing | None:
    from .loading import Loaded, load
    from .stack import ArchSpec

    if isinstance(source, ArchSpec):
        return source.extras.get(PREPROCESSING)
    if isinstance(source, Loaded):
        return source.spec.extras.get(PREPROCESSING)
    if hasattr(source, "parameters") and callable(source.parameters):  # a model
        found = getattr(source, MODEL_ATTRIBUTE, None)
        if found is not None:
            return found
        from .heads import model_input

        try:
            channels, size = model_input(source)
        except (LgError, AttributeError):
            return None
        return default_preprocessing((channels, size, size), f"lg's default, assumed: the {type(source).__name__} "
                                     f"was not loaded by lg and states no preprocessing", assumed=True)
    return load(source).spec.extras.get(PREPROCESSING)


__all__ = ["preprocessing_of"]
