"""lg: resize transformer checkpoints and grow learngenes into models of any size.

Everything the `lg` command does is a function here, for notebooks:
`load`, `save`, `load_model`, `save_model`, `create_model`, `inspect_checkpoint`,
`load_learngene`, `save_learngene`; `lgcli.condense` (condense_file),
`lgcli.resize` (resize_file, expand), `lgcli.evaluate`, `lgcli.train`.
"""

__version__ = "0.1.0"

from .api import (Loaded, create_model, inspect_checkpoint, load, load_learngene, load_model,  # noqa: E402
                  save, save_learngene, save_model, spec_of_model)
from .errors import LgError  # noqa: E402
from .stack import ArchSpec, Named, Stack  # noqa: E402

__all__ = ["__version__", "Loaded", "load", "save", "load_model", "save_model", "create_model",
           "load_learngene", "save_learngene",
           "inspect_checkpoint", "spec_of_model", "LgError", "ArchSpec", "Stack", "Named"]
