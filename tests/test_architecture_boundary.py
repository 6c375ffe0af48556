"""The family boundary: outside `lgcli/arch/`, no module imports a family's
library, names a family, or reads a family's own configuration fields. Shared
code reaches a family only through its adapter (`lgcli.arch.base.FamilyAdapter`),
so a new family is one adapter, not edits across the tool."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lgcli.arch import ADAPTERS

PACKAGE = Path(__file__).resolve().parents[1] / "lgcli"
FAMILY_LIBRARIES = {"timm", "transformers"}
# Fields of one family's configuration or model (a ViT's patches and images).
FAMILY_FIELDS = {"patch_size", "patch_embed", "img_size", "in_chans", "global_pool"}
SHARED = sorted(p for p in PACKAGE.rglob("*.py") if "arch" not in p.relative_to(PACKAGE).parts)


def offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.split(".")[0] in FAMILY_LIBRARIES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FAMILY_LIBRARIES:
            found.append(f"imports from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr in FAMILY_FIELDS:
            found.append(f"reads .{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in ADAPTERS or node.value in FAMILY_FIELDS:
                found.append(f"names {node.value!r} (line {node.lineno})")
    return found


def test_the_shared_modules_are_found():
    names = {p.name for p in SHARED}
    assert {"api.py", "cli.py", "resize.py", "evaluate.py", "train.py", "stack.py"} <= names


@pytest.mark.parametrize("path", SHARED, ids=[str(p.relative_to(PACKAGE)) for p in SHARED])
def test_no_shared_module_knows_a_family(path):
    assert offences(path) == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import timm\nfrom transformers import AutoModel\nx = model.patch_embed\nf = 'vit'\n")
    assert len(offences(bad)) == 4
