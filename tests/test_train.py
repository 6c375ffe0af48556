"""lgcli.train: schedule, exact resume, DDP equal to one process, accuracy."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import timm
import torch

from lgcli.data import load_data
from lgcli.images import TensorImages
from lgcli.errors import LgError
from lgcli.accuracy import evaluate_accuracy
from lgcli.train import TrainConfig, augment_batch, learning_rate, train


def tiny_vit(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("vit_tiny_patch16_224", depth=2, embed_dim=32, num_heads=2, patch_size=7,
                             img_size=28, in_chans=1, num_classes=10)


@pytest.fixture(scope="module")
def small_train():
    return load_data(subset=96, seed=0).train


def test_learning_rate_warmup_then_cosine_to_zero():
    config = TrainConfig(steps=110, lr=1e-3, warmup_steps=10)
    assert learning_rate(0, config) == pytest.approx(1e-4)
    assert learning_rate(9, config) == pytest.approx(1e-3)
    assert learning_rate(10, config) == pytest.approx(1e-3)
    assert learning_rate(60, config) == pytest.approx(5e-4)  # half-way through the cosine
    assert learning_rate(110, config) == pytest.approx(0.0, abs=1e-12)
    no_warmup = TrainConfig(steps=4, lr=2.0)
    assert [learning_rate(s, no_warmup) for s in range(4)] == pytest.approx(
        [2.0 * 0.5 * (1 + math.cos(math.pi * s / 4)) for s in range(4)])


def test_training_lowers_the_loss(small_train):
    model = tiny_vit()
    result = train(model, small_train, TrainConfig(steps=12, batch_size=32, lr=3e-3, progress=False))
    assert len(result.losses) == 12
    assert sum(result.losses[-3:]) / 3 < sum(result.losses[:3]) / 3


class Stop(Exception):
    pass


def test_resume_ends_with_identical_weights(tmp_path, small_train):
    settings = dict(steps=6, batch_size=32, lr=2e-3, warmup_steps=2, label_smoothing=0.1, augment=True,
                    progress=False, seed=3)
    reference = tiny_vit()
    full = train(reference, small_train, TrainConfig(**settings))

    checkpoint = tmp_path / "run.pt"

    def stop_at_step_4(step, model):
        if step == 4:
            raise Stop  # a run killed right after its step-4 checkpoint

    interrupted = tiny_vit()
    with pytest.raises(Stop):
        train(interrupted, small_train, TrainConfig(**settings, checkpoint_path=str(checkpoint), checkpoint_every=2,
                                                    callback_every=2), on_step=stop_at_step_4)
    # A different initialisation: everything must come from the checkpoint.
    resumed = tiny_vit(seed=99)
    rest = train(resumed, small_train, TrainConfig(**settings, checkpoint_path=str(checkpoint), resume=True))
    assert rest.resumed_from == 4 and rest.losses == full.losses[4:]
    for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_checkpoint_is_not_overwritten_or_resumed_with_other_settings(tmp_path, small_train):
    checkpoint = tmp_path / "run.pt"
    train(tiny_vit(), small_train, TrainConfig(steps=1, batch_size=32, progress=False,
                                               checkpoint_path=str(checkpoint)))
    with pytest.raises(LgError, match="--resume"):
        train(tiny_vit(), small_train, TrainConfig(steps=1, batch_size=32, progress=False,
                                                   checkpoint_path=str(checkpoint)))
    with pytest.raises(LgError, match="lr 0.0005 -> 0.001"):
        train(tiny_vit(), small_train, TrainConfig(steps=1, batch_size=32, lr=1e-3, progress=False,
                                                   checkpoint_path=str(checkpoint), resume=True))
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]  # no temp files left behind


def test_augment_is_seeded_shifts_and_flips():
    images = torch.arange(2 * 1 * 28 * 28, dtype=torch.float32).reshape(2, 1, 28, 28)
    first = augment_batch(images, torch.Generator().manual_seed(0))
    again = augment_batch(images, torch.Generator().manual_seed(0))
    assert torch.equal(first, again) and first.shape == images.shape
    # Every output pixel is either padding (-1) or a pixel of the same image.
    for i in range(2):
        assert set(first[i].unique().tolist()) - {-1.0} <= set(images[i].unique().tolist())


class LabelReader(torch.nn.Module):
    """Reads the label written into pixel (0, 0) and puts logit 1 on it and
    logit 2 on (label + shift) % 10."""

    def __init__(self, shift: int):
        super().__init__()
        self.shift = shift

    def forward(self, images):
        pixel = (images[:, 0, 0, 0] * 0.5 + 0.5) * 255  # undo the [-1, 1] normalisation
        labels = (pixel / 20).round().long()
        logits = torch.zeros(len(labels), 10)
        logits[torch.arange(len(labels)), labels] = 1.0
        logits[torch.arange(len(labels)), (labels + self.shift) % 10] += 2.0
        return logits


def test_evaluate_accuracy_counts_top1_top5_and_loss():
    labels = torch.arange(20) % 10
    images = torch.zeros(20, 1, 4, 4, dtype=torch.uint8)
    images[:, 0, 0, 0] = (labels * 20).to(torch.uint8)
    data = TensorImages(images, labels)
    perfect = evaluate_accuracy(LabelReader(0), data, batch_size=7, image_size=4, channels=1)
    assert perfect["top1"] == 100.0 and perfect["top5"] == 100.0 and perfect["images"] == 20
    second = evaluate_accuracy(LabelReader(1), data, batch_size=7, image_size=4, channels=1)
    assert second["top1"] == 0.0 and second["top5"] == 100.0
    expected_loss = -torch.log_softmax(torch.tensor([1.0, 2.0] + [0.0] * 8), 0)[0].item()
    assert second["loss"] == pytest.approx(expected_loss, rel=1e-6)
    sixth = evaluate_accuracy(LabelReader(5), data, batch_size=7, image_size=4, channels=1)
    assert sixth["top5"] == 100.0  # the label's logit 1 still beats the eight zeros


DDP_WORKER = textwrap.dedent("""
    import json, sys, timm, torch
    import torch.distributed as dist
    from lgcli.data import load_data
    from lgcli.accuracy import evaluate_accuracy
    from lgcli.train import TrainConfig, train
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", depth=2, embed_dim=32, num_heads=2, patch_size=7,
                              img_size=28, in_chans=1, num_classes=10)
    data = load_data(subset=96, test_subset=30, seed=0)
    result = train(model, data.train, TrainConfig(steps=5, batch_size=32, lr=2e-3, warmup_steps=1,
                                                  label_smoothing=0.1, augment=True, progress=False))
    scores = evaluate_accuracy(model, data.test, batch_size=8)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), sys.argv[1] + ".pt")
        json.dump({"losses": result.losses, "scores": scores}, open(sys.argv[1], "w"))
    dist.destroy_process_group()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(DDP_WORKER)
    out = tmp_path / "ddp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(worker), str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ddp = json.loads(out.read_text())

    torch.manual_seed(0)
    model = tiny_vit()
    data = load_data(subset=96, test_subset=30, seed=0)
    single = train(model, data.train, TrainConfig(steps=5, batch_size=32, lr=2e-3, warmup_steps=1,
                                                  label_smoothing=0.1, augment=True, progress=False))
    assert ddp["losses"] == pytest.approx(single.losses, rel=1e-5, abs=1e-6)
    ddp_state = torch.load(str(out) + ".pt")
    for name, tensor in model.state_dict().items():
        assert torch.allclose(tensor, ddp_state[name], atol=1e-5), name
    scores = evaluate_accuracy(model, data.test, batch_size=8)
    assert ddp["scores"]["images"] == 30 and ddp["scores"]["top1"] == pytest.approx(scores["top1"])


@pytest.mark.parametrize("content, message", [
    (b"garbage", "cannot resume from"),
    ({"model": 3}, "not a training checkpoint lg wrote"),
    ({"model": {}, "optimizer": {}, "step": 1, "config": {}}, "settings differ"),
    ("other model", "weights do not fit"),
    ("folder", "not a regular file"),
])
def test_resume_from_a_bad_training_checkpoint_is_one_sentence(tmp_path, small_train, content, message):
    checkpoint = tmp_path / "run.pt"
    if content == "folder":
        checkpoint.mkdir()
    elif content == "other model":  # a real checkpoint of this run's settings, with another model's weights
        settings = dict(steps=1, batch_size=32, progress=False, checkpoint_path=str(checkpoint))
        train(tiny_vit(), small_train, TrainConfig(**settings))
        state = torch.load(checkpoint, weights_only=True)
        state["model"] = {"not.a.weight": torch.zeros(1)}
        torch.save(state, checkpoint)
    elif isinstance(content, bytes):
        checkpoint.write_bytes(content)
    else:
        torch.save(content, checkpoint)
    with pytest.raises(LgError, match=message) as caught:
        train(tiny_vit(), small_train, TrainConfig(steps=1, batch_size=32, progress=False,
                                                   checkpoint_path=str(checkpoint), resume=True))
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- the teacher's logits, kept

class CountingTeacher(torch.nn.Module):
    """A frozen model that counts the images it is shown."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model, self.images = model, 0
        self.patch_embed = model.patch_embed  # model_input reads the image size from it

    def forward(self, x):
        self.images += len(x)
        return self.model(x)


def _distil(student, teacher, data, steps, augment=False):
    from lgcli.losses import distillation_loss

    return train(student, data, TrainConfig(steps=steps, batch_size=8, lr=1e-3, progress=False, augment=augment),
                 loss_fn=distillation_loss(0.5, 1.0), teacher=teacher)


def test_the_teacher_sees_each_image_once_when_nothing_varies_it():
    """32 images in batches of 8: 12 steps are 3 epochs, and the teacher runs in
    the first only; the logits given back are the ones it computed, so the
    student trains as with the teacher run every step (same losses)."""
    data = load_data(subset=32, test_subset=8, seed=0).train
    teacher = CountingTeacher(tiny_vit(1).eval())
    kept = _distil(tiny_vit(0), teacher, data, 12)
    assert teacher.images == 32
    from lgcli import train as train_module

    every_step = train_module.MAX_TEACHER_CACHE_BYTES
    try:
        train_module.MAX_TEACHER_CACHE_BYTES = 0  # nothing kept: the teacher runs every step
        again = CountingTeacher(tiny_vit(1).eval())
        plain = _distil(tiny_vit(0), again, data, 12)
    finally:
        train_module.MAX_TEACHER_CACHE_BYTES = every_step
    assert again.images == 12 * 8
    assert kept.losses == pytest.approx(plain.losses, rel=1e-5, abs=1e-6)


def test_augmented_images_reach_the_teacher_every_step():
    data = load_data(subset=32, test_subset=8, seed=0).train
    teacher = CountingTeacher(tiny_vit(1).eval())
    _distil(tiny_vit(0), teacher, data, 12, augment=True)
    assert teacher.images == 12 * 8
