"""The scripts that re-create the example models (README.md "Examples")
start: each one's --help runs, so an import that moved inside lgcli
breaks this test rather than the command the README prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda path: path.name)
def test_the_example_script_starts(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                          cwd=script.parents[1])
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr[-2000:]
