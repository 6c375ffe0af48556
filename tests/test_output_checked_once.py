"""An output path and its --card file are checked once, before any work, by
the command that was given them (issue 29): planning and saving take the
checked output as it is. The only other look at the path is the writer's own
guard at the moment of writing (a file that appeared since), which is
counted apart here."""

from __future__ import annotations

import inspect
import sys
from collections import Counter

import pytest

import lgcli.checkpoint.destination as destination
from conftest import make_vit, write_plain
from lgcli.api import load
from lgcli.errors import LgError
from lgcli.outputs import checked_output, plan_output
from lgcli.resize import resize_file
from lgcli.saving import save

# Imported above, before any test patches `check_output`: a module imported
# while it is patched would keep the patched function after the test.


@pytest.fixture
def checks(monkeypatch):
    """Every call of `check_output` made from lgcli, by path, counted apart
    for the writer (`lgcli.checkpoint.writing`) and for everything else."""
    original = destination.check_output
    counted: dict[str, Counter] = {"before": Counter(), "writer": Counter()}

    def counting(path, *args, **kwargs):
        caller = inspect.stack()[1].frame.f_globals.get("__name__", "")
        counted["writer" if caller == "lgcli.checkpoint.writing" else "before"][str(path)] += 1
        return original(path, *args, **kwargs)

    for name, module in list(sys.modules.items()):  # every module that imported the function by name
        if name.startswith("lgcli") and getattr(module, "check_output", None) is original:
            monkeypatch.setattr(module, "check_output", counting)
    return counted


def test_a_resize_checks_its_output_and_card_once(checks, tmp_path):

    source = write_plain(make_vit(), tmp_path / "vit.safetensors")
    output, card = tmp_path / "small.safetensors", str(tmp_path / "small.md")
    resize_file(source, output, direction="shrink", depth=2, method="select", card_file=card,
                notify=lambda message: None)
    assert checks["before"] == Counter({str(output): 1, card: 1})
    assert checks["writer"] == Counter({str(output): 1})  # the guard as the file is written
    assert output.exists() and (tmp_path / "small.md").exists()


def test_a_dry_run_checks_its_output_once_and_writes_nothing(checks, tmp_path):

    source = write_plain(make_vit(), tmp_path / "vit.safetensors")
    output = tmp_path / "small.safetensors"
    plan = resize_file(source, output, direction="shrink", depth=2, method="select", dry_run=True,
                       notify=lambda message: None)
    assert plan["dry_run"] and checks["before"] == Counter({str(output): 1}) and not checks["writer"]
    assert not output.exists()


def test_save_called_alone_still_checks_its_output(checks, tmp_path):
    """`lgcli.save` given a path (not a checked output) checks it itself, once."""

    loaded = load(str(write_plain(make_vit(), tmp_path / "vit.safetensors")))
    output = tmp_path / "copy.safetensors"
    save(output, loaded.spec, loaded.stack, source=loaded)
    assert checks["before"] == Counter({str(output): 1})
    with pytest.raises(LgError, match="exists; pass --force"):
        save(output, loaded.spec, loaded.stack, source=loaded)



def test_plan_output_reads_force_for_a_path_and_takes_a_checked_output_as_it_is(checks, tmp_path):
    """`lgcli.plan_output` given a path checks it, overwriting only with
    `force`; given a `CheckedOutput` it checks no path again (that output
    was checked with its own force), so its callers pass none."""

    loaded = load(str(write_plain(make_vit(), tmp_path / "vit.safetensors")))
    taken = tmp_path / "taken.safetensors"
    taken.write_bytes(b"not lg's")
    with pytest.raises(LgError, match="exists; pass --force"):
        plan_output(taken, loaded.spec, loaded.stack, source=loaded)
    assert plan_output(taken, loaded.spec, loaded.stack, source=loaded, force=True).form(taken) == "file"
    assert checks["before"] == Counter({str(taken): 2})
    target = checked_output(taken, force=True)
    plan = plan_output(target, loaded.spec, loaded.stack, source=loaded)
    assert plan.form(taken) == "file" and checks["before"] == Counter({str(taken): 3})
    assert taken.read_bytes() == b"not lg's"  # planned, never written

def test_a_folder_name_for_a_one_file_model_is_still_refused_before_writing(tmp_path):
    """The form check that only the plan can make (a folder name for a model
    written as one file) still runs once the path was checked."""

    source = write_plain(make_vit(), tmp_path / "vit.safetensors")
    with pytest.raises(LgError, match="names a folder; this model is one file"):
        resize_file(source, str(tmp_path / "out") + "/", direction="shrink", depth=2, method="select",
                    notify=lambda message: None)
    assert not (tmp_path / "out").exists()
