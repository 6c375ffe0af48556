"""`lg bench --learngene-widths`: a learngene kind that trains widths is
condensed at every width of the bench's sizes (no wider than the ancestry),
so it builds the narrower sizes directly; without the flag those cells are
n/a and their reason names the flag. `--learngene-depths`: a kind that
draws depths while condensing draws the range of the bench's depths."""

from __future__ import annotations

import test_bench

from lgcli.bench import BenchSettings, bench, parse_sizes
from lgcli.evaluate import ProbeSettings

ancestry = test_bench.ancestry  # the fixture: test_bench's tiny 2 x 32 ancestry, two heads of 16


def settings(**overrides) -> BenchSettings:
    # 1 x 16 is half the ancestry's width (one head), 2 x 32 its own.
    base = dict(sizes=parse_sizes("1x16,2x32"), methods=["select", "tleg"],
                probe=ProbeSettings(steps=2, eval_every=2, batch_size=16, progress=False), **test_bench.FAST)
    return BenchSettings(**{**base, **overrides})


def cells_of(report):
    return {(c["method"], c["size"]): c for c in report["cells"]}


def test_without_the_flag_a_narrower_learngene_cell_is_na_and_names_the_flag(ancestry, tmp_path):
    report = bench(ancestry, "fashion-mnist-mini", tmp_path / "bench", settings(), notify=lambda m: None)
    cells = cells_of(report)
    assert cells[("tleg", "1x16")]["status"] == "n/a"
    assert cells[("tleg", "1x16")]["reason"].endswith("; lg bench --learngene-widths condenses it at the bench's "
                                                      "widths")
    assert cells[("tleg", "2x32")]["status"] == "done"
    assert cells[("select", "1x16")]["status"] == "done"


def test_with_the_flag_the_learngene_is_trained_at_the_bench_widths_and_builds_each(ancestry, tmp_path):
    from lgcli.learngene_files import load_learngene
    from lgcli.learngenes import get_kind
    from lgcli.resize import expand

    out = tmp_path / "bench"
    report = bench(ancestry, "fashion-mnist-mini", out, settings(learngene_widths=True), notify=lambda m: None)
    cells = cells_of(report)
    for size, width in (("1x16", 16), ("2x32", 32)):
        assert cells[("tleg", size)]["status"] == "done"
        assert cells[("tleg", size)]["row"]["architecture"]["width"] == width
    learngene = load_learngene(out / "learngenes" / "tleg.lg.safetensors")
    assert get_kind("tleg").trained_widths(learngene) == (16, 32)
    # The narrow cell's model is the learngene's own 16-wide descendant (lg grow LG --depth 1 --width 16),
    # not a resize of its 32-wide one: an untrained width would have been refused above.
    spec, _, _ = expand(learngene, depth=1, width=16, seed=0, notify=lambda m: None)
    assert (spec.depth, spec.width, spec.heads) == (1, 16, 1)


def test_width_options_only_where_a_size_needs_them(ancestry):
    from lgcli.loading import load_model

    _, spec = load_model(ancestry)
    narrow = settings(learngene_widths=True)
    assert narrow.learngene_options("tleg", spec) == {"widths": "16,32", "width_rule": "sandwich"}
    assert narrow.condense_key("tleg", spec)["options"] == {"widths": "16,32", "width_rule": "sandwich"}
    # Off, or every size at the ancestry's width: the key earlier versions wrote, so saved cells stay reused.
    assert "options" not in settings().condense_key("tleg", spec)
    own = settings(learngene_widths=True, sizes=parse_sizes("1x32,3x32"))
    assert own.learngene_options("tleg", spec) == {} and "options" not in own.condense_key("tleg", spec)
    # A wider size is not a width the learngene can train (nested slices of its own width).
    wide = settings(learngene_widths=True, sizes=parse_sizes("1x16,2x64"))
    assert wide.learngene_options("tleg", spec)["widths"] == "16,32"


def test_depth_options_span_the_bench_depths_for_kinds_that_draw_depths(ancestry):
    from lgcli.loading import load_model

    _, spec = load_model(ancestry)
    deep = settings(learngene_depths=True, sizes=parse_sizes("3x32,1x32,2x32"))
    for kind in ("tleg", "wave", "sws", "lets"):
        assert deep.learngene_options(kind, spec) == {"depths": "1-3"}, kind
    assert deep.learngene_options("peg", spec) == {}  # PEG is sampled: it draws no depths
    both = settings(learngene_depths=True, learngene_widths=True)
    assert both.learngene_options("sws", spec) == {"widths": "16,32", "width_rule": "sandwich", "depths": "1-2"}
    assert both.condense_key("sws", spec)["options"]["depths"] == "1-2"


def test_with_depths_the_learngene_records_the_bench_depths_it_trained_at(ancestry, tmp_path):
    from lgcli.learngene_files import load_learngene

    out = tmp_path / "bench"
    # SWS trains its auxiliary depth (2) alone by default; with the flag, 1 and 2.
    report = bench(ancestry, "fashion-mnist-mini", out,
                   settings(learngene_depths=True, methods=["sws"], sizes=parse_sizes("1x32,2x32")),
                   notify=lambda m: None)
    assert {c["status"] for c in report["cells"]} == {"done"}
    assert report["settings"]["learngene_depths"] is True
    learngene = load_learngene(out / "learngenes" / "sws.lg.safetensors")
    assert learngene.sizes["trained_depths"] == [1, 2]
