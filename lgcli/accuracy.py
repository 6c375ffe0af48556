"""An image classifier's accuracy on data: top-1, top-5 and loss, shared out
over the processes of a distributed run."""

from __future__ import annotations


from lgcli.checks import check_whole
from lgcli.images import ImageSet
from lgcli.lazy import F, no_grad, torch
from lgcli.pace import PassPace
from lgcli.preprocessing import Preprocessing
from lgcli.devices import autocast, distributed_setup, resolve_device
from lgcli.heads import image_logits, model_input, model_preprocessing


@no_grad
def evaluate_accuracy(model: torch.nn.Module, data: ImageSet, *, batch_size: int = 256, device: str = "cpu",
                      image_size: int | None = None, channels: int | None = None,
                      preprocessing: Preprocessing | None = None, examples: list | None = None,
                      pace: PassPace | None = None) -> dict[str, float]:
    """Top-1, top-5 (top-k for k = min(5, classes)) and mean cross-entropy on
    all of `data`, its images prepared as `preprocessing` says (default: the
    model's own, `model_preprocessing`). Under DDP each process scores a
    share and the totals are summed, so every process returns the same figures.
    `examples`, a list, gets each image's top-1 (100 or 0) of this process's
    share, in order: what a bootstrap over test examples resamples
    (`lgcli.intervals`). `pace` says how long the pass takes when that is long."""
    batch_size = check_whole(batch_size, "the evaluation batch size", 1)
    distributed = distributed_setup(device)
    target = resolve_device(device, distributed)
    if channels is None or image_size is None:
        model_channels, model_size = model_input(model)
        channels, image_size = channels or model_channels, image_size or model_size
    preprocessing = preprocessing or model_preprocessing(model)
    was_training = model.training
    model.to(target).eval()
    totals = torch.zeros(4, dtype=torch.float64)  # correct@1, correct@k, loss sum, count
    indices = list(range(distributed.rank, len(data), distributed.world_size))
    if pace is not None:
        pace.begin(len(indices), batch_size, "test images")
    for start in range(0, len(indices), batch_size):
        images, labels = data.batch(indices[start:start + batch_size], image_size, channels, preprocessing)
        images, labels = images.to(target), labels.to(target)
        with autocast(target):
            logits = image_logits(model(images)).float()
        first, top_k, loss = label_totals(logits, labels)
        if examples is not None:
            examples.extend((100.0 * first.double()).tolist())
        totals += torch.tensor([first.sum().item(), top_k, loss, len(labels)], dtype=torch.float64)
        if pace is not None:
            pace.batch_done()
    totals = distributed.sum(totals)
    model.train(was_training)
    count = max(totals[3].item(), 1.0)
    return {"top1": 100.0 * totals[0].item() / count, "top5": 100.0 * totals[1].item() / count,
            "loss": totals[2].item() / count, "images": int(totals[3].item())}


def label_totals(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int, float]:
    """One batch's part of the figures: whether each image's label is its
    top-1 (a bool per image), how many labels are in their top-k (k =
    min(5, classes)), and the summed cross-entropy."""
    hits = logits.topk(min(5, logits.shape[-1]), dim=-1).indices == labels[:, None]
    return hits[:, 0], int(hits.any(-1).sum()), float(F.cross_entropy(logits, labels, reduction="sum"))
