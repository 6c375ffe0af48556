"""--until's stopping rule (lgcli.stopping) where the teacher's figure leaves
no fraction to reach, and the metadata writer as strict as its reader: lg
never writes a file it then refuses."""

from __future__ import annotations

import json

import pytest
import timm
import torch

from lgcli.checkpoint.metadata import encode_lg_metadata
from lgcli.errors import LgError
from lgcli.images import TensorImages
from lgcli.stopping import StoppingRule
from lgcli.text import TokenWindows


def _always_class_0() -> torch.nn.Module:
    model = timm.create_model("vit_tiny_patch16_224", img_size=28, patch_size=7, in_chans=1, depth=1, num_classes=3)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))
    return model.eval()


def test_a_teacher_that_scores_0_on_the_held_out_images_is_refused_in_one_line():
    """Every fraction of 0 % is reached at once: the rule would stop at its first check, so it is refused."""
    held_out = TensorImages(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.ones(4, dtype=torch.long))
    with pytest.raises(LgError) as refused:
        StoppingRule(0.9, 2, held_out, _always_class_0(), "cpu", notify=lambda message: None)
    message = str(refused.value)
    assert "the teacher scores 0 % there" in message and "4 held-out images" in message and "\n" not in message
    # The same teacher on images of its class scores 100 %: the rule is made.
    of_its_class = TensorImages(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.zeros(4, dtype=torch.long))
    assert StoppingRule(0.9, 2, of_its_class, _always_class_0(), "cpu", notify=lambda message: None).teacher_figure \
        == 100.0


def test_a_loss_of_exactly_0_is_recorded_as_null_and_the_state_round_trips(monkeypatch):
    """On text the figure is the teacher's loss over the model's: a loss of 0 is a ratio of inf, which JSON lacks."""
    figures = iter([2.0, 0.0])  # the teacher's loss, then the model's
    monkeypatch.setattr(StoppingRule, "_figure", lambda self, model: next(figures))
    windows = TokenWindows.__new__(TokenWindows)
    rule = StoppingRule(0.9, 1, windows, torch.nn.Identity(), "cpu", notify=lambda message: None)
    assert rule.check(0, torch.nn.Identity()) is False
    assert rule.history == [{"step": 0, "of_teacher": None}]
    json.dumps(rule.state_dict()["history"], allow_nan=False)  # the learngene's metadata can hold it
    again = StoppingRule.__new__(StoppingRule)
    again.load_state_dict(rule.state_dict())
    assert again.history == rule.history


def test_metadata_that_json_cannot_hold_is_refused_before_anything_is_written():
    with pytest.raises(ValueError):
        encode_lg_metadata({"learngene": {"condensed": {"until": {"checks": [{"of_teacher": float("inf")}]}}}})
    assert json.loads(encode_lg_metadata({"learngene": {"of_teacher": 0.5}})["lg.learngene"]) == {"of_teacher": 0.5}
