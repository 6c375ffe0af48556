"""Condensing from the ancestry (`--init`): TLEG's A and B are the least-squares
line through a hand-made 3-layer teacher, entry by entry; WAVE's templates
rebuild that same line under Eq. B.1's scalers (at the teacher's width and
with narrower templates); auto chooses the warm start exactly when the
auxiliary model has the teacher's width, and the file says which it took."""

from __future__ import annotations

import json

import pytest
import torch

import lgcli
from lgcli.api import load
from lgcli.arch import get_adapter
from lgcli.learngenes.tleg import KIND as TLEG
from lgcli.learngenes.wave import KIND as WAVE
from lgcli.learngenes.wave import FUSED, kronecker_sum, padding_templates
from lgcli.options import resolve_options
from lgcli.sizing import target_spec

from conftest import make_vit

FAST = ["--batch-size", "16", "--subset", "64", "--test-subset", "32", "--steps", "2"]


@pytest.fixture(scope="module")
def ancestry(tmp_path_factory):
    """A 3-layer, 32-wide ViT with every tensor random and non-trivial."""
    path = tmp_path_factory.mktemp("warm") / "teacher.safetensors"
    lgcli.save_model(make_vit(depth=3, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7,
                              num_classes=10), path)
    return path


def _initial(kind, loaded, options=None):
    resolved = resolve_options(kind.name, kind.condense_options, options or {})
    aux = target_spec(loaded.spec)
    aux_init = get_adapter(aux.family).random_stack(aux, seed=0)
    tensors, frozen = kind.initial(aux, aux_init, resolved, torch.Generator().manual_seed(0),
                                   ancestry=loaded.stack.materialized())
    assert frozen == {}
    return aux, tensors


def _line(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The least-squares line of 3 layers over x = 0, 1/3, 2/3, solved by hand:
    slope = sum (x - 1/3)(theta - mean) / (2/9) = 1.5 (theta_3 - theta_1);
    intercept = mean - slope / 3 = (5 theta_1 + 2 theta_2 - theta_3) / 6."""
    t1, t2, t3 = theta.double()
    return 1.5 * (t3 - t1), (5 * t1 + 2 * t2 - t3) / 6


def test_tleg_starts_at_the_least_squares_line_of_the_teacher(ancestry):
    loaded = load(ancestry)
    _, tensors = _initial(TLEG, loaded)
    roles = list(loaded.stack.layers)
    assert {f"A.{r}" for r in roles} | {f"B.{r}" for r in roles} <= set(tensors)
    for role in roles:
        slope, intercept = _line(loaded.stack.layers[role].data)
        torch.testing.assert_close(tensors[f"A.{role}"].double(), slope, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(tensors[f"B.{role}"].double(), intercept, rtol=1e-6, atol=1e-6)
    for role, named in loaded.stack.globals.items():  # the teacher's own embeddings, norm and head
        assert torch.equal(tensors[f"global.{role}"], named.data.float())


@pytest.mark.parametrize("template_dim", [None, 16])
def test_wave_templates_rebuild_the_same_line_under_eq_b1(ancestry, template_dim):
    """Under Eq. B.1's scalers without noise, the warm templates give every
    layer the least-squares line's value: at the teacher's width (Table C.2:
    one template at 1 and one at l / L per block, Prop. 1) and with templates
    half as wide (two per 16 x 16 block)."""
    loaded = load(ancestry)
    aux, tensors = _initial(WAVE, loaded, {"template_dim": template_dim})
    for name, templates in tensors.items():
        if not name.startswith("T."):
            continue
        role = name[2:]
        noisy = tensors[f"S.{role}"]
        exact = noisy.round()  # Eq. B.1 without its 1e-6 noise: alpha_t at one block, l / L or 1
        exact[exact == 0] = 0
        for layer in range(aux.depth):  # the l / L entries are not whole: put them back
            exact[layer][(noisy[layer] - (layer + 1) / aux.depth).abs() < 1e-4] = (layer + 1) / aux.depth
        built = kronecker_sum(templates, exact)
        parts = FUSED.get(role, (role,))
        theta = torch.cat([loaded.stack.layers[p].data.float() for p in parts], dim=1)
        slope, intercept = _line(theta)
        expected = torch.stack([intercept + x * slope for x in (0.0, 1 / 3, 2 / 3)])
        torch.testing.assert_close(built.double(), expected, rtol=1e-5, atol=1e-5)


def test_padding_templates_by_hand():
    """One 2 x 2 matrix over 2 layers, 1 x 1 templates (s = 2 x 2), 8 templates:
    block (a, b) gets template t = 2a + b + 1 at weight 1 and t + 4 at l / 2, so
    W_l[a, b] = T_t + (l / 2) T_(t+4): from W_1 = 1..4 and W_2 = 3..6 (slope 2
    per unit of l / 2, so T_(t+4) = 4 and T_t = W_1 - 2)."""
    weights = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[3.0, 4.0], [5.0, 6.0]]])
    templates = padding_templates(weights, 8, (2, 2))
    assert templates.shape == (8, 1, 1)
    torch.testing.assert_close(templates.flatten(), torch.tensor([-1.0, 0.0, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]))


def test_auto_starts_from_the_teacher_only_at_its_width(ancestry, tmp_path, lg):
    warm = lg("condense", str(ancestry), "--method", "tleg", "--data", "fashion-mnist-mini",
              "-o", str(tmp_path / "warm.lg.safetensors"), "--json", *FAST)
    assert warm.code == 0, warm.stderr
    assert json.loads(warm.stdout)["options"]["init"] == "ancestry"
    assert "started from the teacher" in warm.stderr
    narrow = lg("condense", str(ancestry), "--method", "tleg", "--data", "fashion-mnist-mini", "--aux-width", "64",
                "--aux-heads", "1", "-o", str(tmp_path / "narrow.lg.safetensors"), "--json", *FAST)
    assert narrow.code == 0, narrow.stderr
    assert json.loads(narrow.stdout)["options"]["init"] == "random"
    inspected = json.loads(lg("inspect", str(tmp_path / "warm.lg.safetensors"), "--json").stdout)
    assert inspected["provenance"][0]["options"]["init"] == "ancestry"


def test_init_ancestry_at_another_width_is_refused_in_one_line(ancestry, tmp_path, lg):
    out = tmp_path / "x.lg.safetensors"
    result = lg("condense", str(ancestry), "--method", "wave", "--data", "fashion-mnist-mini", "--init", "ancestry",
                "--aux-width", "64", "--aux-heads", "1", "-o", str(out), *FAST)
    assert result.code != 0 and not out.exists()
    assert result.stderr.count("\n") == 1 and "--init ancestry needs the auxiliary model at the teacher's width" in \
        result.stderr, result.stderr


def test_an_auxiliary_width_of_no_whole_heads_names_the_flag_that_sets_them(ancestry, tmp_path, lg):
    out = tmp_path / "x.lg.safetensors"
    result = lg("condense", str(ancestry), "--method", "tleg", "--data", "fashion-mnist-mini", "--aux-width", "24",
                "-o", str(out), *FAST)
    assert result.code != 0 and not out.exists()
    assert result.stderr.strip().endswith("; or pass --aux-heads)"), result.stderr  # lg condense has no --heads


def test_init_random_is_the_papers_start(ancestry, tmp_path, lg):
    """--init random gives the same learngene as before --init existed: A and B
    trunc-normal, the gains at 1 (A 0), the family's random globals."""
    out = tmp_path / "cold.lg.safetensors"
    result = lg("condense", str(ancestry), "--method", "tleg", "--data", "fashion-mnist-mini", "--init", "random",
                "-o", str(out), "--json", *FAST)
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["options"]["init"] == "random"
    loaded = load(ancestry)
    resolved = resolve_options("tleg", TLEG.condense_options, {"init": "random"})
    aux = target_spec(loaded.spec)
    cold, _ = TLEG.initial(aux, get_adapter("vit").random_stack(aux, seed=0), resolved,
                           torch.Generator().manual_seed(0))
    assert torch.equal(cold["A.norm1_weight"], torch.zeros(32)) and torch.equal(cold["B.norm1_weight"], torch.ones(32))
    assert float(cold["A.q"].std()) < 0.03


# ---------------------------------------------------------------- the stopping rule

def _condense_json(lg, ancestry, tmp_path, *extra):
    result = lg("condense", str(ancestry), "--method", "tleg", "--data", "fashion-mnist-mini",
                "-o", str(tmp_path / "gene.lg.safetensors"), "--json", "--batch-size", "16", "--subset", "200",
                "--test-subset", "32", *extra)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_until_stops_at_the_first_check_that_reaches_the_fraction(ancestry, tmp_path, lg):
    """Checked every 5 steps: a fraction any trained model reaches stops the run
    at step 5 (step 0 is scored, never a stop), and the file records it."""
    report, stderr = _condense_json(lg, ancestry, tmp_path, "--steps", "40", "--until", "0.01", "--until-every", "5")
    assert report["steps"] == 5
    until = report["until"]
    assert until["stopped"] == "reached 0.01 of the teacher" and until["cap"] == 40 and until["steps_run"] == 5
    assert [c["step"] for c in until["checks"]] == [0, 5]
    assert until["held_out"] == 10  # 5 % of the 200 train images, taken out of training
    assert "stopping at step 5" in stderr
    inspected = json.loads(lg("inspect", str(tmp_path / "gene.lg.safetensors"), "--json").stdout)
    assert inspected["condensed"]["steps"] == 5 and inspected["condensed"]["until"]["stopped"] == until["stopped"]


def test_until_gives_up_after_three_checks_without_a_new_best(ancestry, tmp_path, lg):
    """A rate too small to move anything: the held-out figure never improves on
    step 0's, so the run stops at the third check after it (step 15 of 100)."""
    report, _ = _condense_json(lg, ancestry, tmp_path, "--init", "random", "--steps", "100", "--lr", "1e-12",
                               "--until", "1", "--until-every", "5")
    assert report["steps"] == 15
    assert report["until"]["stopped"] == "no new best in 3 checks"
    assert [c["step"] for c in report["until"]["checks"]] == [0, 5, 10, 15]


def test_until_runs_to_the_cap_when_it_keeps_improving_or_is_never_reached(ancestry, tmp_path, lg):
    report, _ = _condense_json(lg, ancestry, tmp_path, "--init", "random", "--steps", "6", "--until", "1",
                               "--until-every", "100")
    assert report["steps"] == 6 and report["until"]["stopped"] == "step cap"


@pytest.mark.parametrize("bad", ["0", "1.5", "nan"])
def test_until_outside_0_1_is_refused_in_one_line(ancestry, tmp_path, lg, bad):
    result = lg("condense", str(ancestry), "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2",
                "--until", bad, "-o", str(tmp_path / "x.lg.safetensors"))
    assert result.code != 0 and result.stderr.count("\n") == 1 and "--until" in result.stderr, result.stderr
    assert not (tmp_path / "x.lg.safetensors").exists()


# ---------------------------------------------------------------- --device auto

@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: auto picks it (the test below)")
def test_device_auto_picks_the_cpu_here_and_says_so(ancestry, tmp_path, lg):
    _, stderr = _condense_json(lg, ancestry, tmp_path, "--steps", "2")
    assert "--device auto: running on the CPU (no CUDA device found)" in stderr
    result = lg("eval", str(ancestry), "--test-subset", "32")
    assert result.code == 0 and "--device auto: running on the CPU" in result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the CUDA path runs where a GPU is lent")
def test_device_auto_condenses_on_cuda(ancestry, tmp_path, lg):
    report, stderr = _condense_json(lg, ancestry, tmp_path, "--steps", "4")
    assert "--device auto: running on CUDA" in stderr and report["steps"] == 4
    result = lg("grow", str(tmp_path / "gene.lg.safetensors"), "--depth", "4", "-o", str(tmp_path / "d.safetensors"))
    assert result.code == 0, result.stderr


def test_sws_says_where_its_start_is_not_the_teacher(ancestry, tmp_path, lg):
    """SWS from the teacher with fewer stages than its layers starts each stage
    as a mean of them, far from a pretrained teacher: lg says so and names
    the --stages that starts from the teacher itself; with that, it does not."""
    depth = load(ancestry).spec.depth
    shared = lg("condense", str(ancestry), "--method", "sws", "--data", "fashion-mnist-mini", "--stages", "2",
                "-o", str(tmp_path / "shared.lg.safetensors"), *FAST)
    assert shared.code == 0, shared.stderr
    assert "each of its 2 stages the mean of the teacher's layers it holds" in shared.stderr
    assert f"--stages {depth} starts from the teacher itself" in shared.stderr
    own = lg("condense", str(ancestry), "--method", "sws", "--data", "fashion-mnist-mini", "--stages", str(depth),
             "-o", str(tmp_path / "own.lg.safetensors"), *FAST)
    assert own.code == 0, own.stderr
    assert "started from the teacher" in own.stderr and "mean of the teacher's layers" not in own.stderr
