"""A learngene builds its descendants on the device its tensors are on.

Condensing on a GPU builds a descendant at every step from the learngene's
tensors on the GPU; a tensor the build makes on the CPU (an index, a
weight) then meets a CUDA one and the run dies at its first step. This
machine has no GPU, so the learngene's tensors go to the meta device: an
operation that mixes them with a CPU tensor fails there the same way
("... is not on the expected device meta"), which is how WAVE's depth
resampling was found broken on a real GPU run (`--depths` with `--widths`).
"""

from __future__ import annotations

import pytest
import timm
import torch

import lgcli
from lgcli.data import load_data
from lgcli.learngenes import get_kind
from lgcli.learngenes.widths import width_spec
from lgcli.sizing import spec_at_depth

# head dim 16: widths 32 (2 heads) and 64 (4 heads); 3 layers, so depths 2-4 resample
TEACHER = dict(depth=3, embed_dim=64, num_heads=4, patch_size=7, img_size=28, in_chans=1, num_classes=10)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **TEACHER)
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


@pytest.mark.parametrize("kind, options", [
    ("tleg", {"widths": "32,64", "depths": "2-4"}),
    ("wave", {"widths": "32,64", "depths": "2-4"}),
    ("wave", {"depths": "2-4"}),
    ("sws", {"widths": "32,64", "depths": "2-4"}),
    ("lets", {"widths": "32,64", "depths": "2-4"}),
])
def test_every_size_a_condense_step_builds_stays_on_the_learngenes_device(teacher, kind, options):
    from lgcli.condense import CondenseSettings, condense

    data = load_data(subset=32, test_subset=16, seed=0)
    learngene, _, _ = condense(teacher, data, method=kind, options=options, notify=lambda message: None,
                               settings=CondenseSettings(steps=1, batch_size=16, progress=False))
    builder = get_kind(kind, learngene.spec)
    on_meta = {name: tensor.to("meta") for name, tensor in learngene.tensors.items()}
    widths = [int(w) for w in options.get("widths", str(learngene.spec.width)).split(",")]
    for width in widths:
        at_width = width_spec(learngene.spec, width) if width != learngene.spec.width else learngene.spec
        for depth in (2, 3, 4):
            stack = builder.build(on_meta, spec_at_depth(at_width, depth))
            built = {**stack.layers, **stack.globals}
            assert built, (kind, depth, width)
            for role, named in built.items():
                assert named.data.device.type == "meta", (kind, depth, width, role)
