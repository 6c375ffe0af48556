"""A recorded ``lg.config`` of a timm family is checked before any model is
built from it, by the flat families' adapter (`TimmAdapter`: ViT, BEiT)
and the adapter of families of stages (`StagedTimmAdapter`: Swin), which
share the checks of the model's name and its sizes. Each refusal is one
exact line, and the first check a config fails is the one it hears of."""

from __future__ import annotations

import pytest

from lgcli.arch import ADAPTERS
from lgcli.errors import LgError

FIELD = "the file's lg.config field"
WHOLE = "must be a whole number of at least 1"

FLAT_REFUSALS = {
    "not an object": ("beit", [1], "the file's lg.config must be a JSON object, found list"),
    "another model": ("beit", {"model_name": "swin_tiny_patch4_window7_224"},
                      "the file's lg.config names model 'swin_tiny_patch4_window7_224', not 'beit_base_patch16_224'"),
    "a model of no variant": ("vit", {"model_name": "beit_base_patch16_224"},
                              "the file's lg.config names model 'beit_base_patch16_224', not "
                              "'vit_base_patch16_224' or 'deit_base_distilled_patch16_224' or "
                              "'vit_base_patch16_clip_224'"),
    "a name of no string": ("beit", {"model_name": 7}, "the file's lg.config names model 7, not 'beit_base_patch16_224'"),
    "a nested object": ("beit", {"drop_rate": {"a": 1}}, f'{FIELD} drop_rate must be a JSON value, found {{"a": 1}}'),
    "depth 0": ("beit", {"depth": 0}, f"{FIELD} depth {WHOLE}, found 0"),
    "a fractional width": ("beit", {"embed_dim": 1.5}, f"{FIELD} embed_dim {WHOLE}, found 1.5"),
    "heads true": ("beit", {"num_heads": True}, f"{FIELD} num_heads {WHOLE}, found true"),
    "an image size of text": ("beit", {"img_size": "32"}, f"{FIELD} img_size {WHOLE}, found '32'"),
    "negative channels": ("beit", {"in_chans": -1}, f"{FIELD} in_chans {WHOLE}, found -1"),
    "mlp ratio 0": ("beit", {"mlp_ratio": 0}, f"{FIELD} mlp_ratio must be a positive number"),
    "mlp ratio of text": ("vit", {"mlp_ratio": "4"}, f"{FIELD} mlp_ratio must be a positive number"),
    # The first check failed is the one refused.
    "the name before a value": ("beit", {"model_name": "other", "drop_rate": {}},
                                "the file's lg.config names model 'other', not 'beit_base_patch16_224'"),
    "a value before a size": ("beit", {"embed_dim": {}}, f"{FIELD} embed_dim must be a JSON value, found {{}}"),
    "the sizes in order": ("beit", {"mlp_ratio": 0, "in_chans": 0, "depth": 0}, f"{FIELD} depth {WHOLE}, found 0"),
    "a size before the ratio": ("beit", {"mlp_ratio": 0, "embed_dim": 0}, f"{FIELD} embed_dim {WHOLE}, found 0"),
}

STAGED_REFUSALS = {
    "not an object": ([1], "the file's lg.config must be a JSON object, found list"),
    "another model": ({"model_name": "vit_base_patch16_224"},
                      "the file's lg.config names model 'vit_base_patch16_224', not 'swin_tiny_patch4_window7_224'"),
    "width 0": ({"embed_dim": 0}, f"{FIELD} embed_dim {WHOLE}, found 0"),
    "a fractional width": ({"embed_dim": 16.0}, f"{FIELD} embed_dim {WHOLE}, found 16.0"),
    "no depths": ({"depths": []}, f"{FIELD} depths must be a list of whole numbers of at least 1"),
    "a stage of depth 0": ({"depths": [2, 0]}, f"{FIELD} depths must be a list of whole numbers of at least 1"),
    "heads not a list": ({"num_heads": 2}, f"{FIELD} num_heads must be a list of whole numbers of at least 1"),
    "mlp ratio negative": ({"mlp_ratio": -4}, f"{FIELD} mlp_ratio must be a positive number"),
    "a guess of no flag": ({"img_size_assumed": "yes"}, f"{FIELD} img_size_assumed must be true or false"),
    # The first check failed is the one refused.
    "the name before a size": ({"model_name": "other", "embed_dim": 0},
                               "the file's lg.config names model 'other', not 'swin_tiny_patch4_window7_224'"),
    "the width before the stages": ({"depths": [], "embed_dim": 0}, f"{FIELD} embed_dim {WHOLE}, found 0"),
    "the stages before the ratio": ({"mlp_ratio": 0, "num_heads": [0]},
                                    f"{FIELD} num_heads must be a list of whole numbers of at least 1"),
    "the sizes before a flag": ({"img_size_assumed": 1, "mlp_ratio": 0}, f"{FIELD} mlp_ratio must be a positive number"),
}


@pytest.mark.parametrize("family, config, message", FLAT_REFUSALS.values(), ids=FLAT_REFUSALS)
def test_a_flat_family_refuses_a_recorded_config_in_one_exact_line(family, config, message):
    with pytest.raises(LgError) as refused:
        ADAPTERS[family].checked_config(config)
    assert str(refused.value) == message


@pytest.mark.parametrize("config, message", STAGED_REFUSALS.values(), ids=STAGED_REFUSALS)
def test_a_family_of_stages_refuses_a_recorded_config_in_one_exact_line(config, message):
    with pytest.raises(LgError) as refused:
        ADAPTERS["swin"].checked_config(config)
    assert str(refused.value) == message


def test_a_sound_recorded_config_is_accepted_as_it_was_recorded():
    """The flat adapter gives the arguments less the model's name; the
    staged one keeps the config whole (its name is dropped where the model
    is built)."""
    beit = {"model_name": "beit_base_patch16_224", "depth": 2, "embed_dim": 32, "num_heads": 2, "mlp_ratio": 4.0,
            "img_size": 32, "in_chans": 3, "drop_rate": 0.0}
    assert ADAPTERS["beit"].checked_config(beit) == {k: v for k, v in beit.items() if k != "model_name"}
    deit = {"model_name": "deit_base_distilled_patch16_224", "depth": 1}
    assert ADAPTERS["vit"].checked_config(deit) == {"depth": 1}
    swin = {"model_name": "swin_tiny_patch4_window7_224", "embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4],
            "mlp_ratio": 4.0, "img_size_assumed": True}
    assert ADAPTERS["swin"].checked_config(swin) == swin
    assert ADAPTERS["swin"].checked_config(None) == ADAPTERS["beit"].checked_config(None) == {}
