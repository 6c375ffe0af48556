"""Hostile inputs, generated from a fixed seed: lg refuses them in one clean
line (or handles them), never crashes, hangs, eats memory, leaves files
behind, modifies an input or runs a pickle's code.

The cases and the runner live in tests/hostile_cases.py; to see every failing
case of a family at once:

    .venv/bin/python tests/hostile_cases.py --report --family headers
"""

from __future__ import annotations

import json
import os

import pytest
import torch

import hostile_cases as hc

# Each family should hold a comparable share of the cases.
MIN_CASES, MAX_CASES = 30, 110


class Generated(tuple):
    """(root, fixtures, cases by family), shown briefly in pytest's tracebacks."""

    def __repr__(self) -> str:
        return f"<hostile cases in {self[0]}: {sum(map(len, self[2].values()))}>"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Fixture files, and every family's cases generated once (seeded)."""
    root = tmp_path_factory.mktemp("hostile")
    fixtures = hc.build_fixtures(root)
    cases = {family: hc.generate(family, root, fixtures, hc.SEED) for family in hc.FAMILIES}
    return Generated((root, fixtures, cases))


def test_case_counts(hostile):
    _, fixtures, cases = hostile
    counts = {family: len(found) for family, found in cases.items()}
    print("hostile cases per family:", counts, "total", sum(counts.values()), *fixtures.notes)
    assert counts == hc.CASE_COUNTS
    assert fixtures.gene is not None, fixtures.notes  # the learngene fixture (lg condense) must build
    for family, count in counts.items():
        assert MIN_CASES <= count <= MAX_CASES, f"{family}: {count} cases"
    for family, found in cases.items():
        expects = {case.expect for case in found}
        assert "error" in expects and expects & {"ok", "either"}, f"{family} lacks controls or refusals"
        assert len({case.name for case in found}) == len(found)


@pytest.mark.parametrize("family", hc.FAMILIES)
def test_hostile_family(hostile, family):
    _, _, cases = hostile
    outcomes = hc.run_cases(cases[family])
    assert len(outcomes) == len(cases[family])
    assert all(outcome.passed for outcome in outcomes), hc.failure_message(outcomes)


def test_library_rejects_imply_lg_rejects(hostile):
    """Bytes the safetensors library refuses, lg refuses too (LgError), read
    from a file (lg's own header parser and memory map) and from memory. Runs
    in a forked copy of this process, so a hang or a crash cannot stall pytest."""
    root, fixtures, _ = hostile
    count, failures = hc.run_library_check(fixtures, root, hc.SEED)
    assert count >= 150
    message = "\n".join(failures[:40]) + (f"\n... and {len(failures) - 40} more" if len(failures) > 40 else "")
    assert not failures, f"{len(failures)} of {2 * count} reads did not raise LgError:\n{message}"


# ---------------------------------------------------------------- hand-made cases (issue 20)

def _text_folder(tmp_path_factory):
    from text_models import make_model, save_folder

    return save_folder(make_model("gpt2-lm"), tmp_path_factory.mktemp("gpt2"), "gpt2-lm")


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    return _text_folder(tmp_path_factory)


def test_a_companion_swapped_for_a_link_after_reading_never_reaches_the_output(gpt2_folder, tmp_path):
    """The folder is read (its tokenizer checked and opened), then
    tokenizer.json is replaced by a link to a secret file before the output
    is written: the output carries what was read, never the secret, into a
    folder and into a pipe's header."""
    import shutil

    import lgcli
    from lgcli.checkpoint import COMPANION_KEY, read_checkpoint
    from lgcli.resize import resize_file

    source = tmp_path / "m"
    shutil.copytree(gpt2_folder, source)
    original = (source / "tokenizer.json").read_bytes()
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:the secret\n")
    loaded = lgcli.load(source)
    (source / "tokenizer.json").unlink()
    (source / "tokenizer.json").symlink_to(secret)
    resize_file(loaded, tmp_path / "out", direction="shrink", depth=1)
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == original
    piped = tmp_path / "piped.safetensors"
    with open(piped, "wb") as stream:
        resize_file(loaded, "-", direction="shrink", depth=1, stdout=stream)
    carried = read_checkpoint(piped).metadata[COMPANION_KEY + "tokenizer.json"]
    assert carried.encode() == original and "secret" not in carried


def _peak_rss_mb(args) -> tuple[int, float]:
    """Run `lg ARGS` in a fresh interpreter; its exit code and peak RSS (MB)."""
    import subprocess
    import sys

    code = ("import resource, sys\nfrom lgcli.cli import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit as exc:\n    code = exc.code or 0\n"
            "print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.__stderr__)")
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
    exit_code, kilobytes = done.stderr.strip().splitlines()[-1].split()
    return int(exit_code), int(kilobytes) / 1024


def test_a_companion_bomb_is_refused_before_it_is_read(gpt2_folder, tmp_path):
    """Twelve sparse 250 MB files in a sentence-transformers module folder:
    refused in one line from their sizes, with the memory of an ordinary
    `lg inspect` (within 100 MB), and nothing written."""
    import shutil

    bomb = tmp_path / "bomb"
    shutil.copytree(gpt2_folder, bomb)
    (bomb / "1_Pooling").mkdir()
    for index in range(12):
        with open(bomb / "1_Pooling" / f"part{index}.json", "wb") as handle:
            handle.truncate(250 << 20)
    code, bomb_mb = _peak_rss_mb(["shrink", bomb, "--depth", "1", "-o", tmp_path / "out"])
    assert code == 1 and not (tmp_path / "out").exists()
    _, plain_mb = _peak_rss_mb(["inspect", gpt2_folder])
    assert bomb_mb < plain_mb + 100, (bomb_mb, plain_mb)
    from lgcli.cli import main  # the message, in this process
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        main(["inspect", str(bomb)])
    assert err.getvalue().count("\n") == 1 and "hold over 512 MiB" in err.getvalue(), err.getvalue()


def test_a_stream_claiming_gigabytes_costs_what_it_sent(tmp_path):
    """144 bytes on stdin whose header claims 4 GB of tensor data: refused as
    truncated, with the memory of an ordinary `lg inspect` (within 100 MB)."""
    import json
    import struct
    import subprocess
    import sys

    header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 30], "data_offsets": [0, 4 << 30]}}).encode()
    header += b" " * (-len(header) % 8)
    stream = struct.pack("<Q", len(header)) + header + b"\0" * (144 - 8 - len(header))
    (tmp_path / "claim.safetensors").write_bytes(stream)
    code = ("import resource, sys\nfrom lgcli.cli import main\ncode = 0\ntry:\n    main(['inspect', '-'])\n"
            "except SystemExit as exc:\n    code = exc.code or 0\n"
            "print(code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.__stderr__)")
    with open(tmp_path / "claim.safetensors", "rb") as stdin:
        done = subprocess.run([sys.executable, "-c", code], stdin=stdin, capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    exit_code, kilobytes = lines[-1].split()
    assert exit_code == "1" and "truncated" in lines[0], done.stderr
    _, plain_mb = _peak_rss_mb(["inspect", tmp_path / "claim.safetensors"])  # refused from its size, no read
    assert int(kilobytes) / 1024 < plain_mb + 100, (int(kilobytes) / 1024, plain_mb)


def _vit_state(**overrides):
    from conftest import make_vit

    model = make_vit(depth=3, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7, num_classes=10)
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("method", ["select", "bot", "auto-lg"])
def test_a_non_finite_weight_is_refused_naming_its_tensor(tmp_path, lg, value, method):
    """One NaN or Inf in a block: refused in one line naming the tensor
    (a resize would spread it: BoT turns one Inf into three); with
    --allow-nonfinite the output is written and stderr says it was kept."""
    import safetensors.torch

    state = _vit_state()
    state["blocks.1.mlp.fc1.weight"][3, 4] = value
    safetensors.torch.save_file(state, str(tmp_path / "v.safetensors"))
    direction, size = ("grow", "4") if method == "auto-lg" else ("shrink", "2")
    out = tmp_path / "o.safetensors"
    refused = lg(direction, tmp_path / "v.safetensors", "--depth", size, "--method", method, "-o", out)
    assert refused.code == 1 and not out.exists()
    assert refused.stderr.count("\n") == 1 and "tensor blocks.1.mlp.fc1.weight holds 1 non-finite value" in \
        refused.stderr, refused.stderr
    kept = lg(direction, tmp_path / "v.safetensors", "--depth", size, "--method", method, "-o", out,
              "--allow-nonfinite")
    assert kept.code == 0 and out.exists(), kept.stderr
    assert "blocks.1.mlp.fc1.weight holds 1 non-finite value (NaN or Inf); kept (--allow-nonfinite)" in kept.stderr


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.float8_e4m3fn, torch.float8_e5m2])
def test_all_finite_finds_every_non_finite_value_wherever_it_lies(dtype):
    """The check every read weight passes (by its extremes, not isfinite
    element by element): a NaN, +Inf or -Inf at any position of tensors
    whose lengths straddle the vector widths is found, and a finite tensor,
    its largest values included, passes. float8 e4m3fn has no Inf: its
    NaN alone."""
    from lgcli.checkpoint.loaded import all_finite

    specials = [float("nan")] + ([] if dtype == torch.float8_e4m3fn else [float("inf"), float("-inf")])
    for length in (1, 2, 7, 16, 33, 257):
        values = torch.linspace(-2, 2, length).to(dtype)
        assert all_finite(values)
        for position in range(length):
            for special in specials:
                spoiled = values.clone()
                spoiled[position] = special
                assert not all_finite(spoiled), (length, position, special)
    assert all_finite(torch.tensor([torch.finfo(dtype).max, torch.finfo(dtype).min], dtype=torch.float64).to(dtype))
    assert all_finite(torch.zeros(3, 4, dtype=dtype).t())  # not contiguous: read as it is


def test_a_non_finite_weight_in_a_model_folder_is_refused(tmp_path, lg):
    import shutil

    import safetensors.torch
    from text_models import make_model, save_folder

    folder = save_folder(make_model("llama-gqa"), tmp_path / "llama", "llama-gqa")
    weights = safetensors.torch.load_file(str(folder / "model.safetensors"))
    key = sorted(k for k in weights if k.endswith("mlp.up_proj.weight"))[0]
    weights[key][0, 0] = float("nan")
    safetensors.torch.save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    result = lg("shrink", folder, "--depth", "1", "-o", tmp_path / "out")
    assert result.code == 1 and f"tensor {key} holds 1 non-finite value" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
    shutil.rmtree(folder)


@pytest.mark.parametrize("args", [["shrink", "--depth", "2"], ["grow", "--depth", "4", "--method", "clone"],
                                  ["shrink", "--depth", "2", "--method", "bot"]])
def test_each_tensor_keeps_its_own_dtype(tmp_path, lg, args):
    """Blocks in float16 and the rest in float32 come out the same way (they
    all came out float16, the source's dominant dtype); a grown block takes
    its peers' dtype."""
    import safetensors.torch

    state = {k: (v.half() if k.startswith("blocks.") else v) for k, v in _vit_state().items()}
    safetensors.torch.save_file(state, str(tmp_path / "mixed.safetensors"))
    out = tmp_path / "o.safetensors"
    result = lg(args[0], tmp_path / "mixed.safetensors", *args[1:], "-o", out)
    assert result.code == 0, result.stderr
    written = safetensors.torch.load_file(str(out))
    for key, tensor in written.items():
        expected = torch.float16 if key.startswith("blocks.") else torch.float32
        assert tensor.dtype == expected, key


def test_a_file_name_that_is_not_utf8_reads_back_from_the_output(tmp_path):
    """A byte that is not UTF-8 in the source's name is recorded so that the
    output reads back (it was written as a lone surrogate lg then refused)."""
    import subprocess
    import sys

    import safetensors.torch

    name = os.fsdecode(b"v\xff.safetensors")
    safetensors.torch.save_file(_vit_state(), str(tmp_path / name))
    made = subprocess.run([sys.executable, "-m", "lgcli", "shrink", name, "--depth", "2", "-o", "o.safetensors"],
                          cwd=tmp_path, capture_output=True)
    assert made.returncode == 0, made.stderr
    read = subprocess.run([sys.executable, "-m", "lgcli", "inspect", "o.safetensors", "--json"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["provenance"][-1]["file"] == "v\\xff.safetensors"


@pytest.mark.parametrize("value, debugging", [("0", False), ("false", False), ("no", False), ("", False),
                                              ("1", True), ("yes", True)])
def test_lg_debug_means_what_it_says(tmp_path, value, debugging):
    import subprocess
    import sys

    (tmp_path / "bad.safetensors").write_bytes(b"not a checkpoint at all")
    done = subprocess.run([sys.executable, "-m", "lgcli", "inspect", tmp_path / "bad.safetensors"],
                          capture_output=True, text=True, env={**os.environ, "LG_DEBUG": value})
    assert done.returncode != 0
    assert ("Traceback" in done.stderr) == debugging, done.stderr


def test_a_home_matplotlib_cannot_write_says_nothing(tmp_path):
    """`lg eval --plot` with a HOME matplotlib cannot write (here a file, which
    even root cannot make folders in): its cache goes to a temporary folder,
    not warnings on stderr."""
    import subprocess
    import sys

    safetensors_file = tmp_path / "v.safetensors"
    import safetensors.torch

    safetensors.torch.save_file(_vit_state(), str(safetensors_file))
    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"}
    (tmp_path / "home").write_text("not a folder")
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME="", XDG_CACHE_HOME="")
    done = subprocess.run([sys.executable, "-m", "lgcli", "eval", safetensors_file, "--heads", "2", "--test-subset",
                           "20", "--steps", "2", "--batch-size", "8", "--subset", "16", "--plot", tmp_path / "c.png"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Matplotlib" not in done.stderr and "writable" not in done.stderr, done.stderr
    assert (tmp_path / "c.png").exists()


# Item 6: what is the input's fault is said as such, never as "a bug in lg".
BAD_CONFIGS = {
    "hidden-act": ("llama-gqa", {"hidden_act": "bogus"}, "unknown value 'bogus'"),
    "rope-type": ("llama-gqa", {"rope_parameters": {"rope_type": "bogus"}, "rope_scaling": {"rope_type": "bogus"}},
                  "unknown value 'bogus'"),
    "layer-types": ("llama-gqa", {"layer_types": ["bogus"] * 4}, "layer_types"),
    "rms-eps-text": ("llama-gqa", {"rms_norm_eps": "abc"}, "rms_norm_eps"),
    "pad-outside-vocab": ("llama-gqa", {"pad_token_id": 99999}, "Padding_idx must be within num_embeddings"),
    "gpt2-activation": ("gpt2-lm", {"activation_function": "bogus"}, "unknown value 'bogus'"),
}


@pytest.fixture(scope="module")
def text_sources(tmp_path_factory):
    from text_models import Sources

    return Sources(tmp_path_factory)


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_config_its_family_refuses_is_one_line_of_the_input(text_sources, tmp_path, lg, case):
    import shutil

    variant, changes, phrase = BAD_CONFIGS[case]
    folder = tmp_path / "m"
    shutil.copytree(text_sources(variant)[0], folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    result = lg("shrink", folder, "--depth", "1", "-o", tmp_path / "out")
    assert result.code == 1 and result.stderr.count("\n") == 1, result.stderr  # transformers' warnings too
    assert "config.json does not describe a" in result.stderr and phrase in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
    # lg inspect reads the config through its class only (the model classes would double its time):
    # what that class refuses is refused there too; the rest is described, never "a bug in lg".
    shown = lg("inspect", folder)
    assert shown.code == 0 or (shown.code == 1 and phrase in shown.stderr and shown.stderr.count("\n") == 1)
    assert "bug in lg" not in shown.stderr and "Traceback" not in shown.stderr


@pytest.mark.parametrize("key, shape", [("head.weight", (0, 32)), ("pos_embed", (1, 0, 32))])
def test_an_empty_tensor_a_vit_needs_is_refused(tmp_path, lg, key, shape):
    """A head of 0 classes or a position table of 0 tokens passed inspect and
    shrink, then failed in timm."""
    import safetensors.torch

    state = _vit_state()
    state[key] = torch.zeros(shape)
    if key == "head.weight":
        state["head.bias"] = torch.zeros(0)
    safetensors.torch.save_file(state, str(tmp_path / "v.safetensors"))
    for args in (["inspect", tmp_path / "v.safetensors"],
                 ["shrink", tmp_path / "v.safetensors", "--depth", "1", "-o", tmp_path / "o.safetensors"]):
        result = lg(*args)
        assert result.code == 1 and "which holds nothing" in result.stderr, result.stderr
    assert not (tmp_path / "o.safetensors").exists()


def test_a_dimension_torch_cannot_hold_is_refused(tmp_path, lg):
    import struct

    header = json.dumps({"x": {"dtype": "F32", "shape": [2**64 - 1, 0], "data_offsets": [0, 0]}}).encode()
    header += b" " * (-len(header) % 8)
    (tmp_path / "big.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    result = lg("inspect", tmp_path / "big.safetensors")
    assert result.code == 1 and "which torch cannot hold" in result.stderr, result.stderr


def test_a_pickle_of_meta_tensors_is_refused(tmp_path, lg):
    from conftest import make_vit

    model = make_vit(depth=2, embed_dim=32, num_heads=2, in_chans=1, img_size=28, patch_size=7, num_classes=10)
    torch.save({k: torch.empty_like(v, device="meta") for k, v in model.state_dict().items()}, tmp_path / "m.pth")
    for args in (["inspect", tmp_path / "m.pth"], ["shrink", tmp_path / "m.pth", "--depth", "1", "-o",
                                                   tmp_path / "o.safetensors"]):
        result = lg(*args)
        assert result.code == 1 and "on the meta device" in result.stderr, result.stderr


@pytest.mark.parametrize("args", [["inspect", "{src}"], ["shrink", "{src}", "--depth", "1", "-o", "-"]])
def test_a_closed_stdout_is_one_line(tmp_path, args):
    import subprocess
    import sys

    import safetensors.torch

    safetensors.torch.save_file(_vit_state(), str(tmp_path / "v.safetensors"))
    argv = " ".join(a.format(src=tmp_path / "v.safetensors") for a in args)
    done = subprocess.run(f"{sys.executable} -m lgcli {argv} >&-", shell=True, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr == "lg: error: stdout is closed: lg writes its report (and -o -, " \
                                                   "the checkpoint) there\n", done.stderr


@pytest.mark.parametrize("source, phrase", [
    ({"file": {"a": 1}}, "(step 1) field file must be a string, found an object"),
    ({"file": "x", "source": {"method": [1]}}, "(step 2) field method must be a string, found a list"),
    ({"file": "x", "options": "fast"}, "(step 1) field options must be a JSON object, found a string"),
])
def test_provenance_of_the_wrong_type_is_refused(tmp_path, lg, source, phrase):
    """A JSON object where a provenance step's file name belongs passed
    inspect and shrink and was carried into every output."""
    import safetensors.torch

    safetensors.torch.save_file(_vit_state(), str(tmp_path / "v.safetensors"),
                                metadata={"format": "pt", "lg.source": json.dumps(source)})
    for args in (["inspect", tmp_path / "v.safetensors"],
                 ["shrink", tmp_path / "v.safetensors", "--depth", "1", "-o", tmp_path / "o.safetensors"]):
        result = lg(*args)
        assert result.code == 1 and phrase in result.stderr, result.stderr
