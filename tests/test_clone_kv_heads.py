"""clone changing the number of key/value heads (lgcli/methods/clone.py):
new key/value head m copies source head ((m g') mod H) // g, which keeps
the function whenever the new group size g' divides the source's g (GQA ->
MHA among them). The map checked on every small head count, the models
written loaded strictly by transformers with the source's logits, the new
k/v rows checked entry by entry, and the targets whose groups would mix
source groups refused in one line naming the --kv-heads that keep it."""

from __future__ import annotations

import json
import os

import pytest
import torch

from lgcli.errors import LgError
from lgcli.methods.clone import kv_copies, validate
from lgcli.stack import ArchSpec

from text_models import Sources, load_strict, outputs, token_ids, weights

HEAD_DIM = 16
SIZES = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=96)  # 4 heads of 16


def spec(heads: int, kv_heads: int) -> ArchSpec:
    return ArchSpec("llama", depth=1, width=heads * HEAD_DIM, heads=heads, head_dim=HEAD_DIM, mlp_dim=8,
                    kv_heads=kv_heads, rms_norm=True)


def grouped_counts(limit: int = 12):
    """Every (heads, key/value heads) with heads <= limit that forms groups."""
    return [(h, kv) for h in range(1, limit + 1) for kv in range(1, h + 1) if h % kv == 0]


def kv_head_map(source: ArchSpec, target: ArchSpec) -> list[int]:
    """The source key/value head each target key/value head copies, read off `kv_copies`' element indices."""
    index, _ = kv_copies(source, target)
    rows = index.reshape(target.key_value_heads, HEAD_DIM)
    assert (rows % HEAD_DIM == torch.arange(HEAD_DIM)).all()  # whole heads, each element in place
    return (rows[:, 0] // HEAD_DIM).tolist()


@pytest.mark.parametrize("heads, kv_heads", grouped_counts(8))
def test_clone_accepts_a_key_value_count_exactly_when_every_query_head_can_read_what_its_source_read(
        heads, kv_heads):
    """Query head j' copies source head j' mod H and reads new key/value head
    j' // g'. The function is kept exactly when the query heads of each new
    group have sources that read one key/value head, (j' mod H) // g: clone
    accepts exactly those targets, and its map gives each group that head."""
    source, group = spec(heads, kv_heads), heads // kv_heads
    for new_heads, new_kv in grouped_counts(3 * heads):
        if new_heads < heads or new_kv < kv_heads:
            continue
        target, new_group = spec(new_heads, new_kv), new_heads // new_kv
        read_by_group = [{(j % heads) // group for j in range(m * new_group, (m + 1) * new_group)}
                         for m in range(new_kv)]
        if any(len(read) > 1 for read in read_by_group):
            with pytest.raises(LgError, match=r"valid --kv-heads: "):
                validate(source, target)
            continue
        validate(source, target)
        assert kv_head_map(source, target) == [read.pop() for read in read_by_group], target


def test_the_map_tiles_at_the_same_group_and_repeats_each_head_at_the_same_query_heads():
    source = spec(4, 2)
    assert kv_head_map(source, spec(8, 4)) == [0, 1, 0, 1]              # g' = g: tiled as q is
    assert kv_head_map(source, spec(4, 4)) == [0, 0, 1, 1]              # H' = H: GQA -> MHA, repeat-interleave
    assert kv_head_map(source, spec(8, 8)) == [0, 0, 1, 1, 0, 0, 1, 1]
    assert kv_head_map(source, spec(6, 3)) == [0, 1, 0]                 # query heads 4, 5 copy heads 0, 1
    assert kv_head_map(spec(8, 2), spec(8, 4)) == [0, 0, 1, 1]
    _, count = kv_copies(source, spec(8, 8))
    assert count.tolist() == [4] * (2 * HEAD_DIM)                       # every source element copied four times


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return Sources(tmp_path_factory)


@pytest.mark.parametrize("variant, source_kv, flags, kv_heads", [
    ("llama-gqa", 2, ["--kv-heads", "4"], 4),                                    # GQA -> MHA
    ("llama-gqa", 2, ["--width", "128", "--heads", "8", "--kv-heads", "8"], 8),
    ("llama-gqa", 2, ["--width", "128", "--heads", "8", "--kv-heads", "4"], 4),  # the group kept
    ("llama-gqa", 2, ["--width", "96", "--heads", "6", "--kv-heads", "3", "--depth", "3"], 3),
    ("llama-gqa", 1, ["--width", "128", "--heads", "8", "--kv-heads", "1"], 1),  # MQA: any group
    ("qwen2", 2, ["--kv-heads", "4"], 4),                                        # k/v biases
])
def test_grown_key_value_heads_keep_the_logits_and_load_strictly(sources, lg, tmp_path, variant, source_kv, flags,
                                                                 kv_heads):
    source, model = sources(variant, **SIZES, num_key_value_heads=source_kv)
    out = tmp_path / "out"
    result = lg("grow", source, *flags, "--method", "clone", "-o", out)
    assert result.code == 0, result.stderr
    grown = load_strict(out, variant)
    assert grown.config.num_key_value_heads == kv_heads
    ids = token_ids()
    torch.testing.assert_close(outputs(grown, ids), outputs(model, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ["llama-gqa", "qwen2"])
def test_gqa_to_mha_repeats_each_key_value_head_for_the_two_query_heads_that_read_it(sources, lg, tmp_path,
                                                                                      variant):
    source, _ = sources(variant, **SIZES, num_key_value_heads=2)
    out = tmp_path / "out"
    assert lg("grow", source, "--kv-heads", "4", "--method", "clone", "-o", out).code == 0
    before, after = weights(source), weights(out)
    suffixes = ("k_proj.weight", "v_proj.weight") + (("k_proj.bias", "v_proj.bias") if variant == "qwen2" else ())
    checked = 0
    for key, old in before.items():
        new = after[key]
        if not key.endswith(suffixes):
            assert torch.equal(new, old), key       # q, o, the MLP, norms: the sizes they had
            continue
        assert new.shape[0] == 4 * HEAD_DIM and old.shape[0] == 2 * HEAD_DIM
        for m in range(4):
            assert torch.equal(new[m * HEAD_DIM:(m + 1) * HEAD_DIM], old[m // 2 * HEAD_DIM:(m // 2 + 1) * HEAD_DIM])
        checked += 1
    assert checked == len(suffixes) * SIZES["num_hidden_layers"]


@pytest.mark.parametrize("flags, valid", [
    (["--width", "128", "--heads", "8", "--kv-heads", "2"], "8, 4"),     # groups of 4 span two of the source's 2
    (["--width", "96", "--heads", "6", "--kv-heads", "2"], "6, 3"),      # groups of 3
])
def test_a_group_that_does_not_divide_the_sources_is_refused_in_one_line_naming_valid_kv_heads(
        sources, lg, tmp_path, flags, valid):
    source, _ = sources("llama-gqa", **SIZES, num_key_value_heads=2)
    result = lg("grow", source, *flags, "--method", "clone", "-o", tmp_path / "out")
    assert result.code != 0 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("lg: error: clone keeps the function where each new key/value group"), result.stderr
    assert f"(valid --kv-heads: {valid}; or another method)" in result.stderr
    assert os.listdir(tmp_path) == []
    for kv_heads in valid.split(", "):  # each one named is accepted
        validate(spec(4, 2), spec(int(flags[3]), int(kv_heads)))


def test_lg_grow_without_a_method_clones_a_gqa_to_mha_growth(sources, lg, tmp_path):
    """The default grow is clone wherever clone reaches the size: the
    report's case (4 heads on 2 key/value heads, --kv-heads 4) no longer
    falls back to a method that loses the function."""
    source, model = sources("llama-gqa", **SIZES, num_key_value_heads=2)
    out = tmp_path / "out"
    result = lg("grow", source, "--kv-heads", "4", "-o", out)
    assert result.code == 0, result.stderr
    assert result.stderr.startswith("grow (clone): ") and "kv heads 2 -> 4" in result.stderr, result.stderr
    assert json.loads((out / "config.json").read_text())["num_key_value_heads"] == 4
    ids = token_ids()
    torch.testing.assert_close(outputs(load_strict(out, "llama-gqa"), ids), outputs(model, ids), atol=1e-5, rtol=0)


def test_a_grow_clone_cannot_make_falls_back_saying_why_and_that_the_function_is_lost(sources, lg, tmp_path):
    """Where clone refuses, the default grow is auto-lg's, whose logits are
    not the source's: said, with clone's reason, before the result line."""
    source, _ = sources("llama-gqa", **SIZES, num_key_value_heads=2)
    result = lg("grow", source, "--width", "128", "--heads", "8", "--kv-heads", "2", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    first, second = result.stderr.splitlines()[:2]
    assert first.startswith("grow: clone, the default, cannot make this size (clone keeps the function where")
    assert first.endswith("(valid --kv-heads: 8, 4; or another method)); auto-lg instead, which does not keep the "
                          "function")
    assert second.startswith("grow (auto-lg): ")
