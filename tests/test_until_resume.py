"""--resume under --until: lg condense and lg distill, interrupted right after
any of their training checkpoints and resumed, write the bytes of the
uninterrupted run. The stopping rule's checks, best figure and patience are
in each checkpoint, and the check of the step a checkpoint was written at is
made again on resume, so the resumed run makes the same decisions, records
the same checks, and stops where the uninterrupted one stopped: at the step
of its checkpoint too, when that step reached the goal or ran out of
patience. A checkpoint an earlier lg wrote without the rule's state is
refused in one line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import timm
import torch

import lgcli
from conftest import sharpened_teacher_and_shrink
from lgcli.condense import CondenseSettings, condense_file
from lgcli.data import load_data
from lgcli.distill import DistillSettings, distill_file
from lgcli.errors import LgError

VIT = dict(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
# Checked every 2 steps on the 20 images --until holds out of the 400 trained on.
COMMON = dict(batch_size=16, progress=False, device="cpu", until_every=2)
# Too small a rate to change a weight: the held-out figure stays at step 0's,
# so a rule that cannot reach 1 stops at the third check after it (step 6).
FROZEN = dict(steps=40, lr=1e-12, until=1.0)


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def images():
    return load_data(subset=400, test_subset=16, seed=0)


@pytest.fixture(scope="module")
def models(tmp_path_factory, images):
    """A teacher (a tiny ViT trained a few steps, its head sharpened), its
    shrink to one block, and a random one-block ViT (a student that scores
    below the teacher)."""
    folder = tmp_path_factory.mktemp("until_resume")
    teacher, shrunk = sharpened_teacher_and_shrink(folder, images.train, **VIT)
    torch.manual_seed(1)
    random = folder / "random.safetensors"
    lgcli.save_model(timm.create_model("vit_base_patch16_224", **{**VIT, "depth": 1}).eval(), random)
    return {"teacher": teacher, "shrunk": shrunk, "random": random}


def _runner(command: str, models, images, student: str = "shrunk", init: str = "ancestry"):
    """A function that runs lg condense (a TLEG learngene from `init`) or lg
    distill (of the `student`) to `out` with these settings, and returns its report."""
    def run(out: Path, on_step=None, **settings):
        settings = {**COMMON, **settings}
        if command == "condense":
            return condense_file(models["teacher"], out, method="tleg", data=images, options={"init": init},
                                 settings=CondenseSettings(**settings), on_step=on_step, force=True,
                                 notify=lambda m: None)
        return distill_file(models[student], out, teacher=models["teacher"], data=images, force=True,
                            settings=DistillSettings(**settings), on_step=on_step, notify=lambda m: None)

    return run


def _interrupted_at(step: int):
    def on_step(done: int, model) -> None:
        if done == step:  # killed right after the step's checkpoint, before the step's check
            raise Interrupted

    return on_step


def _resumed(run, tmp_path: Path, at: int, checkpoint_every: int, **settings) -> tuple[Path, dict]:
    """The output and report of a run interrupted after its step-`at` checkpoint, then resumed."""
    checkpoint, out = str(tmp_path / f"at{at}.train.pt"), tmp_path / f"resumed{at}.safetensors"
    with pytest.raises(Interrupted):
        run(out, on_step=_interrupted_at(at), checkpoint=checkpoint, checkpoint_every=checkpoint_every, **settings)
    assert not out.exists()
    report = run(out, checkpoint=checkpoint, resume=True, **settings)
    assert report["resumed_from"] == at
    return out, report


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


ARGS = {"condense": dict(init="random"), "distill": dict(student="random")}


@pytest.mark.parametrize("command", ["condense", "distill"])
def test_patience_carries_over_a_resume_and_a_run_stops_at_its_checkpoint_step(command, models, images, tmp_path):
    """Out of patience at step 6: resumed after step 3 (between checks), 4 (a
    check with one check of patience spent) and 6 (the step it stopped at)."""
    run = _runner(command, models, images, **ARGS[command])
    whole = tmp_path / "whole.safetensors"
    reference = run(whole, **FROZEN)
    assert reference["steps"] == 6 and reference["until"]["stopped"] == "no new best in 3 checks"
    assert [check["step"] for check in reference["until"]["checks"]] == [0, 2, 4, 6]
    for at in (3, 4, 6):
        out, report = _resumed(run, tmp_path, at, 1, **FROZEN)
        assert report["steps"] == 6 and report["until"] == reference["until"], at
        assert _sha256(out) == _sha256(whole), at


@pytest.mark.parametrize("command", ["condense", "distill"])
def test_a_run_that_reached_its_goal_at_its_checkpoint_step_stops_there_when_resumed(command, models, images,
                                                                                      tmp_path):
    run = _runner(command, models, images)
    whole = tmp_path / "whole.safetensors"
    settings = dict(steps=40, lr=1e-12, until=0.01)
    reference = run(whole, **settings)
    assert reference["steps"] == 2 and reference["until"]["stopped"] == "reached 0.01 of the teacher"
    out, report = _resumed(run, tmp_path, 2, 2, **settings)
    assert report["steps"] == 2 and report["until"] == reference["until"]
    assert _sha256(out) == _sha256(whole)


@pytest.mark.parametrize("command", ["condense", "distill"])
def test_a_training_run_resumed_after_any_check_writes_the_uninterrupted_bytes(command, models, images, tmp_path):
    """A rate that trains: whatever the checks find, a run resumed after any
    of them (the last, where it stopped or reached the cap, included) ends
    as the uninterrupted one."""
    run = _runner(command, models, images, **ARGS[command])
    settings = dict(steps=12, lr=1e-2, until=1.0)
    whole = tmp_path / "whole.safetensors"
    reference = run(whole, **settings)
    steps = [check["step"] for check in reference["until"]["checks"]][1:] or [reference["steps"]]
    for at in steps:
        out, report = _resumed(run, tmp_path, at, 2, **settings)
        assert report["until"] == reference["until"], at
        assert _sha256(out) == _sha256(whole), at


@pytest.mark.parametrize("command", ["condense", "distill"])
def test_the_rules_state_is_plain_values_and_a_checkpoint_without_it_is_refused(command, models, images, tmp_path):
    """What torch.load(weights_only=True) reads; a checkpoint written before
    lg kept the rule's state (none under its key) is refused in one line
    before any work, saying why and how to start over."""
    run = _runner(command, models, images, **ARGS[command])
    checkpoint, out = tmp_path / "run.train.pt", tmp_path / "out.safetensors"
    with pytest.raises(Interrupted):
        run(out, on_step=_interrupted_at(4), checkpoint=str(checkpoint), checkpoint_every=2, **FROZEN)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    rule = state["on_step_state"]
    assert [check["step"] for check in rule["history"]] == [0, 2] and rule["since_best"] == 1
    assert isinstance(rule["best"], float) and rule["reason"] == "step cap"
    del state["on_step_state"]
    torch.save(state, checkpoint)
    with pytest.raises(LgError) as refused:
        run(out, checkpoint=str(checkpoint), resume=True, **FROZEN)
    message = str(refused.value)
    assert "\n" not in message and "--until" in message and "--force" in message, message
    assert not out.exists()
