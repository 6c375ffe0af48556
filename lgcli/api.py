"""What the command line does, as functions for notebooks and scripts.

    >>> import lgcli
    >>> loaded = lgcli.load("deit_s.safetensors")          # spec + canonical stack
    >>> model, spec = lgcli.load_model("deit_s.safetensors")  # a timm nn.Module
    >>> lgcli.inspect_checkpoint("deit_s.safetensors")["load_call"]
    >>> gene = lgcli.load_learngene("tleg.lg.safetensors")  # a learngene (kind, spec, tensors)

This module only gathers them; each lives in the module of its job:
`lgcli.loading` (reading a model), `lgcli.outputs` (planning an output),
`lgcli.saving` (writing a model), `lgcli.learngene_files` and
`lgcli.inspection` (lg inspect and the load line). Code inside lgcli imports
them from there.
"""

from __future__ import annotations

from .arch import get_adapter
from .inspection import inspect_checkpoint, inspect_learngene, load_line, parameter_counts
from .learngene_files import is_learngene, load_learngene, save_learngene
from .loading import LEARNGENE, MODEL, Loaded, create_model, load, load_model, spec_of_model, task_of
from .outputs import OutputPlan, check_card_file, plan_output, write_card
from .saving import save, save_model

__all__ = ["LEARNGENE", "MODEL", "Loaded", "OutputPlan", "check_card_file", "create_model", "get_adapter",
           "inspect_checkpoint", "inspect_learngene", "is_learngene", "load", "load_learngene", "load_line",
           "load_model", "parameter_counts", "plan_output", "save", "save_learngene", "save_model",
           "spec_of_model", "task_of", "write_card"]
