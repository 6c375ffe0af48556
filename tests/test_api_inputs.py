"""The Python API given a live model where it reads a checkpoint: a
TypeError naming what to do, not a missing file named by the model's repr."""

from __future__ import annotations

import pytest
import timm

import lgcli
from lgcli.resize import resize


@pytest.mark.parametrize("call", [lgcli.load, lgcli.load_model, lgcli.inspect_checkpoint,
                                  lambda model: resize(model, direction="shrink", depth=1)],
                         ids=["load", "load_model", "inspect_checkpoint", "resize"])
def test_a_live_model_where_a_checkpoint_is_read_is_a_type_error_that_says_what_to_do(call):
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=16, depth=2, num_classes=3)
    with pytest.raises(TypeError) as raised:
        call(model)
    message = str(raised.value)
    assert "not a VisionTransformer" in message and "lgcli.spec_of_model(model)" in message
    assert "\n" not in message  # one line, not the model's repr
    spec, _ = lgcli.spec_of_model(model)  # the way it names works
    assert spec.depth == 2
