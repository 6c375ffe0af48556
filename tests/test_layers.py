"""The layers of `lgcli`: every module sits in one layer, and imports (at the
top of its file or inside a function alike) only modules of its own layer or
of a layer below. A function-level import is no way around the order: lower
layers never reach up, so there is no import circle to dodge, and a module
can be read knowing only what lies under it.

A new module goes into LAYERS where its imports put it; the test fails until
it is placed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lgcli"

# Bottom to top. A name is a module (`sizing` is lgcli/sizing.py) or a
# package with everything in it (`arch` is lgcli/arch/*); "lgcli" is the
# package's own __init__.py (the version; see FACADE).
LAYERS: list[tuple[str, ...]] = [
    ("errors", "lazy", "tables", "intervals", "checks", "pace"),  # one-line errors; torch & co. imported on first
                                                          # use; tables that fit; 95 % intervals and ties; settings
                                                          # checks; a long pass's time, said once
    ("run_settings",),                    # what condense's and distill's training runs share
    ("lgcli", "options", "header", "stack", "hub", "preprocessing"),  # the version, declared options, the safetensors header,
                                                     # ArchSpec/Stack, hub ids to cache paths
    ("checkpoint",),                      # bytes: files, pipes, shards, metadata and provenance
    ("arch",),                            # one adapter per family
    ("devices", "heads", "losses"),       # --device and torchrun; a model's head and input; the losses
    ("card",),                            # model cards (README.md) from what a written model records
    ("methods",),                         # training-free resize methods
    ("sizing",),                          # the target sizes a request means, and the limits on them
    ("hints",),                           # the shell text of the hints lg prints (lg shrink ... | lg grow ...)
    ("learngenes",),                      # learngene kinds: condense into tensors, expand to a Stack
    ("catalogue",),                       # the methods and kinds as their registries list them (lg methods)
    ("loading",),                         # reading a model: Loaded, load, load_model, its task
    ("outputs",),                         # planning an output: its form, entries, companions, --card
    ("saving", "learngene_files"),        # writing a model; reading and writing learngene files
    ("inspection",),                      # what lg inspect reports, and the load line
    ("api",),                             # load / save / inspect: the notebook surface, gathered
    ("images",),                          # image data sets in memory or in folders, prepared for a model
    ("data",),                            # the data sets --data names: built-in, IDX, pickles, image folders
    ("accuracy",),                        # an image classifier's accuracy on data
    ("step_memory",),                     # the memory a language model's training step needs
    ("train",),                           # the one training loop
    ("tokenizing",),                      # a model folder's tokenizer, or bytes
    ("text",),                            # text data and language-model evaluation
    ("calibration", "hidden_states"),     # a model's statistics on data, for the data-aware methods; the
                                          # hidden states lg distill matches, block to block
    ("recipe",),                          # how a given model wants its images (reads checkpoints and models)
    ("fitting",),                         # training on data for what a learngene builds
    ("budget",),                          # lg shrink --params/--memory: the request checked, its shape
    ("calibrated_shrink", "resize_record"),  # lg shrink --calibrate without --method: the data-aware steps; what
                                             # a resize's output records of it
    ("stopping",),                        # --until: the held-out split and the rule that stops training
    ("resize", "condense", "evaluate"),   # the commands, as library functions
    ("held_out",),                        # lg distill's held-out figures: the teacher once, the student beside it
    ("distill",),                         # healing a model from a teacher
    ("report",),                          # rendering results: eval tables, curves, figures
    ("bench_settings",),                  # what a bench is asked, its cells, and what its folder may hold
    ("bench_tables",),                    # a bench's results as text, tables and the summary figure
    ("bench_rows",),                      # the bench's resize rows: the sizes each reaches, its model
    ("bench", "bench_plan"),              # the ladder of commands; its --dry-run plan (reads bench's cells)
    ("commands",),                        # each command's flags, call and rendering (a module per group)
    ("cli", "__main__", "datasets"),      # the command line; scripts that make the embedded data
]

# The package's PEP 562 `__getattr__` hands out `lgcli.load`, `lgcli.Stack`,
# ... on first use: the one import that reaches up, by design. Nothing in
# lgcli takes those names through the package (test_no_module_takes_a_facade_name).
FACADE = ("lgcli", "__getattr__")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a module: by its name under lgcli (the first
    part: `lgcli.arch.vit` is `arch`)."""
    name = module.split(".")[1] if "." in module else module
    return next((index for index, layer in enumerate(LAYERS) if name in layer), None)


def imports(module: str, source: str, is_package: bool) -> list[tuple[int, str, str | None, str | None]]:
    """Every import of an lgcli module in `source`: (line, the module
    imported, the name taken from it when that is no module itself, and the
    function the import is in)."""
    tree = ast.parse(source)
    enclosing: dict[int, str] = {}  # node id -> the outermost function it is in (ast.walk goes outside in)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if inner is not node:
                    enclosing.setdefault(id(inner), node.name)
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        function = enclosing.get(id(node))
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None, function) for alias in node.names
                      if alias.name == "lgcli" or alias.name.startswith("lgcli.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target != "lgcli" and not target.startswith("lgcli."):
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in MODULES:
                    found.append((node.lineno, submodule, None, function))
                else:
                    found.append((node.lineno, target, alias.name, function))
    return found


def upward_imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """Each import in `source` (the text of `module`) of a module in a higher layer, in words."""
    own = layer_of(module)
    offences: list[str] = []
    for line, target, _, function in imports(module, source, is_package):
        theirs = layer_of(target)
        if (module, function) == FACADE or theirs is None or own is None or theirs <= own:
            continue
        where = f"inside {function}()" if function else "at the top"
        offence = (f"{module} (layer {own}: {', '.join(LAYERS[own])}) imports {target} "
                   f"(layer {theirs}: {', '.join(LAYERS[theirs])}) on line {line}, {where}")
        if offence not in offences:  # one line importing several names is one offence
            offences.append(offence)
    return offences


def test_every_module_has_a_layer():
    assert {"lgcli.api", "lgcli.sizing", "lgcli.fitting", "lgcli.learngenes.base", "lgcli.cli"} <= set(MODULES)
    assert [module for module in MODULES if layer_of(module) is None] == []


def test_every_layer_names_a_module():
    named = {module.split(".")[1] if "." in module else module for module in MODULES}
    assert [name for layer in LAYERS for name in layer if name not in named] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module):
    path = MODULES[module]
    assert upward_imports(module, path.read_text(), path.name == "__init__.py") == []


def test_no_module_takes_a_facade_name():
    """`from lgcli import load` would reach lgcli.api through the package's
    __getattr__, past the layer check: modules take only what the package
    binds at its top level (its version, LgError)."""
    root = ast.parse(MODULES["lgcli"].read_text())
    defined = {target.id for node in root.body if isinstance(node, ast.Assign) for target in node.targets
               if isinstance(target, ast.Name)}
    defined |= {alias.asname or alias.name for node in root.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert {"__version__", "LgError"} <= defined and "load" not in defined
    taken = [f"{module} takes {name} from lgcli on line {line}"
             for module, path in MODULES.items()
             for line, target, name, _ in imports(module, path.read_text(), path.name == "__init__.py")
             if target == "lgcli" and name is not None and name not in defined]
    assert taken == []


def taken_through_another_module(defining: str) -> list[str]:
    """Each import of a name `defining` defines (a function, a class, a
    constant) from a module that only imported it there too."""
    root = ast.parse(MODULES[defining].read_text())
    own = {node.name for node in root.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    own |= {target.id for node in root.body if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Name)}

    def defines(module: str, name: str) -> bool:
        tree = ast.parse(MODULES[module].read_text())
        return any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name for node in tree.body) \
            or any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                   for node in tree.body)

    return [f"{module} takes {name} from {target} on line {line} (defined in {defining})"
            for module, path in MODULES.items()
            for line, target, name, _ in imports(module, path.read_text(), path.name == "__init__.py")
            if name in own and target not in (defining, "lgcli") and target in MODULES and not defines(target, name)]


def test_the_helpers_of_errors_are_taken_from_errors():
    """`counted`, `shown`, `LgError`, ... come from lgcli.errors, as every
    module takes them, never through a module that imported them."""
    assert taken_through_another_module("lgcli.errors") == []


def test_the_check_finds_an_upward_import():
    # A learngene kind reaching up to a command, at the top or in a function,
    # by absolute or relative import; the same kind's import of stack is fine.
    source = ("from lgcli.stack import Stack\n"
              "from ..resize import expand\n"
              "def fit():\n"
              "    from .. import fitting\n")
    offences = upward_imports("lgcli.learngenes.wave", source)
    assert len(offences) == 2
    assert "imports lgcli.resize" in offences[0] and "line 2, at the top" in offences[0]
    assert "imports lgcli.fitting" in offences[1] and "inside fit()" in offences[1]
    assert upward_imports("lgcli.cli", source) == []


# The most lines a module of lgcli may have: past it, a file holds more than
# one job and is split by job (issue 29).
MAX_LINES = 600


def test_no_module_is_longer_than_600_lines():
    """Every file in lgcli/ is at most MAX_LINES lines, lgcli/arch/ included
    (tests/test_arch_imports.py states it for arch/ too)."""
    long = {str(path.relative_to(PACKAGE)): length for path in MODULES.values()
            if (length := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}
