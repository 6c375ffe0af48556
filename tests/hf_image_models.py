"""Helpers the Hugging Face image-folder tests share (ViT, DeiT, DINOv2,
CLIP's vision tower): tiny models with non-trivial weights, their folders
built once per test module, strict loads, and lg's round trip of a folder."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import torch
import transformers
from safetensors import safe_open

import lgcli
from lgcli.api import save


def non_trivial(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """The model with every parameter made non-trivial, in eval mode: with
    transformers' init (unit norms and layer scales, zero biases and tokens)
    a wrong mapping of those tensors would go unnoticed in the outputs."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1 and ("norm" in name or "lambda" in name):
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.add_(0.05 * torch.randn_like(param))
    return model.eval()


def folder_builder(tmp_path_factory, make: Callable[[str], torch.nn.Module],
                   processor) -> Callable[[str], tuple[Path, torch.nn.Module]]:
    """variant -> (its source folder, the model it holds), each built once:
    `make(variant)` saved with `processor`'s preprocessor_config.json (or
    `processor(variant)`'s: a grayscale model's states one mean and std)."""
    made: dict[str, tuple[Path, torch.nn.Module]] = {}

    def get(variant: str) -> tuple[Path, torch.nn.Module]:
        if variant not in made:
            folder = tmp_path_factory.mktemp(variant) / "src"
            model = make(variant)
            model.save_pretrained(folder)
            (processor if hasattr(processor, "save_pretrained") else processor(variant)).save_pretrained(folder)
            made[variant] = folder, model
        return made[variant]

    return get


def weights(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {key: f.get_tensor(key) for key in f.keys()}


def load_strict(folder: Path, model_class: str) -> torch.nn.Module:
    """from_pretrained with its loading report: nothing missing, unexpected or mismatched."""
    model, info = getattr(transformers, model_class).from_pretrained(folder, output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    assert not problems, f"{folder}: {problems}"
    return model.eval()


def written_back(src: Path, out: Path, family: str) -> None:
    """lg reads the folder (as `family`) and writes it to `out` bit for bit:
    the same keys, dtypes and bytes, and the same config.json."""
    loaded = lgcli.load(src)
    assert loaded.spec.family == family
    save(out, loaded.spec, loaded.stack, source=loaded)
    written, source = weights(out), weights(src)
    assert sorted(written) == sorted(source)
    for key, tensor in source.items():
        assert written[key].dtype == tensor.dtype and written[key].shape == tensor.shape, key
        assert written[key].view(torch.uint8).equal(tensor.view(torch.uint8)), key
    assert json.loads((out / "config.json").read_text()) == json.loads((src / "config.json").read_text())


def resizes(narrow: int, wide: int) -> dict[str, tuple[str, ...]]:
    """The training-free resizes every image family is tested with: to one
    layer at width `narrow`, and to three at width `wide`."""
    shrink = ("shrink", "--depth", "1", "--width", str(narrow))
    grow = ("grow", "--depth", "3", "--width", str(wide))
    return {"shrink-select": (*shrink, "--method", "select"), "shrink-bot": (*shrink, "--method", "bot"),
            "grow-bot": (*grow, "--method", "bot"), "grow-auto-lg": (*grow, "--method", "auto-lg"),
            "grow-clone": (*grow, "--method", "clone")}


def resized_configs(lg, src: Path, args: tuple[str, ...], out: Path) -> tuple[dict, dict]:
    """`lg` resizes `src` into the folder `out` as `args` say: (its
    config.json, the source's). preprocessor_config.json is carried as it
    is: depth and width do not change the input."""
    result = lg(args[0], src, *args[1:], "-o", out)
    assert result.code == 0, result.stderr
    preprocessing = "preprocessor_config.json"
    assert (out / preprocessing).read_bytes() == (src / preprocessing).read_bytes()
    return json.loads((out / "config.json").read_text()), json.loads((src / "config.json").read_text())


def piped_config(lg, src: Path, out: Path) -> dict:
    """`-o -` writes one file whose lg.config is the config.json: the next
    command reads it and writes the folder `out`. Its config.json."""
    piped = lg("shrink", src, "--depth", "1", "-o", "-")
    assert piped.code == 0, piped.stderr
    grown = lg("grow", "-", "--depth", "2", "--method", "bot", "-o", out, stdin=piped.stdout)
    assert grown.code == 0, grown.stderr
    return json.loads((out / "config.json").read_text())


def training_commands(sizes: str) -> list[tuple[str, ...]]:
    """lg eval, bench (at `sizes`, DEPTHxWIDTH,...: the model's own width among
    them, so that TLEG, which builds only that width, is condensed) and
    condense, one step each, on a few images."""
    few = ("--subset", "64", "--test-subset", "32")
    # bench condenses its learngenes for --condense-steps (600 by default): one step here too.
    return [("eval", "--steps", "1", *few), ("bench", "--sizes", sizes, "--steps", "1", "--condense-steps", "1",
                                             *few, "-o", "grown"),
            ("condense", "--method", "tleg", "--steps", "1", *few, "-o", "grown")]


def assert_trained(lg, src: Path, command: tuple[str, ...], workdir: Path) -> None:
    """`command` runs on a transformers image classifier (its images in,
    `output.logits` out, its head re-initialised for the data's classes)
    and gives its figures: eval its table, bench its cells, condense a
    learngene whose descendant is a folder of the family."""
    result = lg(command[0], src, "--data", "fashion-mnist-mini", *command[1:], "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    if command[0] == "eval":
        assert [row["source"] for row in report["rows"]] and "top1" in report["rows"][0]["final"]
    elif command[0] == "bench":
        assert all(cell["status"] in ("done", "n/a") for cell in report["cells"])
        assert {"select", "random", "peg"} <= {cell["method"] for cell in report["cells"] if cell["status"] == "done"}
        assert report["learngenes"]["tleg"]["steps"] >= 1  # condensed through the model's own forward pass
    else:
        assert report["accuracy"]["top1"] >= 0 and (workdir / "grown").is_file()


def assert_features_refused(lg, src: Path, command: tuple[str, ...], model_class: str, workdir: Path) -> None:
    """A model of features (no classification head) is refused in one line,
    having written nothing: there is no head to score."""
    result = lg(command[0], src, "--data", "fashion-mnist-mini", *command[1:])
    assert result.code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"lg: error: {model_class} is a model of features (no classification head)"), \
        result.stderr
    assert "Traceback" not in result.stderr
    assert not (workdir / "grown").is_file() and not list((workdir / "grown").glob("cells/*"))
    named = re.search(r"as transformers' (\w+ForImageClassification) ", lines[-1])
    assert named and hasattr(transformers, named[1]), lines[-1]  # the class it names exists
    if command[0] == "eval":  # without --data too: said as a model of features, not by transformers' 2 labels
        default = lg("eval", src, *command[1:])
        assert default.stderr.strip().splitlines()[-1] == lines[-1], default.stderr


def assert_bare_weights_refused(lg, src: Path, workdir: Path, model_type: str) -> None:
    """A folder's weights copied out without config.json are refused in one
    line: the image size and the labels are in config.json alone."""
    bare = workdir / "bare.safetensors"
    bare.write_bytes((src / "model.safetensors").read_bytes())
    result = lg("inspect", bare)
    assert result.code == 1
    assert result.stderr.strip() == (f"lg: error: {bare}: a Hugging Face {model_type} model is read with its "
                                     f"config.json (a folder, or a file lg wrote); these weights come without one")
