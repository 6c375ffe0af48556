"""Qwen2's per-layer attention kinds (config.json's layer_types, "full" or
"sliding") after a change of depth: each layer written attends as the source
layer whose weights it holds, whichever method chose the layers (weight
selection's first N, stack, depth-upscale, identity-insert, clone, heur-lg,
the data-aware methods' kept layers), so a grow that keeps the function keeps
the logits on inputs longer than the window. max_window_layers, the count
transformers makes the kinds from where a config states none, agrees with
them or is gone. Every folder loads strictly with from_pretrained."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from lgcli.arch.base import LAYER_SOURCES, with_layer_sources
from lgcli.arch.llama import attention_kinds
from lgcli.stack import ArchSpec

from text_models import load_strict, make_model, outputs, relative_error, save_folder, token_ids, weights

F, S = "full_attention", "sliding_attention"
WINDOW = 4  # shorter than the inputs (text_models.SEQ tokens, twice that below)
# Interleaved, so that no depth's relative positions give the kinds of the layers any method keeps: a 4 -> 2
# shrink by relative position writes [F, F], and every pair a method can keep but (0, 2) holds an S.
INTERLEAVED = [F, S, F, S]
SMALL = dict(num_hidden_layers=4, use_sliding_window=True, sliding_window=WINDOW)
CALIBRATE = ("--calibrate-samples", "4", "--calibrate-seq-len", "16")


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    model = make_model("qwen2", layer_types=INTERLEAVED, **SMALL)
    assert model.config.layer_types == INTERLEAVED
    return save_folder(model, tmp_path_factory.mktemp("interleaved"), "qwen2"), model


@pytest.fixture(scope="module")
def by_count(tmp_path_factory):
    """Qwen2's own rule: the first max_window_layers layers full, the rest sliding ([F, F, S, S])."""
    model = make_model("qwen2", max_window_layers=2, **SMALL)
    assert model.config.layer_types == [F, F, S, S]
    return save_folder(model, tmp_path_factory.mktemp("by_count"), "qwen2"), model


def calibration_text(tmp_path):
    text = tmp_path / "calibrate.txt"
    text.write_text(" ".join(f"w{3 + (7 * i) % 90}" for i in range(3000)))
    return text


def held_layers(source, out) -> list[int | None]:
    """The source layer each written layer's weights are (its q projection, compared exactly), None for a
    layer that is none of them (a random one): found from the tensors, not from what lg reports."""
    before, after = weights(source), weights(out)
    key = "model.layers.{}.self_attn.q_proj.weight"
    depth = sum(1 for name in before if name.endswith("self_attn.q_proj.weight"))
    found = []
    for layer in range(sum(1 for name in after if name.endswith("self_attn.q_proj.weight"))):
        same = [i for i in range(depth) if torch.equal(after[key.format(layer)], before[key.format(i)])]
        assert len(same) <= 1
        found.append(same[0] if same else None)
    return found


def written(lg, source, out, *args) -> tuple[transformers.PreTrainedModel, dict]:
    """(the folder lg writes, loaded strictly; lg's report)."""
    result = lg(*args[:1], source, *args[1:], "--json", "-o", out)
    assert result.code == 0, result.stderr
    return load_strict(out, "qwen2"), json.loads(result.stdout)


def check_window_count(out) -> None:
    """A max_window_layers written makes, by Qwen2's rule, the very kinds written; where none can (an
    interleaving), none is written."""
    config = json.loads((out / "config.json").read_text())
    kinds = config["layer_types"]
    if "max_window_layers" in config:
        rule = transformers.Qwen2Config(**{k: v for k, v in config.items() if k != "layer_types"})
        assert rule.layer_types == kinds
    else:
        full = kinds.count(F)
        assert kinds != [F] * full + [S] * (len(kinds) - full)


CASES = [
    ("shrink", "--depth", "2"),  # select: the first 2
    ("shrink", "--depth", "3", "--method", "heur-lg"),  # the last 3
    ("grow", "--depth", "8", "--method", "stack"),
    ("grow", "--depth", "6", "--method", "depth-upscale"),
    ("grow", "--depth", "6", "--method", "identity-insert"),
    ("grow", "--depth", "7", "--method", "clone"),
    ("grow", "--depth", "6", "--method", "clone", "--insert", "top"),
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a) for a in CASES])
@pytest.mark.parametrize("source", ["interleaved", "by_count"])
def test_each_layer_attends_as_the_source_layer_it_holds(source, args, request, lg, tmp_path):
    folder, model = request.getfixturevalue(source)
    out = tmp_path / "out"
    grown, _ = written(lg, folder, out, *args)
    held = held_layers(folder, out)
    assert None not in held and len(held) == int(args[2])
    assert grown.config.layer_types == [model.config.layer_types[i] for i in held]
    check_window_count(out)


@pytest.mark.parametrize("method", ["angular", "block-ablation"])
def test_a_data_aware_shrink_keeps_its_kept_layers_kinds(method, interleaved, lg, tmp_path):
    folder, _ = interleaved
    out = tmp_path / "out"
    grown, report = written(lg, folder, out, "shrink", "--depth", "2", "--method", method,
                            "--calibrate", calibration_text(tmp_path), *CALIBRATE)
    held = held_layers(folder, out)
    assert held == report["details"]["kept_layers"]
    assert grown.config.layer_types == [INTERLEAVED[i] for i in held]
    if method == "angular":  # it drops 2 neighbours: whichever, it keeps an F then an S (relative: F F)
        assert grown.config.layer_types == [F, S]
    check_window_count(out)


def test_heur_lg_grow_keeps_its_inherited_layers_kinds(interleaved, lg, tmp_path):
    """The random layers below hold no source layer: they take the kind at their relative position."""
    folder, _ = interleaved
    out = tmp_path / "out"
    grown, _ = written(lg, folder, out, "grow", "--depth", "6", "--method", "heur-lg", "--seed", "1")
    held = held_layers(folder, out)
    assert held == [None, None, 0, 1, 2, 3]
    assert grown.config.layer_types == [INTERLEAVED[0], INTERLEAVED[0], *INTERLEAVED]


@pytest.mark.parametrize("args", [("--depth", "6", "--method", "identity-insert"),
                                  ("--depth", "7", "--method", "clone"),
                                  ("--depth", "6", "--method", "clone", "--insert", "top"),
                                  ("--depth", "5", "--width", "64", "--method", "clone")])
@pytest.mark.parametrize("source", ["interleaved", "by_count"])
def test_a_grow_that_keeps_the_function_keeps_the_logits_past_the_window(source, args, request, lg, tmp_path):
    folder, model = request.getfixturevalue(source)
    grown, _ = written(lg, folder, tmp_path / "out", "grow", *args)
    ids = torch.cat([token_ids()] * 2, dim=1)
    assert ids.shape[1] > 2 * WINDOW
    assert relative_error(outputs(grown, ids), outputs(model, ids)) <= 1e-4


def test_a_config_that_states_kinds_by_count_alone(by_count, lg, tmp_path):
    """transformers 4's Qwen2 config.json: no layer_types, the kinds made from max_window_layers. A stack
    of it states its kinds (no count makes F F S S F F S S), as transformers reads the source's."""
    folder, model = by_count
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in folder.iterdir():
        (bare / path.name).write_bytes(path.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    del config["layer_types"]
    (bare / "config.json").write_text(json.dumps(config))
    assert transformers.AutoConfig.from_pretrained(bare).layer_types == [F, F, S, S]
    out = tmp_path / "out"
    grown, _ = written(lg, bare, out, "grow", "--depth", "8", "--method", "stack")
    assert grown.config.layer_types == [F, F, S, S] * 2
    check_window_count(out)


def spec(depth: int, **extras) -> ArchSpec:
    return ArchSpec(family="llama", depth=depth, width=8, heads=2, head_dim=4, mlp_dim=16, extras=extras)


def test_a_resize_of_a_resize_indexes_the_layers_the_config_describes():
    """Held in memory, a second resize's spec keeps its first's config: the record composes, so a layer
    reads the kind of the layer of that config it holds."""
    config = {"layer_types": [F, S, S, F, F, S]}
    first = with_layer_sources(spec(3), spec(6), [5, 2, 3])  # S S F
    second = with_layer_sources(spec(4), first, [2, 0, 0, 1])
    assert second.extras[LAYER_SOURCES] == (6, [3, 5, 5, 2])
    assert attention_kinds(config, second) == [F, S, S, S]
    # A record of another depth than the spec's (made from a recorded spec without one): relative positions.
    assert attention_kinds(config, spec(2, **{LAYER_SOURCES: (6, [5, 2, 3])})) == [F, F]
    with pytest.raises(RuntimeError):
        with_layer_sources(spec(2), spec(6), [0, 6])
