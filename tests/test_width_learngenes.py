"""Learngenes trained at several widths (SPEC.md "Learngenes at several
widths"; lgcli/learngenes/widths.py): `lg condense --widths`, a descendant at
width W equal to the nested slices of the learngene computed by hand, exact
repeats, refusals naming the trained widths, `--method` for the rest, and an
importance order that keeps the teacher's function."""

from __future__ import annotations

import hashlib
import json

import pytest
import timm
import torch

import lgcli
from lgcli.arch import get_adapter
from lgcli.data import load_data
from lgcli.learngenes import GeneratedModel
from lgcli.learngenes.tleg import KIND as TLEG
from lgcli.learngenes.widths import importance_orders, permuted_stack
from lgcli.stack import ATTN, EMBED, HEADS, KV, MLP
from lgcli.train import TrainConfig, train

from conftest import sample_input
from printed import run_printed

# head dim 16: widths 32 (2 heads) and 64 (4 heads)
TEACHER = dict(depth=2, embed_dim=64, num_heads=4, patch_size=7, img_size=28, in_chans=1, num_classes=10)
FAST = ["--batch-size", "16", "--subset", "128", "--test-subset", "50"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny timm ViT trained a few steps, so its logits and activations carry something."""
    data = load_data(subset=128, test_subset=50, seed=0)
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **TEACHER)
    train(model, data.train, TrainConfig(steps=8, batch_size=16, lr=2e-3, progress=False))
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


def _condense(teacher, out, *extra):
    from lgcli.cli import main
    import contextlib
    import io

    buffer = io.StringIO()
    args = ["condense", str(teacher), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "3",
            "--depths", "2-3", "-o", str(out), "--json", *FAST, *extra]
    with contextlib.redirect_stdout(buffer):
        try:
            main(args)
        except SystemExit as exc:
            assert not exc.code, f"lg {' '.join(args)} exited {exc.code}"
    return json.loads(buffer.getvalue())


@pytest.fixture(scope="module")
def gene(tmp_path_factory, teacher):
    out = tmp_path_factory.mktemp("gene") / "tleg.lg.safetensors"
    report = _condense(teacher, out, "--widths", "32,64")
    return out, report


def _strict_load(path):
    report = lgcli.inspect_checkpoint(path)
    return eval(report["load_call"].replace("'" + str(path) + "'", repr(str(path))), {"timm": timm})


def _first(tensor: torch.Tensor, axes: tuple[str, ...], sizes: dict[str, int]) -> torch.Tensor:
    """The first sizes[axis] entries along every width axis, by explicit indices."""
    for dim, axis in enumerate(axes):
        if axis in sizes:
            tensor = tensor.index_select(dim, torch.arange(sizes[axis]))
    return tensor


# ---------------------------------------------------------------- descendants are nested slices

def test_a_descendant_at_a_trained_width_is_the_nested_slice_by_hand(gene, tmp_path, lg):
    path, _ = gene
    learngene = lgcli.load_learngene(path)
    assert learngene.sizes["widths"] == [32, 64] and learngene.spec.width == 64
    # The file says what the channels were ordered on.
    assert learngene.condensed["importance_order"] == {"data": "fashion-mnist-mini", "samples": 64, "seed": 0,
                                                       "positions": learngene.condensed["importance_order"]["positions"]}
    out = tmp_path / "d.safetensors"
    result = lg("grow", str(path), "--depth", "3", "--width", "32", "-o", str(out))
    assert result.code == 0, result.stderr
    built = lgcli.load(out)
    assert (built.spec.depth, built.spec.width, built.spec.heads, built.spec.mlp_dim) == (3, 32, 2, 128)
    # 32 channels, 2 whole heads of the teacher's 16 dims (rows 0..31 of q, k, v), 128 MLP neurons.
    sizes = {EMBED: 32, ATTN: 32, KV: 32, MLP: 128, HEADS: 2}
    for role, named in built.stack.layers.items():
        a, b = learngene.tensors[f"A.{role}"], learngene.tensors[f"B.{role}"]
        for layer in range(3):  # TLEG Eq. 1 on the slices: B + ((l - 1) / L) A, l = layer + 1
            expected = _first(b, named.axes[1:], sizes) + (layer / 3) * _first(a, named.axes[1:], sizes)
            assert torch.allclose(named.data[layer], expected, atol=1e-6), (role, layer)
    for role, named in built.stack.globals.items():
        expected = _first(learngene.tensors[f"global.{role}"], named.axes, sizes)
        assert torch.equal(named.data, expected), role
    # ... and it loads strictly in timm, with the line lg inspect prints, and runs.
    model = _strict_load(out)
    assert model(sample_input(model)).shape == (2, 10)


def test_every_trained_width_builds_directly_and_inspect_lists_them(gene, tmp_path, lg):
    path, _ = gene
    for width, heads in ((32, 2), (64, 4)):
        out = tmp_path / f"d{width}.safetensors"
        assert lg("grow", str(path), "--depth", "2", "--width", str(width), "-o", str(out)).code == 0
        model = _strict_load(out)
        assert (model.embed_dim, len(model.blocks), model.blocks[0].attn.num_heads) == (width, 2, heads)
        assert torch.isfinite(model(sample_input(model))).all()
    report = json.loads(lg("inspect", str(path), "--json").stdout)
    assert report["trained_at"] == {"widths": [32, 64], "depths": "2-3", "width_rule": "sample", "width_norms": []}
    assert "32 (2 heads, MLP 128), 64 (4 heads, MLP 256)" in report["becomes"]
    assert "trained at depths 2-3" in report["becomes"]  # the row `lg inspect` shows


def test_the_grow_hint_asks_for_a_trained_width_and_runs_as_printed(gene, tmp_path, lg):
    """A width-trained learngene refuses an untrained width, so the line
    `lg inspect` prints asks for one and names them; it runs as printed (it
    read `--depth N --width W -o OUT`, placeholders)."""
    path, _ = gene
    hint = json.loads(lg("inspect", str(path), "--json").stdout)["expand_call"]
    assert hint == f"lg grow {path} --depth 2 --width 32 -o tleg-depth2-width32.safetensors  # any depth; " \
                   f"trained widths 32, 64"
    ran = run_printed(hint, tmp_path)
    assert ran.code == 0, ran.stderr
    assert _strict_load(tmp_path / "tleg-depth2-width32.safetensors").embed_dim == 32


def test_the_condense_draws_every_listed_width(teacher):
    """GeneratedModel draws a (depth, width) per training step; each width is built from the same tensors."""
    learngene = lgcli.load(teacher)
    stack = learngene.stack.materialized()
    trainable, _ = TLEG.initial(learngene.spec, stack, {}, torch.Generator().manual_seed(0), ancestry=stack)
    model = GeneratedModel(learngene.spec, TLEG.build, trainable, depths=(2, 3), widths=(32, 64)).train()
    torch.manual_seed(0)
    images = torch.randn(2, 1, 28, 28)
    for _ in range(30):  # four (depth, width) pairs, each drawn with chance 1/4 per step
        model(images)
    assert set(model._skeletons) == {(2, 32), (2, 64), (3, 32), (3, 64)}
    # In eval, the widest at the auxiliary depth: exactly the teacher, as the fit starts from it (2 layers: exact line).
    teacher_model = get_adapter("vit").load_model(learngene.spec, stack).eval()
    assert torch.allclose(model.eval()(images), teacher_model(images), atol=1e-4)


def test_the_same_seed_writes_the_same_bytes(gene, teacher, tmp_path):
    path, _ = gene
    again = tmp_path / "again.lg.safetensors"
    _condense(teacher, again, "--widths", "32,64")
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(again.read_bytes()).digest()


# ---------------------------------------------------------------- refusals and --method

def test_an_untrained_width_is_refused_in_one_line_naming_the_trained_ones(gene, tmp_path, lg):
    path, _ = gene
    out = tmp_path / "d48.safetensors"
    result = lg("grow", str(path), "--depth", "2", "--width", "48", "-o", str(out))
    assert result.code != 0 and not out.exists()
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "trained at widths 32 (2 heads, MLP 128), 64 (4 heads, MLP 256)" in line and "--method select" in line
    # A trained width needs no method: --method is refused there, as for every learngene's own sizes.
    result = lg("grow", str(path), "--depth", "2", "--width", "32", "--method", "select", "-o", str(out))
    assert result.code == 2 and "--method does not apply" in result.stderr and not out.exists()


def test_a_width_of_one_head_is_named_in_the_singular():
    """Messages name a trained width as "16 (1 head, MLP 64)", not "1 heads"."""
    from lgcli.errors import counted
    from lgcli.learngenes.widths import shape_text
    from lgcli.stack import ArchSpec

    assert shape_text(ArchSpec("vit", depth=2, width=16, heads=1, head_dim=16, mlp_dim=64)) == "16 (1 head, MLP 64)"
    assert shape_text(ArchSpec("vit", depth=2, width=64, heads=4, head_dim=16, mlp_dim=256)) == "64 (4 heads, MLP 256)"
    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]


def test_method_resizes_the_nearest_trained_width(gene, tmp_path, lg):
    path, _ = gene
    out = tmp_path / "d48.safetensors"
    result = lg("grow", str(path), "--depth", "3", "--width", "48", "--method", "select", "-o", str(out))
    assert result.code == 0, result.stderr
    model = _strict_load(out)
    assert (model.embed_dim, len(model.blocks)) == (48, 3)
    assert torch.isfinite(model(sample_input(model))).all()
    # What select computes from the learngene's width 64 at depth 3, exactly.
    direct = tmp_path / "d64.safetensors"
    assert lg("grow", str(path), "--depth", "3", "--width", "64", "-o", str(direct)).code == 0
    piped = tmp_path / "piped.safetensors"
    assert lg("shrink", str(direct), "--width", "48", "--method", "select", "-o", str(piped)).code == 0
    got, expected = lgcli.load(out).stack.materialized(), lgcli.load(piped).stack.materialized()
    for role in expected.layers:
        assert torch.equal(got.layers[role].data, expected.layers[role].data), role
    recorded = lgcli.inspect_checkpoint(out)["provenance"][0]["options"]
    assert recorded["trained_width"] == 64 and recorded["width_method"] == "select"
    # A grow beyond the widest goes the other way, and a method that cannot is refused in one line.
    wide = tmp_path / "d96.safetensors"
    assert lg("grow", str(path), "--depth", "2", "--width", "96", "--method", "bot", "-o", str(wide)).code == 0
    assert _strict_load(wide).embed_dim == 96
    refused = lg("grow", str(path), "--depth", "2", "--width", "96", "--method", "select", "-o",
                 str(tmp_path / "no.safetensors"))
    assert refused.code != 0 and "cannot grow" in refused.stderr and "\n" not in refused.stderr.strip()


@pytest.mark.parametrize("args", [
    ["--width", "96", "--heads", "3", "--method", "bot"],     # heads fewer, head dim larger: no grow alone
    ["--width", "48", "--heads", "1", "--method", "select"],  # was "use `lg grow`", to a user running lg grow
    ["--width", "96", "--heads", "3"],                        # the refusal without --method: not "add --method bot"
])
def test_a_size_one_method_cannot_reach_is_hinted_as_a_pipe_that_runs(gene, tmp_path, lg, args):
    """A size reached from the nearest trained width only by a shrink and a
    grow (heads fewer while the head dim grows, or the reverse) is refused
    in one line whose pipe, run as printed, writes that size where asked."""
    path, _ = gene
    out = tmp_path / "hinted out.safetensors"  # a space: the printed command quotes it
    result = lg("grow", str(path), "--depth", "2", *args, "-o", str(out))
    line = result.stderr.strip()
    assert result.code != 0 and not out.exists() and "\n" not in line and "Traceback" not in line
    assert "use `lg" not in line and "add --method" not in line  # neither would run
    command = line[line.index(": lg grow ") + 2:]
    assert command.startswith(f"lg grow {path} --depth 2 --width 64 -o - | ") and " | lg shrink - " in command
    done = run_printed(command)
    assert done.code == 0, (command, done.stderr)
    model = _strict_load(out)
    asked = dict(zip(args[::2], args[1::2]))
    assert (len(model.blocks), model.embed_dim, model.blocks[0].attn.num_heads) == (
        2, int(asked["--width"]), int(asked["--heads"]))


@pytest.mark.parametrize("widths, message", [
    ("40,64", "not a whole number of heads of dim 16"),
    ("32,48", "the widest must be the auxiliary model's width 64"),
    ("32;64", "comma-separated widths"),
])
def test_bad_widths_are_refused(teacher, tmp_path, lg, widths, message):
    out = tmp_path / "g.lg.safetensors"
    result = lg("condense", str(teacher), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "1",
                *FAST, "--widths", widths, "-o", str(out))
    assert result.code != 0 and message in result.stderr and not out.exists()
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- importance order

def test_permuting_channels_keeps_the_logits(teacher):
    loaded = lgcli.load(teacher)
    spec, stack = loaded.spec, loaded.stack.materialized()
    generator = torch.Generator().manual_seed(3)

    class Scores:  # any scores: the permutation must keep the function whatever order they give
        embed = torch.rand(spec.width, generator=generator)
        mlp = torch.rand(spec.depth, spec.mlp_dim, generator=generator)
        heads = torch.rand(spec.depth, spec.heads, generator=generator)

    orders = importance_orders(Scores, spec)
    assert torch.equal(orders[EMBED], torch.sort(-Scores.embed, stable=True).indices)
    assert not torch.equal(orders[EMBED], torch.arange(spec.width))
    adapter = get_adapter(spec.family)
    before = adapter.load_model(spec, stack).eval()
    after = adapter.load_model(spec, permuted_stack(stack, orders)).eval()
    images = torch.randn(3, 1, 28, 28, generator=generator)
    assert torch.allclose(before(images), after(images), atol=1e-5)


def test_importance_order_puts_the_most_important_first(teacher):
    from lgcli.calibration import calibrate, calibration_examples
    from lgcli.condense import importance_ordered

    loaded = lgcli.load(teacher)
    ordered, _ = importance_ordered(loaded, loaded.stack.materialized(), "fashion-mnist-mini", seed=0,
                                    device="cpu", seq_len=None, notify=lambda message: None)
    adapter = get_adapter(loaded.spec.family)
    model = adapter.load_model(loaded.spec, ordered).float()
    examples, name = calibration_examples(model, loaded.spec, "fashion-mnist-mini", samples=64, seed=0,
                                          seq_len=None, companions={}, where="test")
    again = calibrate(model, loaded.spec, examples, name=name, seed=0)
    # Measured again on the permuted teacher, every score is in descending order.
    assert bool((again.embed[:-1] >= again.embed[1:] - 1e-9).all())
    assert bool((again.mlp[:, :-1] >= again.mlp[:, 1:] - 1e-9).all())
    assert bool((again.heads[:, :-1] >= again.heads[:, 1:] - 1e-9).all())


def test_permutation_keeps_a_grouped_query_language_model(tmp_path):
    from text_models import make_model, outputs, save_folder, token_ids

    folder = save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa")
    loaded = lgcli.load(folder)
    spec, stack = loaded.spec, loaded.stack.materialized()
    assert spec.key_value_heads < spec.heads
    generator = torch.Generator().manual_seed(5)

    class Scores:
        embed = torch.rand(spec.width, generator=generator)
        mlp = torch.rand(spec.depth, spec.mlp_dim, generator=generator)
        heads = torch.rand(spec.depth, spec.heads, generator=generator)

    adapter = get_adapter(spec.family)
    ids = token_ids()
    before = outputs(adapter.load_model(spec, stack).eval(), ids)
    after = outputs(adapter.load_model(spec, permuted_stack(stack, importance_orders(Scores, spec))).eval(), ids)
    assert torch.allclose(before, after, atol=1e-5)


def test_a_single_width_learngene_reaches_other_widths_with_method(teacher, tmp_path, lg):
    """Today's TLEG learngene (no --widths) has one trained width, its own: --method resizes it."""
    gene = tmp_path / "one.lg.safetensors"
    _condense(teacher, gene)
    refused = lg("grow", str(gene), "--depth", "2", "--width", "32", "-o", str(tmp_path / "no.safetensors"))
    assert refused.code == 1 and "its own width 64" in refused.stderr and "--method" in refused.stderr
    out = tmp_path / "d32.safetensors"
    assert lg("grow", str(gene), "--depth", "2", "--width", "32", "--method", "select", "-o", str(out)).code == 0
    model = _strict_load(out)
    assert model.embed_dim == 32 and torch.isfinite(model(sample_input(model))).all()


def test_wave_trained_widths_are_slices_of_its_widest(teacher, tmp_path, lg):
    """WAVE --widths: a trained width is the nested slice of the widest built
    at the same depth (Eq. 4 with Eq. B.1's scalers, the same seed)."""
    from lgcli.cli import main
    import contextlib
    import io

    gene = tmp_path / "wave.lg.safetensors"
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["condense", str(teacher), "--method", "wave", "--data", "fashion-mnist-mini", "--steps", "3",
                  "--widths", "32,64", "-o", str(gene), *FAST])
        except SystemExit as exc:
            assert not exc.code
    assert lgcli.load_learngene(gene).sizes["widths"] == [32, 64]
    narrow, wide = tmp_path / "d32.safetensors", tmp_path / "d64.safetensors"
    assert lg("grow", str(gene), "--depth", "3", "--width", "32", "-o", str(narrow)).code == 0
    assert lg("grow", str(gene), "--depth", "3", "--width", "64", "-o", str(wide)).code == 0
    small, big = lgcli.load(narrow).stack.materialized(), lgcli.load(wide).stack.materialized()
    sizes = {EMBED: 32, ATTN: 32, KV: 32, MLP: 128, HEADS: 2}
    for role, named in small.layers.items():
        assert torch.allclose(named.data, _first(big.layers[role].data, named.axes, sizes), atol=1e-6), role
    for role, named in small.globals.items():
        assert torch.equal(named.data, _first(big.globals[role].data, named.axes, sizes)), role
    model = _strict_load(narrow)
    assert model.embed_dim == 32 and torch.isfinite(model(sample_input(model))).all()
    report = json.loads(lg("inspect", str(gene), "--json").stdout)
    assert report["trained_at"]["widths"] == [32, 64] and 32 in report["widths"]


def test_every_kind_shows_its_trained_depths_one_way():
    from lgcli.learngenes.base import trained_depths_text

    # One depth is one number (SWS showed "6-6" where WAVE showed "6"); a range is FIRST-LAST; no record
    # is the learngene's own depth; a malformed record is "?", not a traceback.
    assert trained_depths_text({"trained_depths": [6, 6]}, 6) == "6"
    assert trained_depths_text({"trained_depths": [2, 12]}, 6) == "2-12"
    assert trained_depths_text({}, 6) == "6"
    assert trained_depths_text({"trained_depths": [2]}, 6) == "?"
    assert trained_depths_text({"trained_depths": "2-12"}, 6) == "?"


def test_depths_take_a_list_as_well_as_a_range_and_print_back_as_given():
    from lgcli.errors import UsageError
    from lgcli.learngenes.base import depths_text, parsed_depths, trained_depths_text

    cases = {"3-6": (3, 4, 5, 6), "6": (6,), "3,6,12": (3, 6, 12), "12,3,6": (3, 6, 12), "2-4,8": (2, 3, 4, 8),
             "2-4,3-5": (2, 3, 4, 5), "3, 6": (3, 6), "4,4": (4,)}
    for text, depths in cases.items():
        assert parsed_depths(text) == depths, text
        assert parsed_depths(depths_text(depths)) == depths  # what a file records reads back the same
    assert [depths_text(d) for d in ((3, 6, 12), (2, 3, 4, 8), (5,), (3, 4))] == ["3,6,12", "2-4,8", "5", "3-4"]
    assert depths_text((2, 3, 4, 6), ", ") == "2-4, 6"  # LeTs' row in lg inspect
    for text, said in (("3,,6", "--depths takes a range MIN-MAX such as 3-12, or depths and ranges such as "
                                "3,6,12, not '3,,6'"), ("3,0", "--depths 3,0: need 1 <= MIN <= MAX"),
                       ("6-3,8", "--depths 6-3,8: need 1 <= MIN <= MAX"),
                       ("1-999999999", "--depths 1-999999999: more than 100,000 depths to draw from")):
        with pytest.raises(UsageError) as refused:
            parsed_depths(text)
        assert str(refused.value) == said
    assert trained_depths_text({"trained_depths": [3, 12], "depth_list": [3, 6, 12]}, 6) == "3,6,12"
    assert trained_depths_text({"trained_depths": [3, 12], "depth_list": [0, 6]}, 6) == "?"


def test_a_learngene_condensed_at_a_list_of_depths_trains_and_records_just_those(teacher, tmp_path, lg,
                                                                                    monkeypatch):
    out = tmp_path / "listed.lg.safetensors"
    drawn = []
    original = GeneratedModel._draw_depth

    def recording(self):
        drawn.append(original(self))
        return drawn[-1]

    monkeypatch.setattr(GeneratedModel, "_draw_depth", recording)
    report = _condense(teacher, out, "--widths", "32,64", "--depths", "2,4", "--steps", "6")
    assert set(drawn) == {2, 4}, drawn  # 6 steps, seed 0: both drawn, never 3
    assert report["options"]["depths"] == "2,4"
    learngene = lgcli.load_learngene(out)
    assert learngene.sizes["trained_depths"] == [2, 4] and learngene.sizes["depth_list"] == [2, 4]
    shown = json.loads(lg("inspect", str(out), "--json").stdout)
    assert shown["trained_at"]["depths"] == "2,4" and "trained at depths 2,4" in shown["becomes"]


@pytest.mark.parametrize("kind, options", [
    ("tleg", {}), ("tleg", {"widths": "32,64", "depths": "2-3"}), ("wave", {}), ("wave", {"widths": "32,64"}),
    ("sws", {"widths": "32,64"}), ("lets", {}),
])
def test_the_unstarted_learngene_reaches_what_the_condensed_one_does(teacher, kind, options):
    """`lg bench` asks a kind's learngene before condensing which sizes it
    builds: the unstarted one must have the condensed one's shapes and sizes,
    and refuse (or build) every size exactly as it does."""
    from lgcli.condense import CondenseSettings, condense, unstarted_learngene
    from lgcli.errors import LgError
    from lgcli.loading import load
    from lgcli.resize import expand_target

    data = load_data(subset=32, test_subset=16, seed=0)
    condensed, _, _ = condense(teacher, data, method=kind, options=options, notify=lambda message: None,
                               settings=CondenseSettings(steps=1, batch_size=16, progress=False))
    # A learngene trained at its widths has the teacher's channels ordered on
    # the whole 32-image split (fewer than a calibration's default 64, not refused).
    assert ("importance_order" in condensed.condensed) == ("widths" in condensed.sizes)
    assert condensed.condensed.get("importance_order", {"samples": 32})["samples"] == 32
    unstarted = unstarted_learngene(load(teacher), kind, options=options)
    assert {n: tuple(t.shape) for n, t in unstarted.tensors.items()} == \
        {n: tuple(t.shape) for n, t in condensed.tensors.items()}
    assert all(t.device.type == "meta" for t in unstarted.tensors.values())
    assert unstarted.sizes == condensed.sizes and unstarted.spec == condensed.spec

    def answer(learngene, depth, width):
        try:
            return expand_target(learngene, depth=depth, width=width)[1]
        except LgError as exc:
            return str(exc)

    for depth in (1, 2, 3):
        for width in (16, 32, 48, 64, 128):
            assert answer(unstarted, depth, width) == answer(condensed, depth, width)
