"""lg: resize transformer checkpoints and grow learngenes into models of any size.

Everything the `lg` command does is a function here, for notebooks:
`load`, `save`, `load_model`, `save_model`, `create_model`, `inspect_checkpoint`,
`load_learngene`, `save_learngene`; `lgcli.condense` (condense_file),
`lgcli.resize` (resize_file, expand), `lgcli.evaluate`, `lgcli.train`.

The names are imported on first use (PEP 562), so `import lgcli` and
`lg --help` do not pay for torch.
"""

__version__ = "0.1.0"

from .errors import LgError  # noqa: E402  (torch-free)

_API_NAMES = ("Loaded", "create_model", "inspect_checkpoint", "load", "load_learngene", "load_model",
              "save", "save_learngene", "save_model", "spec_of_model")
_STACK_NAMES = ("ArchSpec", "Named", "Stack")


def __getattr__(name: str):
    if name in _API_NAMES:
        from . import api

        return getattr(api, name)
    if name in _STACK_NAMES:
        from . import stack

        return getattr(stack, name)
    raise AttributeError(f"module 'lgcli' has no attribute {name!r}")


__all__ = ["__version__", "Loaded", "load", "save", "load_model", "save_model", "create_model",
           "load_learngene", "save_learngene",
           "inspect_checkpoint", "spec_of_model", "LgError", "ArchSpec", "Stack", "Named"]
