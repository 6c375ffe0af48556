"""Heavy libraries imported on first use, so that what never touches a
tensor (help, usage errors, `lg inspect` of a safetensors file or folder,
an error about a path) answers without paying for them: importing torch
alone takes about 2 s on a loaded machine, and lg's own work before a
tensor is made takes milliseconds.

A module writes ``from ..lazy import torch`` where it would write
``import torch``, and uses it the same way: the first attribute read
(``torch.float32``, ``torch.empty``) imports the library, later reads go
straight to it. Only a module-level use (a class deriving from
``nn.Module``, a constant made of a torch dtype) imports it at once, so such
uses are kept inside functions. The pattern is Scientific Python's SPEC 1
(lazy loading), written out here in a few lines rather than taken as a
dependency. Type checkers see the real modules (the TYPE_CHECKING branch).
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from .errors import check_interrupted, interrupts_held


class LazyModule:
    """Stands for the module `name` until an attribute is read from it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        # Called only for names this object does not have itself: every
        # attribute of the module it stands for.
        if self._module is None:
            # A signal during the import waits for its end (`interrupts_held`),
            # and is raised here if a library swallowed it all the same.
            with interrupts_held():
                module = importlib.import_module(self._name)
            self._module = module
            check_interrupted()
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"


def no_grad(function: Callable[..., Any]) -> Callable[..., Any]:
    """`@torch.no_grad()` for a module-level function, without importing
    torch when the function is defined: gradients are off while it runs."""
    @functools.wraps(function)
    def without_gradients(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return function(*args, **kwargs)

    return without_gradients


if TYPE_CHECKING:
    import numpy as np
    import pywt
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn import functional as F
else:
    torch = LazyModule("torch")
    nn = LazyModule("torch.nn")
    F = LazyModule("torch.nn.functional")
    dist = LazyModule("torch.distributed")
    np = LazyModule("numpy")
    pywt = LazyModule("pywt")

__all__ = ["LazyModule", "no_grad", "torch", "nn", "F", "dist", "np", "pywt"]
