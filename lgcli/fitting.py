"""Training on data for what a learngene builds: the data a generated model
trains on (`data_for`, condensing's and fitting's alike), and the fitting of
a descendant's trainable part (WAVE's scalers, PEG's map φ) before it is
materialised (`fit_on_data`).

This reads data and trains, so it sits above `lgcli.learngenes`: a kind
never imports it, it is handed the fitting in its `ExpandContext`
(`lgcli.resize.expand` binds `fit_or_say_why_not` to the seed and notify).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .loading import build_model, load
from .sizing import check_heads_known
from .arch.base import IMAGE_CLASSIFICATION, TEXT_ENCODER
from .data import builtin_names, load_data
from .images import ImageData, check_channels
from .errors import LgError, counted, notify_stderr
from .learngenes import Learngene
from .recipe import preprocessing_of
from .text import TextData, builtin_texts, check_data_source, text_data_for
from .devices import auto_device_note, concrete_device
from .losses import distillation_loss
from .train import TrainConfig, train

if TYPE_CHECKING:
    from .learngenes.generated import GeneratedModel


def _teacher_model(path: str):
    """The `teacher` option's model. One whose file records no heads is
    refused (its logits depend on them), with the way to record them: lg
    grow takes no flag for a teacher's heads."""
    loaded = load(path)
    where = loaded.checkpoint.label
    check_heads_known(loaded.spec, because="the teacher's logits depend on them", where=where,
                      remedy=f"record them first, with the teacher's own heads as N: lg grow {shlex.quote(where)} "
                             f"--source-heads N --depth {loaded.spec.depth} --method clone -o TEACHER (its weights, "
                             f"heads recorded), then give --teacher TEACHER")
    return build_model(loaded.spec, loaded.stack)


def fit_or_say_why_not(model: GeneratedModel, learngene: Learngene, options: Mapping[str, Any], what: str,
                       unfitted: str, *, seed: int, notify: Callable[[str], None]) -> dict[str, Any]:
    """Fit `what` on options["data"] when given (and steps > 0); otherwise say
    `unfitted` through `notify`, and how --data would fit it where lg can (a
    text encoder without a language-model head has nothing to fit on:
    `data_for` refuses its --data). Returns the report's fitting entries."""
    if options["data"] is None or options["steps"] == 0:
        notify(unfitted if model.task == TEXT_ENCODER else f"{unfitted}; give --data D to train {what}")
        return {"fitted": False}
    return fit_on_data(model, learngene, options, seed, what)


def fit_on_data(model: GeneratedModel, learngene: Learngene, options: Mapping[str, Any], seed: int,
                what: str) -> dict[str, Any]:
    """Train a descendant's trainable tensors (the learngene's stay frozen)
    on options["data"]: CE, plus KD from options["teacher"]. A text
    learngene's data are tokenized with the tokenizer it carries from its
    ancestry. Returns what the fit did (the loss at the start and the end)."""
    checkpoint = learngene.checkpoint
    data = data_for(model, options["data"], f"the {learngene.kind} learngene's descendant",
                    companions=checkpoint.companions if checkpoint is not None else {},
                    where=checkpoint.label if checkpoint is not None else "the learngene",
                    subset=options["subset"], seed=seed, fitting=what)
    teacher = _teacher_model(options["teacher"]) if options["teacher"] is not None else None
    alpha = options["alpha"] if teacher is not None else 0.0
    device_note = auto_device_note(options["device"])
    if device_note:
        notify_stderr(device_note)
    config = TrainConfig(steps=options["steps"], batch_size=options["batch_size"], lr=options["lr"],
                         warmup_steps=options["steps"] // 10, seed=seed,
                         device=concrete_device(options["device"]),
                         description=f"fitting {what}")
    # The images prepared as the learngene says (its teacher's recipe, --mean ... over it: `resize.expand`).
    result = train(model, data.train, config, loss_fn=distillation_loss(alpha, options["tau"]), teacher=teacher,
                   preprocessing=preprocessing_of(learngene.spec))
    model.cpu()
    window = max(1, min(10, len(result.losses) // 5))
    return {"fitted": True, "data": data.describe(), "steps": result.steps, "lr": options["lr"],
            "teacher": options["teacher"], "alpha": alpha,
            "loss_first": sum(result.losses[:window]) / window,
            "loss_last": sum(result.losses[-window:]) / window}


def check_fit_data(learngene: Learngene, options: Mapping[str, Any]) -> None:
    """What a dry run checks of the data a fit would read (options["data"]),
    reading none: that it names something, of the kind the descendant takes,
    refused in the words the run would use."""
    if options.get("data") is None or options.get("steps") == 0:
        return
    from .arch import get_adapter

    check_data_source(options["data"])
    task = get_adapter(learngene.spec.family).task(learngene.spec)
    _refuse_wrong_kind(task, options["data"], f"the {learngene.kind} learngene's descendant")


def _refuse_wrong_kind(task: str, data: Any, name: str) -> None:
    """A text for an image classifier, images for a language model."""
    if task == IMAGE_CLASSIFICATION:
        if isinstance(data, TextData) or (isinstance(data, str) and data in builtin_texts()):
            raise LgError(f"--data {getattr(data, 'name', data)} is a text; {name} is an image classifier")
    elif isinstance(data, ImageData) or (isinstance(data, str) and data in builtin_names()):
        raise LgError(f"{getattr(data, 'name', data)} is an image dataset; {name} is a language model")


def data_for(model: GeneratedModel, data: Any, name: str, *, companions: Mapping[str, Any], where: str,
             subset: Any = None, test_subset: Any = None, test_fraction: float | None = None, seed: int = 0,
             fitting: str = "it", notify: Callable[[str], None] = notify_stderr, seq_len: int | None = None) -> Any:
    """The data a generated model trains on, for what its family's model
    does: images with its classes (an `ImageData`, or a folder or built-in
    name), or text windows for a language model (a `TextData`, or a file,
    folder or built-in text, tokenized with the tokenizer in `companions`).
    `name` says whose data they are in errors."""
    task = model.task
    if task == IMAGE_CLASSIFICATION:
        _refuse_wrong_kind(task, data, name)
        if not isinstance(data, ImageData):
            data = load_data(data, subset=subset, test_subset=test_subset, seed=seed,
                             **({} if test_fraction is None else {"test_fraction": test_fraction}))
        check_channels(data, model.input_size[0])
        classes = int(model.adapter.num_classes(model.spec) or 0)
        if data.num_classes != classes:
            raise LgError(f"{name} has {counted(classes, 'class')} and {data.name} has {data.num_classes}: fit "
                          f"{fitting} on data with the same classes")
        return data
    if task == TEXT_ENCODER:
        raise LgError(f"{name} is a text encoder without a language-model head: it has no logits to train on "
                      f"(give its masked-LM checkpoint, e.g. BertForMaskedLM)")
    _refuse_wrong_kind(task, data, name)
    return text_data_for([(name, model, companions, where)], task, data, seq_len=seq_len, subset=subset,
                         test_subset=test_subset, test_fraction=test_fraction, seed=seed, notify=notify)
