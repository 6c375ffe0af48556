"""transformers' CLIPForImageClassification folders (a classifier on CLIP's
vision tower: vision_model.* and classifier.*, its config.json a CLIPConfig
whose vision_config holds the tower's sizes): read as an image classifier of
the hf-clip family, resized by every kind of method into folders
from_pretrained loads with nothing missing, unexpected or mismatched (clone
keeping the logits), and trained and scored by eval, distill and condense.
A CLIPVisionModel (a model of features) is refused with a recipe that runs
as printed and makes such a folder; a whole CLIPModel is still refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

import lgcli
from hf_image_models import (assert_trained, load_strict, non_trivial, piped_config, resized_configs, resizes,
                             training_commands, weights, written_back)

TOWER = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, image_size=16,
             patch_size=4, projection_dim=24)
CLASSES = 10
PROCESSOR = dict(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})


def tower_model(with_projection: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model_class = transformers.CLIPVisionModelWithProjection if with_projection else transformers.CLIPVisionModel
    return non_trivial(model_class(transformers.CLIPVisionConfig(**TOWER)))


def classifier_model() -> torch.nn.Module:
    """What the recipe makes, built directly: the tower's config nested in a CLIPConfig."""
    torch.manual_seed(1)
    config = transformers.CLIPConfig(vision_config=TOWER, num_labels=CLASSES)
    return non_trivial(transformers.CLIPForImageClassification(config), seed=1)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (folder, the model it holds): the two models of features
    (one without a preprocessor_config.json, as save_pretrained leaves it)
    and a classifier."""
    root = tmp_path_factory.mktemp("clip")
    made = {}
    for name, model, processor in (("tower", tower_model(), False), ("projection", tower_model(True), True),
                                   ("classifier", classifier_model(), True)):
        model.save_pretrained(root / name)
        if processor:
            transformers.CLIPImageProcessor(**PROCESSOR).save_pretrained(root / name)
        made[name] = root / name, model
    return made


def images(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(pixel_values=images()).logits


def recipe_of(stderr: str) -> str:
    """The command line lg's refusal says to run."""
    found = re.search(r"run (python -c '[^']*' \"\$FOLDER\" \"\$N\" \"\$OUT\")", stderr)
    assert found, stderr
    return found[1]


def run_recipe(command: str, folder: Path, out: Path) -> None:
    """`command` run as printed, by bash, with FOLDER, N and OUT set in the shell."""
    env = {**os.environ, "FOLDER": str(folder), "N": str(CLASSES), "OUT": str(out),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["tower", "projection"])
def test_the_advice_for_a_model_of_features_runs_as_printed_and_makes_a_classifier(name, folders, lg, tmp_path):
    src, tower = folders[name]
    refused = lg("eval", src, "--steps", "0")
    assert refused.code == 1
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith(f"lg: error: {type(tower).__name__} is a model of features (no classification head)")
    out = tmp_path / "classifier"
    run_recipe(recipe_of(line), src, out)
    made = load_strict(out, "CLIPForImageClassification")
    assert made.config.num_labels == CLASSES and made.config.vision_config.num_hidden_layers == 2
    # The tower's weights, every one, under vision_model.
    saved = weights(out)
    for key, tensor in weights(src).items():
        key = key.removeprefix("vision_model.")
        if not key.startswith("visual_projection"):
            assert torch.equal(saved[f"vision_model.{key}"], tensor), key
    assert sorted(k for k in saved if not k.startswith("vision_model.")) == ["classifier.bias", "classifier.weight"]
    assert (out / "preprocessor_config.json").is_file() == (src / "preprocessor_config.json").is_file()
    scored = lg("eval", out, "--steps", "0", "--json")
    assert scored.code == 0, scored.stderr
    assert "top1" in json.loads(scored.stdout)["rows"][0]["final"]


def test_a_clip_classifier_folder_is_read_as_an_image_classifier(folders, lg, tmp_path):
    src, model = folders["classifier"]
    report = json.loads(lg("inspect", src, "--json").stdout)
    assert (report["family"], report["architecture"], report["depth"], report["width"], report["heads"],
            report["mlp_dim"], report["num_classes"], report["projection_dim"]) == (
        "hf-clip", "CLIPForImageClassification", 2, 48, 2, 96, CLASSES, None)
    assert (report["patch_size"], report["img_size"], report["in_chans"]) == (4, 16, 3)
    assert report["load_call"] == f"transformers.AutoModelForImageClassification.from_pretrained({str(src)!r})"
    stack = lgcli.load(src).stack
    assert torch.equal(stack.globals["head_weight"].data, model.classifier.weight)
    assert torch.equal(stack.globals["cls_token"].data, model.vision_model.embeddings.class_embedding)
    # lg's own model of the folder is transformers' (the mean of the patch tokens into the classifier).
    mine, _ = lgcli.load_model(src)
    assert torch.equal(logits(mine), logits(model))
    written_back(src, tmp_path / "copy", "hf-clip")


RESIZES = resizes(24, 96)


@pytest.mark.parametrize("resize", sorted(RESIZES))
def test_resized_classifiers_load_strictly_and_clone_keeps_the_logits(resize, folders, lg, tmp_path):
    src, model = folders["classifier"]
    out = tmp_path / "out"
    config, source = resized_configs(lg, src, RESIZES[resize], out)
    depth, width = int(RESIZES[resize][2]), int(RESIZES[resize][4])
    tower = config["vision_config"]
    assert (tower["num_hidden_layers"], tower["hidden_size"], tower["num_attention_heads"],
            tower["intermediate_size"]) == (depth, width, width // 24, 2 * width)
    kept = ("architectures", "model_type", "id2label", "text_config", "projection_dim")
    assert {k: config.get(k) for k in kept} == {k: source.get(k) for k in kept}
    geometry = ("image_size", "patch_size", "num_channels", "hidden_act", "layer_norm_eps")
    assert {k: tower[k] for k in geometry} == {k: source["vision_config"][k] for k in geometry}
    resized = logits(load_strict(out, "CLIPForImageClassification"))
    assert resized.shape == (2, CLASSES) and bool(resized.isfinite().all())
    if resize == "grow-clone":
        torch.testing.assert_close(resized, logits(model), rtol=0, atol=1e-5)


def test_a_pipe_between_classifier_folders_keeps_the_nested_config(folders, lg, tmp_path):
    src, _ = folders["classifier"]
    out = tmp_path / "out"
    config = piped_config(lg, src, out)
    assert (config["vision_config"]["num_hidden_layers"], config["architectures"]) == (
        2, ["CLIPForImageClassification"])
    assert bool(logits(load_strict(out, "CLIPForImageClassification")).isfinite().all())


@pytest.mark.parametrize("command", training_commands("1x24,1x48"), ids=["eval", "bench", "condense"])
def test_eval_bench_and_condense_train_the_classifier(command, folders, lg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_trained(lg, folders["classifier"][0], command, tmp_path)


def test_distill_heals_a_shrunk_classifier_from_the_classifier(folders, lg, tmp_path):
    src, _ = folders["classifier"]
    student, healed = tmp_path / "student", tmp_path / "healed"
    assert lg("shrink", src, "--depth", "1", "-o", student).code == 0
    done = lg("distill", student, "--teacher", src, "--data", "fashion-mnist-mini", "--steps", "1", "--subset", "64",
              "--test-subset", "32", "-o", healed)
    assert done.code == 0, done.stderr
    assert logits(load_strict(healed, "CLIPForImageClassification")).shape == (2, CLASSES)


def test_a_config_whose_model_type_is_not_its_class_is_refused(folders, lg, tmp_path):
    src, _ = folders["classifier"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    config = json.loads((src / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "clip_vision_model"}))
    result = lg("inspect", bad)
    assert (result.code, result.stderr) == (
        1, f"lg: error: {bad}: config.json's model_type is 'clip_vision_model'; its CLIPForImageClassification is "
           f"model type clip\n")
    # A CLIPConfig naming a CLIPModel is refused as a whole CLIP, as before.
    (bad / "config.json").write_text(json.dumps({**config, "architectures": ["CLIPModel"]}))
    result = lg("inspect", bad)
    assert result.code == 1 and "a CLIPModel folder holds a text tower beside the vision tower" in result.stderr
