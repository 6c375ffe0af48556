"""Learngenes: WAVE's Kronecker rule and Eq. B.1 by hand, TLEG's Eq. 1 exactly,
condense end to end through the CLI, exact resume, pipes with provenance, and
every descendant loading strictly in timm."""

from __future__ import annotations

import json
import math
import re

import pytest
import timm
import torch
import torch.nn.functional as F

import lgcli
import lgcli.resize
from lgcli.checkpoint import read_bytes, read_checkpoint
from lgcli.condense import CondenseSettings, condense
from lgcli.data import load_data
from lgcli.fitting import fit_on_data
from lgcli.learngenes import GeneratedModel, get_kind
from lgcli.learngenes.tleg import KIND as TLEG
from lgcli.learngenes.wave import KIND as WAVE
from lgcli.learngenes.wave import kronecker_sum, linear_padding_scalers, parse_templates
from lgcli.options import resolve_options
from lgcli.sizing import target_spec
from lgcli.losses import distillation_loss
from lgcli.train import TrainConfig, train

from conftest import sample_input

TEACHER = dict(depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28, in_chans=1, num_classes=10)
FAST = ["--batch-size", "32", "--subset", "256", "--test-subset", "100"]


@pytest.fixture(scope="module")
def data():
    return load_data(subset=256, test_subset=100, seed=0)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, data):
    """A tiny timm ViT trained a few steps, so its logits carry something."""
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", **TEACHER)
    train(model, data.train, TrainConfig(steps=30, batch_size=32, lr=2e-3, progress=False))
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    lgcli.save_model(model.eval(), path)
    return path


@pytest.fixture(scope="module")
def genes(tmp_path_factory, teacher):
    """A TLEG and a WAVE learngene condensed from the teacher through the CLI."""
    from lgcli.cli import main

    folder = tmp_path_factory.mktemp("genes")
    reports = {}
    for method, extra in (("tleg", []), ("wave", ["--template-dim", "16"])):
        out = folder / f"{method}.lg.safetensors"
        args = ["condense", str(teacher), "--method", method, "--data", "fashion-mnist-mini", "--steps", "12",
                "--aux-depth", "3", "-o", str(out), "--json", *FAST, *extra]
        reports[method] = _run_json(main, args)
    return folder, reports


def _run_json(main, args):
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            main(args)
        except SystemExit as exc:
            assert not exc.code, f"lg {' '.join(args)} exited {exc.code}"
    return json.loads(buffer.getvalue())


def strict_load(path):
    """The exact line `lg inspect` prints, evaluated: a strict timm load."""
    report = lgcli.inspect_checkpoint(path)
    return eval(report["load_call"].replace("'" + str(path) + "'", repr(str(path))), {"timm": timm}), report


# ---------------------------------------------------------------- WAVE's formulas by hand

def test_kronecker_layout_entry_by_entry():
    torch.manual_seed(0)
    templates = torch.randn(2, 3, 4)        # N = 2 templates of 3 x 4
    scalers = torch.randn(5, 2, 2, 3)       # L = 5 layers, s = (2, 3)
    built = kronecker_sum(templates, scalers)
    assert built.shape == (5, 6, 12)
    for layer in range(5):
        for r in range(3):
            for c in range(4):
                for a in range(2):
                    for b in range(3):
                        expected = sum(templates[t, r, c] * scalers[layer, t, a, b] for t in range(2))
                        assert torch.isclose(built[layer, r * 2 + a, c * 3 + b], expected, atol=1e-6)
        # ... which is torch.kron's layout.
        assert torch.allclose(built[layer], sum(torch.kron(templates[t], scalers[layer, t]) for t in range(2)))
    vector_t, vector_s = torch.randn(4, 3), torch.randn(2, 4, 2)
    built = kronecker_sum(vector_t, vector_s)
    assert torch.allclose(built[1, 2 * 2 + 1], sum(vector_t[t, 2] * vector_s[1, t, 1] for t in range(4)))


def test_eq_b1_on_qkv_gives_tleg_interleaved():
    """qkv with s = 3 and N = 6: W = [T1 + (l/L) T4 | T2 + (l/L) T5 | T3 + (l/L) T6], interleaved."""
    depth = 4
    scalers = linear_padding_scalers(depth, 6, (3, 1), torch.Generator().manual_seed(0))
    assert scalers.shape == (depth, 6, 3, 1)
    # Every entry is alpha_t at (i, j) or 0, up to the eps = 1e-6 noise.
    for layer in range(1, depth + 1):
        expected = torch.zeros(6, 3, 1)
        for t in range(1, 7):
            expected[t - 1, (t - 1) % 3, 0] = 1.0 if t <= 3 else layer / depth
        assert (scalers[layer - 1] - expected).abs().max() < 1e-5
    templates = torch.randn(6, 5, 7)
    built = kronecker_sum(templates, scalers)
    for layer in range(1, depth + 1):
        for a in range(3):
            rows = built[layer - 1, a::3]           # rows r * 3 + a
            expected = templates[a] + (layer / depth) * templates[a + 3]
            assert torch.allclose(rows, expected, atol=1e-4)


def test_eq_b1_indices_when_the_scaler_is_wider():
    # s = (2, 2), N = 6: t -> (i, j) = (0,0) (0,1) (1,0) (1,1) (0,0) (0,1); alpha 1 for t <= 3.
    scalers = linear_padding_scalers(2, 6, (2, 2), torch.Generator().manual_seed(1))
    exact = torch.zeros(2, 6, 2, 2)
    for layer, x in ((0, 0.5), (1, 1.0)):
        for t, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1)], start=1):
            exact[layer, t - 1, i, j] = 1.0 if t <= 3 else x
    assert (scalers - exact).abs().max() < 1e-5


def test_templates_option_parses_and_refuses():
    assert parse_templates("qkv=64x64@6, norm1_weight=64@4") == {"qkv": ((64, 64), 6), "norm1_weight": ((64,), 4)}
    for bad in ("qkv=64x64", "qkv=axb@2", "qkv=0x4@2"):
        with pytest.raises(lgcli.LgError, match="--templates"):
            parse_templates(bad)


def test_distillation_loss_is_the_stated_formula():
    torch.manual_seed(0)
    student, teacher, labels = torch.randn(4, 5), torch.randn(4, 5), torch.tensor([0, 3, 1, 4])
    alpha, tau = 0.3, 2.0
    p_teacher = torch.softmax(teacher / tau, dim=-1)
    kl = (p_teacher * (p_teacher.log() - torch.log_softmax(student / tau, dim=-1))).sum(-1).mean()
    expected = (1 - alpha) * F.cross_entropy(student, labels) + alpha * tau * tau * kl
    assert torch.isclose(distillation_loss(alpha, tau)(student, labels, teacher), expected, atol=1e-6)
    assert torch.isclose(distillation_loss(0.0)(student, labels, None), F.cross_entropy(student, labels))


# ---------------------------------------------------------------- TLEG Eq. 1 exactly

def test_tleg_auxiliary_and_descendant_blocks_are_eq_1(genes, tmp_path, lg):
    folder, _ = genes
    gene = lgcli.load_learngene(folder / "tleg.lg.safetensors")
    assert gene.kind == "tleg" and gene.spec.depth == 3
    A = {n[2:]: t for n, t in gene.tensors.items() if n.startswith("A.")}
    B = {n[2:]: t for n, t in gene.tensors.items() if n.startswith("B.")}
    assert set(A) == set(B) and {"q", "k", "v", "o", "fc1", "fc2", "norm1_weight"} <= set(A)

    # The auxiliary model trained by condense: its block l is B + ((l - 1) / L) A.
    aux = GeneratedModel(gene.spec, TLEG.build, gene.tensors).build_stack()
    for role in A:
        for l in range(3):
            assert torch.equal(aux.layers[role].data[l], B[role] + (torch.tensor(float(l)) / 3) * A[role]), role

    # A grown descendant, read back from its file: the same rule at L = 9.
    out = tmp_path / "d9.safetensors"
    assert lg("grow", str(folder / "tleg.lg.safetensors"), "--depth", "9", "-o", str(out)).code == 0
    state = read_checkpoint(out).tensors
    for l in range(9):
        x = torch.tensor(float(l)) / 9
        qkv = torch.cat([B[r] + x * A[r] for r in ("q", "k", "v")])
        assert torch.equal(state[f"blocks.{l}.attn.qkv.weight"], qkv)
        assert torch.equal(state[f"blocks.{l}.mlp.fc1.weight"], B["fc1"] + x * A["fc1"])
        assert torch.equal(state[f"blocks.{l}.norm2.bias"], B["norm2_bias"] + x * A["norm2_bias"])


def test_tleg_initialisation_follows_spec(data):
    model = timm.create_model("vit_base_patch16_224", **TEACHER)
    spec, stack = lgcli.spec_of_model(model)
    tensors, frozen = TLEG.initial(spec, stack, {}, torch.Generator().manual_seed(0))
    assert frozen == {}
    assert torch.equal(tensors["B.norm1_weight"], torch.ones(32)) and not tensors["A.norm1_weight"].any()
    assert not tensors["A.fc1_bias"].any() and not tensors["B.q_bias"].any()
    assert abs(float(tensors["A.fc1"].std()) - 0.02) < 0.003 and abs(float(tensors["B.o"].std()) - 0.02) < 0.004


def test_generated_model_is_timm_with_the_built_weights(genes):
    """The learngene's auxiliary model runs timm's own forward: it equals a
    timm model loaded strictly with the materialised weights."""
    folder, _ = genes
    for method in ("tleg", "wave"):
        gene = lgcli.load_learngene(folder / f"{method}.lg.safetensors")
        kind = get_kind(method)
        if method == "wave":  # the descendant at the learngene's own size: its kept scalers
            model = kind.prepare(gene, gene.spec, resolve_options("wave", kind.expand_options, {}))
        else:
            model = GeneratedModel(gene.spec, kind.build, gene.tensors)
        model.eval()
        adapter = lgcli.api.get_adapter("vit")
        reference = adapter.load_model(gene.spec, model.materialise()).eval()
        x = torch.randn(3, 1, 28, 28)
        with torch.no_grad():
            assert torch.allclose(model(x), reference(x), atol=1e-6)


# ---------------------------------------------------------------- condense end to end

def test_condense_runs_through_the_cli_and_its_loss_falls(genes):
    _, reports = genes
    for method, report in reports.items():
        assert report["method"] == method and report["steps"] == 12
        assert report["loss_last"] < report["loss_first"], method
        assert 0 <= report["accuracy"]["top1"] <= 100 and report["test_images"] == 100
        assert report["parameters"]["learngene"] < report["parameters"]["teacher"] * 1.5


def test_learngene_file_records_what_it_is(genes, teacher, lg):
    folder, _ = genes
    result = lg("inspect", str(folder / "wave.lg.safetensors"), "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kind"] == "learngene" and report["learngene"] == "wave"
    assert report["aux_depth"] == 3 and report["width"] == 32 and report["sizes"]["template_dim"] == 16
    # Two templates per 16 x 16 block of the 32-wide auxiliary model: qkv 96 x 32 is 6 x 2 blocks, fc1 128 x 32 is 8 x 2
    assert report["templates"]["qkv"] == "16x16 @ 24" and report["templates"]["fc1"] == "16x16 @ 32"
    assert report["widths"][:3] == [16, 32, 48]
    assert report["teacher"]["file"] == teacher.name
    assert report["accuracy"]["top1"] >= 0 and report["condensed"]["steps"] == 12
    names = set(read_checkpoint(folder / "wave.lg.safetensors").tensors)
    # The auxiliary model's scalers are kept beside the templates (tests/test_wave_scalers.py).
    assert "T.qkv" in names and "global.pos_embed" in names and "S.qkv" in names
    table = lg("inspect", str(folder / "tleg.lg.safetensors"))
    assert b"learngene (tleg)" in table.stdout and b"lg grow" in table.stdout


def test_resumed_condense_ends_with_the_same_learngene(teacher, data, tmp_path):
    settings = dict(steps=6, batch_size=32, lr=2e-3, progress=False)
    reference, _, _ = condense(teacher, data, method="wave", aux_depth=2, options={"template_dim": 16},
                               settings=CondenseSettings(**settings), notify=lambda m: None)

    class Stop(Exception):
        pass

    def stop_at_4(step, model):
        if step == 4:
            raise Stop

    checkpoint = str(tmp_path / "run.pt")
    with pytest.raises(Stop):
        condense(teacher, data, method="wave", aux_depth=2, options={"template_dim": 16}, notify=lambda m: None,
                 settings=CondenseSettings(**settings, checkpoint=checkpoint, checkpoint_every=2), on_step=stop_at_4)
    resumed, _, report = condense(teacher, data, method="wave", aux_depth=2, options={"template_dim": 16},
                                  notify=lambda m: None,
                                  settings=CondenseSettings(**settings, checkpoint=checkpoint, resume=True))
    assert report["resumed_from"] == 4
    assert reference.tensors.keys() == resumed.tensors.keys()
    for name in reference.tensors:
        assert torch.equal(reference.tensors[name], resumed.tensors[name]), name


def test_condense_pipe_into_grow_chains_provenance(teacher, tmp_path, lg):
    piped = lg("condense", str(teacher), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "3",
               "--aux-depth", "2", "-o", "-", *FAST)
    assert piped.code == 0, piped.stderr
    assert read_bytes(piped.stdout).lg["kind"] == "learngene"   # stdout: the learngene alone
    out = tmp_path / "d.safetensors"
    grown = lg("grow", "-", "--depth", "9", "-o", str(out), stdin=piped.stdout)
    assert grown.code == 0, grown.stderr
    model, report = strict_load(out)
    assert report["depth"] == 9
    chain = report["provenance"]
    assert [step.get("kind") for step in chain] == ["model", "learngene", "model"]
    assert chain[0]["method"] == "tleg" and chain[1]["method"] == "tleg" and chain[2]["file"] == teacher.name
    assert model(sample_input(model)).shape == (2, 10)


# ---------------------------------------------------------------- growing

@pytest.mark.parametrize("method,sizes", [
    ("tleg", ["--depth", "1"]), ("tleg", ["--depth", "12"]),
    ("wave", ["--depth", "5"]), ("wave", ["--depth", "2", "--width", "64"]),
    ("wave", ["--depth", "4", "--width", "16", "--heads", "1"]),
])
def test_every_descendant_loads_strictly_and_runs(genes, tmp_path, lg, method, sizes):
    folder, _ = genes
    command = "shrink" if "16" in sizes else "grow"
    out = tmp_path / "d.safetensors"
    result = lg(command, str(folder / f"{method}.lg.safetensors"), *sizes, "-o", str(out))
    assert result.code == 0, result.stderr
    model, report = strict_load(out)
    assert report["depth"] == int(sizes[1])
    assert model(sample_input(model)).shape == (2, 10)
    if method == "wave":
        assert "not fitted" in result.stderr


def test_wave_fitting_lowers_the_loss_and_keeps_templates(genes, teacher):
    folder, _ = genes
    gene = lgcli.load_learngene(folder / "wave.lg.safetensors")
    templates = {n: t.clone() for n, t in gene.tensors.items() if n.startswith("T.")}
    target = target_spec(gene.spec, depth=4, width=64)
    options = resolve_options("wave", WAVE.expand_options,
                              {"data": "fashion-mnist-mini", "subset": "256", "steps": 25, "lr": 3e-3,
                               "teacher": str(teacher)})
    model = WAVE.prepare(gene, target, options)
    report = fit_on_data(model, gene, options, 0, "the scalers")
    assert report["fitted"] and report["steps"] == 25
    assert report["loss_last"] < report["loss_first"]
    frozen = dict(model.tensors())
    for name, before in templates.items():
        assert torch.equal(frozen[name], before), name                        # bitwise unchanged
        assert torch.equal(gene.tensors[name], before), name
    assert not any(name.startswith("T.") for name, p in model.named_parameters())


def test_wave_grow_with_data_records_the_fit(genes, tmp_path, lg):
    folder, _ = genes
    out = tmp_path / "fitted.safetensors"
    result = lg("grow", str(folder / "wave.lg.safetensors"), "--depth", "4", "--width", "48", "--data",
                "fashion-mnist-mini", "--subset", "128", "--steps", "4", "--batch-size", "32", "-o", str(out),
                "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["details"]["fitted"] and report["details"]["steps"] == 4
    assert report["target"]["width"] == 48 and report["target"]["heads"] == 3
    strict_load(out)
    # The same seed gives the same bytes: the fit's data order and Eq. B.1's noise are seeded.
    again = tmp_path / "again.safetensors"
    result = lg("grow", str(folder / "wave.lg.safetensors"), "--depth", "4", "--width", "48", "--data",
                "fashion-mnist-mini", "--subset", "128", "--steps", "4", "--batch-size", "32", "-o", str(again))
    assert result.code == 0 and again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("method,args,message,code", [
    ("tleg", ["--depth", "4", "--width", "64"], "its own width 32", 1),
    ("wave", ["--depth", "4", "--width", "40", "--heads", "5"], "Valid widths: 16, 32, 48", 1),
    ("tleg", ["--depth", "4", "--method", "bot"], "--method does not apply", 2),  # a flag that does not apply: usage
    ("tleg", ["--depth", "4", "--steps", "5"], "--steps does not apply to a tleg learngene", 2),
    ("wave", ["--depth", "4", "--wavelet", "haar"], "--wavelet does not apply", 2),
    ("wave", ["--width", "64"], None, 0),  # valid: depth defaults to the learngene's
])
def test_bad_requests_get_one_line_and_no_output(genes, tmp_path, lg, method, args, message, code):
    folder, _ = genes
    out = tmp_path / "bad.safetensors"
    result = lg("grow", str(folder / f"{method}.lg.safetensors"), *args, "-o", str(out))
    if message is None:
        assert result.code == 0 and out.exists()
        return
    assert result.code == code and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("args,message", [
    (["--method", "bogus", "--steps", "2"], "unknown learngene kind"),
    (["--method", "tleg", "--steps", "2", "--template-dim", "16"], "--template-dim does not apply"),
    (["--method", "wave", "--steps", "2", "--templates", "qkv=20x16@6"], "no whole multiple"),
    (["--method", "tleg", "--steps", "2", "--epochs", "1"], "not both"),
    (["--method", "tleg", "--steps", "2", "--alpha", "1.5"], "--alpha must be at most 1"),
])
def test_condense_refuses_bad_requests(teacher, tmp_path, lg, args, message):
    out = tmp_path / "x.lg.safetensors"
    result = lg("condense", str(teacher), "--data", "fashion-mnist-mini", *FAST, "-o", str(out), *args)
    assert result.code != 0 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not out.exists()


def test_the_default_condense_length_is_the_measured_budget():
    """Neither --steps nor --epochs: the budget docs/learngenes.md measured."""
    from lgcli.options import DEFAULT_CONDENSE_BATCH_SIZE, DEFAULT_CONDENSE_STEPS

    settings = CondenseSettings()
    assert settings.total_steps(60_000) == DEFAULT_CONDENSE_STEPS == 600
    assert settings.batch_size == DEFAULT_CONDENSE_BATCH_SIZE == 64
    assert CondenseSettings(epochs=1, batch_size=100).total_steps(60_000) == 600


def test_a_learngene_is_not_a_teacher(genes, tmp_path, lg):
    folder, _ = genes
    out = tmp_path / "x.lg.safetensors"
    result = lg("condense", str(folder / "tleg.lg.safetensors"), "--method", "tleg", "--data",
                "fashion-mnist-mini", "--steps", "2", "-o", str(out))
    assert result.code == 1 and "learngene" in result.stderr and not out.exists()


def test_a_learngene_is_not_a_model(genes, lg):
    folder, _ = genes
    with pytest.raises(lgcli.LgError, match="is a learngene, not a model"):
        lgcli.load_model(folder / "tleg.lg.safetensors")
    result = lg("eval", str(folder / "tleg.lg.safetensors"))
    assert result.code == 1 and "lg grow" in result.stderr


def test_declared_options_become_flags_with_a_panel_per_owner(lg):
    help_text = lg("grow", "--help").stdout.decode()
    for text in ("Options of bot", "--wavelet", "Options of clone", "--insert", "Options of wave learngene",
                 "--fit-globals"):
        assert text in help_text, text
    # --device places a plain model's resize too: in the Method panel, not only its learngene owners'.
    panels = re.split(r"╭─ ", help_text)
    assert [panel.split(" ─")[0] for panel in panels if "--device" in panel] == ["Method"]
    condense_help = lg("condense", "--help").stdout.decode()
    assert "Options of tleg, wave" in condense_help and "--template-dim" in condense_help
    from lgcli.methods import get_method
    from lgcli.methods import resolve_options as method_options

    with pytest.raises(lgcli.LgError, match="--insert does not apply to method 'bot'"):
        method_options(get_method("bot"), {"insert": "top"})
    assert method_options(get_method("clone"), {"insert": "top"}) == {"insert": "top"}


def test_a_learngene_at_its_own_depth_builds_its_auxiliary_model(genes):
    # A learngene at its own auxiliary depth builds exactly the auxiliary model.
    folder, _ = genes
    gene = lgcli.load_learngene(folder / "tleg.lg.safetensors")
    spec, stack, report = lgcli.resize.expand(gene, depth=gene.spec.depth, notify=lambda m: None)
    assert spec.depth == gene.spec.depth and math.isclose(report["parameters"]["source"], gene.num_parameters())
    built = GeneratedModel(gene.spec, TLEG.build, gene.tensors).materialise()
    for role, named in stack.layers.items():
        assert torch.equal(named.data, built.layers[role].data)


def test_tleg_depths_train_at_a_drawn_depth_and_evaluate_at_the_auxiliary_one(genes):
    folder, _ = genes
    gene = lgcli.load_learngene(folder / "tleg.lg.safetensors")
    model = GeneratedModel(gene.spec, TLEG.build, gene.tensors, depths=TLEG.training_depths(gene.spec, {"depths": "1-4"}))
    assert model.depths == (1, 2, 3, 4)
    x = torch.randn(2, 1, 28, 28)
    adapter = lgcli.api.get_adapter("vit")

    def at_depth(depth):
        spec = gene.spec.with_sizes(depth=depth)
        return adapter.load_model(spec, GeneratedModel(spec, TLEG.build, gene.tensors).materialise()).eval()(x)

    with torch.no_grad():
        model.train()
        model.learngene["global:pos_embed"]  # parameters keep their role names, ':' for '.'
        drawn = []
        for seed in range(6):
            torch.manual_seed(seed)
            depth = int(torch.randint(4, ())) + 1
            torch.manual_seed(seed)
            model.eval()  # no dropout in these models: train/eval differ only by the depth
            model.training = True
            assert torch.allclose(model(x), at_depth(depth), atol=1e-5)
            drawn.append(depth)
        assert len(set(drawn)) > 1
        model.eval()
        assert torch.allclose(model(x), at_depth(gene.spec.depth), atol=1e-5)
    with pytest.raises(lgcli.LgError, match="--depths"):
        TLEG.training_depths(gene.spec, {"depths": "12-3"})


def test_same_condense_and_grow_write_identical_bytes(genes, teacher, tmp_path, lg):
    """Determinism, metadata included: condensing again with the same command
    and seed gives the fixture's learngene byte for byte (no wall time is
    recorded in the file), and growing it twice gives one file, for each kind
    (WAVE's scalers are seeded)."""
    from lgcli.cli import main

    folder, _ = genes
    again = tmp_path / "tleg.lg.safetensors"
    _run_json(main, ["condense", str(teacher), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "12",
                     "--aux-depth", "3", "-o", str(again), "--json", *FAST])
    assert again.read_bytes() == (folder / "tleg.lg.safetensors").read_bytes()
    for method in ("tleg", "wave"):
        grown = []
        for run in ("a", "b"):
            out = tmp_path / f"{method}-{run}.safetensors"
            result = lg("grow", str(folder / f"{method}.lg.safetensors"), "--depth", "5", "--seed", "3", "-o", out)
            assert result.code == 0, result.stderr
            grown.append(out.read_bytes())
        assert grown[0] == grown[1], method


def test_growing_a_learngene_finds_its_kind_once(genes, tmp_path, monkeypatch):
    """`lg grow WAVE.lg` looks the kind up once: expand checks the target
    with the kind it already holds (issue 29)."""
    folder, _ = genes
    looked_up = []

    def counted(name, spec=None):
        looked_up.append(name)
        return get_kind(name, spec)

    monkeypatch.setattr(lgcli.resize, "get_kind", counted)
    report = lgcli.resize.resize_file(folder / "wave.lg.safetensors", tmp_path / "out.safetensors",
                                      direction="grow", depth=4, notify=lambda message: None)
    assert report["target"]["depth"] == 4
    assert looked_up == ["wave"]


@pytest.mark.parametrize("args,sizes", [
    (["--depth", "3", "--width", "16", "--heads", "1", "--method", "select"], (3, 16, 1)),  # a shrink after the build
    (["--depth", "4", "--width", "48", "--heads", "3", "--method", "bot"], (4, 48, 3)),   # a grow after it
    (["--depth", "4", "--method", "bot"], (4, 32, 2)),                                     # the build alone
])
def test_a_method_given_to_a_learngene_of_its_own_rule_is_hinted_as_commands_that_run(genes, tmp_path, lg, args,
                                                                                       sizes):
    """WAVE builds by its own rule: `--method` is refused in one line whose
    commands, run as printed, build the model and resize it by that method
    (or build it alone when nothing else was asked)."""
    from printed import run_printed

    folder, _ = genes
    out = tmp_path / "hinted out.safetensors"  # a space: the printed commands quote it
    result = lg("grow", str(folder / "wave.lg.safetensors"), *args, "-o", str(out))
    line = result.stderr.strip()
    assert result.code == 2 and not out.exists() and "\n" not in line and "--method does not apply" in line
    command = line[line.index(": lg grow ") + 2:]
    assert "..." not in command and " LG " not in command and " OUT" not in command
    if args[-1] != "bot" or "--width" in args:
        assert f"--method {args[-1]}" in command
    done = run_printed(command)  # as a shell reads it
    assert done.code == 0, (command, done.stderr)
    model, _ = strict_load(out)
    assert (len(model.blocks), model.embed_dim, model.blocks[0].attn.num_heads) == sizes
