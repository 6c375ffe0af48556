"""The families under `lgcli/arch/` are declared side by side, not built on
one another: no family module imports another family's module (a family
reaches what it shares with others through the shared toolkit modules
below), and the modules of `arch` import one another without a circle
(imports inside functions and type-only ones included: a circle hidden in a
function or behind TYPE_CHECKING is still one module needing the other to
be read). Also: no file of `arch` is over 600 lines, and the base every
declared family's adapter derives from has at most 25 members."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ARCH = Path(__file__).resolve().parents[1] / "lgcli" / "arch"

# What every family may import: the registry (`__init__`, which imports
# every family to register it), the protocol (`base`), the declared reader
# and writer (`declared`), the Hugging Face declaration (`hf_layout`), reader
# (`hf`) and its image families' adapter (`hf_image`), the timm toolkit
# (`timm`) and its adapters of declared timm families (`timm_family`; of
# stages, `timm_staged`), the
# reader of models of stages (`staged`) and the count of a model's
# parameters (`shapes`). Every other module is a family's.
SHARED = {"__init__", "base", "declared", "hf", "hf_image", "hf_layout", "shapes", "staged", "timm", "timm_family",
          "timm_staged"}
# Modules that are part of a family without being its adapter: the family they belong to.
PART_OF = {"timm_vit_names": "vit"}
MAX_LINES = 600
MAX_BASE_MEMBERS = 25

MODULES = sorted(path.stem for path in ARCH.glob("*.py"))


def family_of(module: str) -> str | None:
    """The family a module belongs to (None: a shared module)."""
    return None if module in SHARED else PART_OF.get(module, module)


def arch_imports(module: str, source: str | None = None) -> set[str]:
    """The `arch` modules `module` imports, anywhere in its file (at the top,
    inside a function, under `if TYPE_CHECKING:`)."""
    tree = ast.parse(source if source is not None else (ARCH / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found |= {alias.name for alias in node.names}
            elif node.level == 0 and (node.module or "").startswith("lgcli.arch."):
                found.add(node.module.split(".")[2])
            elif node.level == 0 and node.module == "lgcli.arch":
                found |= {alias.name for alias in node.names if alias.name in MODULES} or {"__init__"}
            elif node.level == 2 and node.module == "arch":  # from ..arch import x
                found |= {alias.name for alias in node.names if alias.name in MODULES} or {"__init__"}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("lgcli.arch."):
                    found.add(alias.name.split(".")[2])
    found.discard(module)
    return found & set(MODULES)


def cross_family_imports(module: str, imported: set[str]) -> list[str]:
    """The imports of `module` that reach another family's module."""
    own = family_of(module)
    if module == "__init__":
        return []  # the registry imports every family: that is its job
    return sorted(name for name in imported if family_of(name) is not None and family_of(name) != own)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph` (module -> modules it imports), each
    once, as the path from its first module back to it."""
    found, seen = [], set()

    def walk(module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in path:
                circle = path[path.index(target):]
                key = frozenset(circle)
                if key not in seen:
                    seen.add(key)
                    found.append([*circle, target])
            else:
                walk(target, [*path, target])

    for module in sorted(graph):
        walk(module, [module])
    return found


def test_the_modules_are_found_and_sorted():
    assert {"vit", "swin", "hf_swin", "timm", "staged", "declared"} <= set(MODULES)
    families = {family_of(m) for m in MODULES} - {None}
    assert {"vit", "swin", "hf_vit", "hf_swin", "hf_dinov2", "hf_clip", "gpt2", "llama", "bert"} <= families


@pytest.mark.parametrize("module", MODULES)
def test_no_family_module_imports_another_family(module):
    assert cross_family_imports(module, arch_imports(module)) == []


@pytest.mark.parametrize("module", [m for m in MODULES if m in SHARED and m != "__init__"])
def test_no_shared_module_imports_a_family(module):
    """The toolkit is below every family: it names none of them."""
    assert sorted(name for name in arch_imports(module) if family_of(name) is not None) == []


def test_no_import_circle_among_arch_modules():
    graph = {module: arch_imports(module) for module in MODULES}
    assert circles(graph) == []


def test_the_checks_find_what_they_look_for():
    # A family importing another, at the top, in a function and for types only.
    source = ("from typing import TYPE_CHECKING\nfrom .vit import LAYOUT\n"
              "def f():\n    from .hf_vit import VIT_LAYOUT\n"
              "if TYPE_CHECKING:\n    from lgcli.arch.gpt2 import Gpt2Adapter\n")
    imported = arch_imports("swin", source)
    assert cross_family_imports("swin", imported) == ["gpt2", "hf_vit", "vit"]
    assert cross_family_imports("timm_vit_names", {"vit", "timm"}) == []  # a family's own part
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []
@pytest.mark.parametrize("module", MODULES)
def test_no_arch_file_is_over_600_lines(module):
    assert len((ARCH / f"{module}.py").read_text().splitlines()) <= MAX_LINES


def test_the_declared_base_has_at_most_25_members():
    """`declared.DeclaredAdapter`, the base of every declared family (a
    family of stages declares each stage with it): what a new family's
    author reads is short."""
    from lgcli.arch.declared import DeclaredAdapter

    members = [name for name in vars(DeclaredAdapter) if not (name.startswith("__") and name.endswith("__"))]
    assert len(members) <= MAX_BASE_MEMBERS, members
