"""Growth that LLM users pick (SPEC.md): depth up-scaling (SOLAR), identity-block
insertion (LLaMA-Pro) and stacking (G_stack). Each rule layer by layer on a
hand-made stack; identity-insert keeps the logits of a ViT, GPT-2 and a
grouped-query Llama (and of the Hugging Face image families); every output
loads strictly in its ecosystem and runs, per stage on a Swin; refusals are
one line, exit non-zero and write nothing; a width change is refused with a
pipe that, run as printed, makes the model asked for."""

from __future__ import annotations

import re

import pytest
import timm
import torch

import lgcli
import lgcli.resize
from lgcli.methods import METHODS, MethodContext
from lgcli.methods.clone import BRANCH_OUTPUT_ROLES
from lgcli.methods.stages import run_per_stage
from lgcli.stack import LAYER_ROLE_AXES, ArchSpec, Named, Stack

from conftest import make_vit, sample_input
from printed import run_printed
from text_models import Sources, load_strict, outputs, token_ids

GROWTHS = ("depth-upscale", "identity-insert", "stack")


# ---------------------------------------------------------------- the rules, layer by layer

ROLES = ("q", "k", "v", "o", "o_bias", "fc1", "fc1_bias", "fc2", "fc2_bias", "norm1_weight", "norm2_weight")


def hand_made(depth: int) -> tuple[ArchSpec, Stack]:
    """Width 8 (2 heads of 4), MLP 16: every layer of every role a different
    random tensor, and one global (the final norm)."""
    spec = ArchSpec(family="vit", depth=depth, width=8, heads=2, head_dim=4, mlp_dim=16)
    sizes = {"layer": depth, **spec.axis_sizes()}
    generator = torch.Generator().manual_seed(depth)
    layers = {role: Named(torch.randn(*(sizes[a] for a in LAYER_ROLE_AXES[role]), generator=generator),
                          LAYER_ROLE_AXES[role]) for role in ROLES}
    return spec, Stack(layers=layers, globals={"norm_weight": Named(torch.randn(8, generator=generator), ("embed",))})


def grown(method: str, source_depth: int, target_depth: int) -> tuple[Stack, Stack, dict]:
    spec, stack = hand_made(source_depth)
    result = METHODS[method].run(stack, spec, spec.with_sizes(depth=target_depth), {}, MethodContext("grow"))
    return stack, result.stack.materialized(), result.report


# (source depth, target depth, the source layer each target layer is, 0-based; "*" marks a new identity block)
RULES = {
    "depth-upscale": [(4, 6, "0 1 2 1 2 3"),            # m = 1: [1..3] + [2..4]
                      (4, 8, "0 1 2 3 0 1 2 3"),        # m = 0: the two copies whole
                      (5, 8, "0 1 2 3 1 2 3 4"),        # m = 1 of an odd depth
                      (6, 8, "0 1 2 3 2 3 4 5"),        # m = 2: SOLAR's 32 -> 48 in small
                      (4, 4, "0 1 2 3")],               # a depth kept is kept
    "stack": [(3, 9, "0 1 2 0 1 2 0 1 2"), (2, 4, "0 1 0 1"), (3, 3, "0 1 2")],
    "identity-insert": [(4, 6, "0 1 1* 2 3 3*"),        # P = 2 divides L: groups of 2
                        (6, 9, "0 1 1* 2 3 3* 4 5 5*"),  # P = 3: groups of 2
                        (4, 8, "0 0* 1 1* 2 2* 3 3*"),   # P = L: one after every block
                        (4, 5, "0 1 2 3 3*"),            # P = 1: one group, the new block on top
                        (5, 7, "0 1 2 2* 3 4 4*")],      # P = 2 does not divide 5: groups of 3 and 2
}


@pytest.mark.parametrize("method, source_depth, target_depth, expected",
                         [(m, *case) for m, cases in RULES.items() for case in cases],
                         ids=[f"{m}-{s}to{t}" for m, cases in RULES.items() for s, t, _ in cases])
def test_each_target_layer_is_the_source_layer_the_rule_names(method, source_depth, target_depth, expected):
    source, target, report = grown(method, source_depth, target_depth)
    entries = expected.split()
    assert len(entries) == target_depth == target.depth
    for position, entry in enumerate(entries):
        layer, new = int(entry.rstrip("*")), entry.endswith("*")
        for role in ROLES:
            copied = target.layers[role].data[position]
            if new and role in BRANCH_OUTPUT_ROLES:
                assert not copied.any(), (position, role)  # the output projections of an identity block
            else:
                assert torch.equal(copied, source.layers[role].data[layer]), (position, role)
    assert torch.equal(target.globals["norm_weight"].data, source.globals["norm_weight"].data)
    assert report["layers"] == [int(entry.rstrip("*")) for entry in entries]
    if method == "identity-insert":
        assert report["new_layers"] == [i for i, entry in enumerate(entries) if entry.endswith("*")]


def test_each_stage_of_a_model_of_stages_follows_the_rule():
    """Per stage (Swin): each stage grown as a model of its own, a stage whose depth is kept kept."""
    (first, first_stack), (second, second_stack) = hand_made(2), hand_made(3)
    source = ArchSpec.of_stages("swin", (first, second), {})
    target = source.with_stages((first.with_sizes(depth=4), second))
    result = run_per_stage(METHODS["depth-upscale"], Stack(stages=(first_stack, second_stack)), source, target, {},
                           MethodContext("grow"))
    assert [stage["layers"] for stage in result.report["stages"]] == [[0, 1, 0, 1], [0, 1, 2]]
    stages = result.stack.stages
    assert torch.equal(stages[0].layers["fc1"].data, first_stack.layers["fc1"].data[[0, 1, 0, 1]])
    assert torch.equal(stages[1].layers["fc1"].data, second_stack.layers["fc1"].data)


@pytest.fixture(scope="module")
def vit_source(tmp_path_factory):
    model = make_vit(depth=4, embed_dim=64, num_heads=2)
    path = tmp_path_factory.mktemp("vit") / "src.safetensors"
    lgcli.save_model(model, path)
    return path, model


def tensors(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


@pytest.mark.parametrize("first, second, depth", [("identity-insert", "clone", 6), ("identity-insert", "clone", 8),
                                                  ("stack", "depth-upscale", 8)])
def test_where_the_methods_coincide(first, second, depth, vit_source, tmp_path):
    """docs/methods.md: identity-insert writes clone's tensors at the source's
    width (D <= 2L); stack at k = 2 is depth-upscale with no seam (m = 0)."""
    src, _ = vit_source
    for method in (first, second):
        lgcli.resize.resize_file(src, tmp_path / f"{method}.safetensors", direction="grow", method=method,
                                 depth=depth)
    a, b = tensors(tmp_path / f"{first}.safetensors"), tensors(tmp_path / f"{second}.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


# ---------------------------------------------------------------- identity-insert keeps the function

def test_identity_insert_keeps_a_vits_logits(tmp_path, lg):
    model = make_vit("layer-scale", depth=4, embed_dim=64, num_heads=2)
    src, out = tmp_path / "src.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(model, src)
    result = lg("grow", src, "--depth", "6", "--method", "identity-insert", "-o", out)
    assert result.code == 0, result.stderr
    call = lgcli.inspect_checkpoint(out)["load_call"]
    grown_model = eval(call, {"timm": timm}).eval()  # timm.create_model(..., pretrained=True): a strict load
    assert len(grown_model.blocks) == 6
    x = sample_input(model)
    with torch.no_grad():
        torch.testing.assert_close(grown_model(x), model(x), atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def text_sources(tmp_path_factory):
    return Sources(tmp_path_factory)


@pytest.mark.parametrize("variant, depth", [("gpt2-lm", 5), ("llama-gqa", 6), ("llama-tied", 4), ("qwen2", 5)])
def test_identity_insert_keeps_text_logits(variant, depth, text_sources, lg, tmp_path):
    src, model = text_sources(variant)
    out = tmp_path / "out"
    result = lg("grow", src, "--depth", depth, "--method", "identity-insert", "-o", out)
    assert result.code == 0, result.stderr
    reloaded = load_strict(out, variant)  # from_pretrained: nothing missing, unexpected or mismatched
    assert reloaded.config.num_hidden_layers == depth
    if hasattr(model.config, "num_key_value_heads"):  # grouped-query attention kept
        assert reloaded.config.num_key_value_heads == model.config.num_key_value_heads
    ids = token_ids()
    torch.testing.assert_close(outputs(reloaded, ids), outputs(model, ids), atol=1e-5, rtol=0)


# ---------------------------------------------------------------- every family loads strictly and runs

TEXT_FAMILIES = {"gpt2-lm": dict(n_layer=2), "llama-gqa": dict(num_hidden_layers=2),
                 "bert-mlm": dict(num_hidden_layers=2)}


@pytest.mark.parametrize("variant", sorted(TEXT_FAMILIES))
@pytest.mark.parametrize("method, depth", [("depth-upscale", 4), ("stack", 6), ("identity-insert", 3)])
def test_text_outputs_load_strictly_and_run(variant, method, depth, text_sources, lg, tmp_path):
    if method == "identity-insert" and variant == "bert-mlm":
        pytest.skip("post-norm: refused (test_identity_insert_refuses_a_post_norm_model)")
    src, model = text_sources(variant, **TEXT_FAMILIES[variant])
    out = tmp_path / "out"
    result = lg("grow", src, "--depth", depth, "--method", method, "-o", out)
    assert result.code == 0, result.stderr
    reloaded = load_strict(out, variant)
    assert reloaded.config.num_hidden_layers == depth
    assert reloaded.config.hidden_size == model.config.hidden_size
    logits = outputs(reloaded, token_ids())
    assert logits.shape == outputs(model, token_ids()).shape and torch.isfinite(logits).all()


def hf_image_cases():
    return [("test_hf_vit", "vit"), ("test_hf_vit", "deit-with-teacher"), ("test_hf_vision_families", "dinov2"),
            ("test_hf_vision_families", "dinov2-registers-classifier"), ("test_hf_vision_families", "clip-vision")]


@pytest.fixture(scope="module")
def hf_image_sources(tmp_path_factory):
    """(module, variant) -> (source folder, model, model class), each built once with its module's builder."""
    import importlib

    import transformers
    from hf_image_models import folder_builder

    made = {}

    def get(module_name: str, variant: str):
        if (module_name, variant) not in made:
            module = importlib.import_module(module_name)
            size = 16
            builder = folder_builder(tmp_path_factory, module.make_model, transformers.ViTImageProcessor(
                size={"height": size, "width": size}))
            folder, model = builder(variant)
            model_class = module.VARIANTS[variant][1 if module_name == "test_hf_vit" else 2]
            made[module_name, variant] = folder, model, model_class
        return made[module_name, variant]

    return get


def image_outputs(model, pixels):
    with torch.no_grad():
        out = model(pixel_values=pixels)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("module_name, variant", hf_image_cases(), ids=[v for _, v in hf_image_cases()])
@pytest.mark.parametrize("method, depth", [("identity-insert", 3), ("depth-upscale", 4), ("stack", 4)])
def test_hf_image_outputs_load_strictly_and_identity_insert_keeps_them(module_name, variant, method, depth,
                                                                       hf_image_sources, lg, tmp_path):
    from hf_image_models import load_strict as load_image_strict

    src, model, model_class = hf_image_sources(module_name, variant)
    out = tmp_path / "out"
    result = lg("grow", src, "--depth", depth, "--method", method, "-o", out)
    assert result.code == 0, result.stderr
    reloaded = load_image_strict(out, model_class)
    assert reloaded.config.num_hidden_layers == depth
    channels = model.config.num_channels
    pixels = torch.randn(2, channels, 16, 16, generator=torch.Generator().manual_seed(1))
    got, expected = image_outputs(reloaded, pixels), image_outputs(model, pixels)
    assert got.shape == expected.shape and torch.isfinite(got).all()
    if method == "identity-insert":
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("method, depths", [("depth-upscale", "4,4"), ("stack", "4,2"), ("identity-insert", "3,3")])
def test_timm_swin_grows_per_stage_and_loads_strictly(method, depths, tmp_path, lg):
    from conftest import printed_model
    from test_swin import images, make_swin

    model = make_swin()
    src, out = tmp_path / "swin.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(model, src)
    result = lg("grow", src, "--depth", depths, "--method", method, "-o", out)
    assert result.code == 0, result.stderr
    resized = printed_model(out)  # timm.create_model + load_state_dict(strict=True), as lg inspect prints
    assert [len(stage.blocks) for stage in resized.layers] == [int(d) for d in depths.split(",")]
    x = images(model)
    with torch.no_grad():
        got = resized(x)
        assert torch.isfinite(got).all()
        if method == "identity-insert":  # one new block per stage, on top: timm's shifted windows keep their blocks
            torch.testing.assert_close(got, model(x), atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def hf_swin_source(tmp_path_factory):
    import transformers
    from hf_image_models import folder_builder
    from test_hf_swin import make_model

    return folder_builder(tmp_path_factory, make_model,
                          transformers.ViTImageProcessor(size={"height": 32, "width": 32}))("classifier")


@pytest.mark.parametrize("method", GROWTHS)
def test_hf_swin_grows_per_stage_and_loads_strictly(method, hf_swin_source, tmp_path, lg):
    from hf_image_models import load_strict as load_image_strict
    from test_hf_swin import images, outputs as swin_outputs

    src, model = hf_swin_source
    out = tmp_path / "out"
    result = lg("grow", src, "--depth", "4,2", "--method", method, "-o", out)
    assert result.code == 0, result.stderr
    resized = load_image_strict(out, "SwinForImageClassification")
    assert [len(stage.blocks) for stage in resized.swin.encoder.layers] == [4, 2]
    assert torch.isfinite(swin_outputs(resized, images())).all()


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("args, message", [
    (("grow", "--depth", "7", "--method", "depth-upscale"),
     "depth-upscale makes 2L - 2m layers from L = 4 (m dropped at the seam of two copies): depth 7 is not one; "
     "it reaches 6, 8"),
    (("grow", "--depth", "10", "--method", "depth-upscale"), "depth 10 is not one; it reaches 6, 8"),
    (("grow", "--depth", "6", "--method", "stack"),
     "stack repeats all 4 layers a whole number of times: depth 6 is not a multiple of 4 (8, 12, 16, 20, ...)"),
    (("grow", "--depth", "9", "--method", "identity-insert"), "depth 9 is beyond 8"),
    (("shrink", "--depth", "2", "--method", "stack"), "method 'stack' cannot shrink"),
])
def test_unreachable_depths_are_refused_in_one_line(args, message, vit_source, lg, tmp_path):
    src, _ = vit_source
    out = tmp_path / "out.safetensors"
    result = lg(args[0], src, *args[1:], "-o", out)
    assert result.code != 0 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_identity_insert_refuses_a_post_norm_model(text_sources, lg, tmp_path):
    """BERT's adapter declares its blocks post-norm (`ArchSpec.post_norm`): no inserted block is an identity."""
    src, _ = text_sources("bert-mlm")
    assert lgcli.load(src).spec.post_norm and not lgcli.load(text_sources("gpt2-lm")[0]).spec.post_norm
    out = tmp_path / "out"
    result = lg("grow", src, "--depth", "4", "--method", "identity-insert", "-o", out)
    assert result.code != 0 and "identity-insert needs pre-norm blocks: the bert normalises after" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method, depth, width, kept", [
    ("identity-insert", 6, 128, True),  # then clone: both keep the function
    ("stack", 8, 96, False),            # 64 -> 96: clone pads the width (stack does not keep the function)
    ("depth-upscale", 4, 128, False),   # the depth kept: the width step alone
])
def test_a_width_change_is_refused_with_a_pipe_that_runs_as_printed(method, depth, width, kept, vit_source,
                                                                    tmp_path, lg):
    src, model = vit_source
    out = tmp_path / "out.safetensors"
    refused = lg("grow", src, "--depth", depth, "--width", width, "--method", method, "-o", out)
    assert refused.code != 0 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"method '{method}' changes the depth only" in refused.stderr and not out.exists()
    pipe = re.search(r"; run: (lg .*)$", refused.stderr.strip()).group(1)
    assert (f"--method {method}" in pipe) == (depth != 4) and "--method clone" in pipe
    ran = run_printed(pipe)  # as a shell reads it
    assert ran.code == 0, (pipe, ran.stderr)
    written = lgcli.load(out).spec
    assert (written.depth, written.width) == (depth, width)
    grown_model = eval(lgcli.inspect_checkpoint(out)["load_call"], {"timm": timm}).eval()
    x = sample_input(model)
    with torch.no_grad():
        logits = grown_model(x)
        assert torch.isfinite(logits).all()
        if kept:
            torch.testing.assert_close(logits, model(x), atol=1e-4, rtol=0)


def test_bench_runs_them_and_says_why_a_size_is_out_of_reach(tmp_path):
    """lg bench runs every registered method: each grows a 2-layer ancestry to 4
    layers; at a wider size each cell is n/a with the method's own line."""
    from lgcli.bench import BenchSettings, bench, parse_sizes
    from lgcli.evaluate import ProbeSettings
    from test_bench import ANCESTRY

    torch.manual_seed(0)
    ancestry = tmp_path / "ancestry.safetensors"
    lgcli.save_model(timm.create_model("vit_base_patch16_224", **ANCESTRY).eval(), ancestry)
    settings = BenchSettings(sizes=parse_sizes("4x32,4x64"), methods=list(GROWTHS), subset="32", test_subset="20",
                             probe=ProbeSettings(steps=1, eval_every=1, batch_size=16, progress=False))
    report = bench(ancestry, "fashion-mnist-mini", tmp_path / "bench", settings, notify=lambda message: None)
    cells = {(c["method"], c["size"]): c for c in report["cells"]}
    for method in GROWTHS:
        assert cells[method, "4x32"]["status"] == "done"
        assert cells[method, "4x64"]["status"] == "n/a"
        assert f"method '{method}' changes the depth only" in cells[method, "4x64"]["reason"]


def test_a_swins_width_change_is_refused_with_a_pipe_of_stage_depths(tmp_path, lg):
    """Per stage: the pipe writes every stage's depth; identity-insert (one block on top
    of each stage) then clone's doubled width keep the Swin's logits."""
    from conftest import printed_model
    from test_swin import images, make_swin

    model = make_swin()
    src, out = tmp_path / "swin.safetensors", tmp_path / "out.safetensors"
    lgcli.save_model(model, src)
    refused = lg("grow", src, "--depth", "3,3", "--width", "32", "--method", "identity-insert", "-o", out)
    assert refused.code != 0 and len(refused.stderr.strip().splitlines()) == 1 and not out.exists()
    assert "stage 0 width 16 -> 32" in refused.stderr
    pipe = re.search(r"; run: (lg .*)$", refused.stderr.strip()).group(1)
    assert "--method identity-insert --depth 3,3 -o - | lg grow - --method clone --depth 3,3 --width 32" in pipe
    ran = run_printed(pipe)  # as a shell reads it
    assert ran.code == 0, (pipe, ran.stderr)
    grown_model = printed_model(out)
    assert [len(stage.blocks) for stage in grown_model.layers] == [3, 3]
    x = images(model)
    with torch.no_grad():
        torch.testing.assert_close(grown_model(x), model(x), atol=1e-5, rtol=0)
