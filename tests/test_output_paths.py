"""Output paths say what is true (tour 3, findings 5, 6, 7 and 11): a file
where the path needs a folder is named as one; an empty folder is the
output of a model folder (`mkdir out && lg ... -o out/`), written beside it
and renamed over it, never over files put into it meanwhile, and left as it
was by an interrupt; a file where `-o DIR/` asks for a folder is refused
whatever --force says; and a PyTorch pickle's name (`.pt`, `.pth`, `.bin`,
`.ckpt`) is refused for what lg writes as safetensors. Every refusal is one
line, writes nothing, and its hint runs as printed."""

from __future__ import annotations

import os
import shlex
import signal
import stat
from pathlib import Path

import pytest
import safetensors.torch

import lgcli
from lgcli.checkpoint import atomic
from lgcli.checkpoint.atomic import atomic_folder
from lgcli.errors import LgError

from conftest import make_vit
from test_interrupts import check as check_interrupted_run
from test_interrupts import run as run_interrupted

LLAMA = Path(__file__).resolve().parents[1] / "examples" / "kjv_llama"  # a Hugging Face folder: 2 MB


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    """A timm ViT, which lg writes as one file (about 220 KB)."""
    path = tmp_path_factory.mktemp("paths") / "vit.safetensors"
    lgcli.save_model(make_vit(depth=4, embed_dim=64, num_heads=2), path)
    return path


def refused(done, line: str) -> None:
    assert (done.code, done.stderr, done.stdout) == (1, f"lg: error: {line}\n", b""), done.stderr


def hint_of(stderr: str) -> list[str]:
    """The `-o ...` the refusal suggests, as argv words."""
    return shlex.split(stderr.split("(-o ", 1)[1].split(")", 1)[0])


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# ---- 5. a file where the path needs a folder ----

@pytest.mark.parametrize("output", ["notes.txt/x.safetensors", "notes.txt/sub/x.safetensors",
                                    "notes.txt/../x.safetensors"])
@pytest.mark.parametrize("force", [False, True])
def test_a_file_in_the_output_path_is_named_as_not_a_folder(vit, lg, tmp_path, output, force):
    (tmp_path / "notes.txt").write_text("mine\n")
    done = lg("shrink", vit, "--depth", "2", "-o", output, *["--force"] * force, cwd=tmp_path)
    refused(done, f"{output}: a part of the path is not a folder (notes.txt is a file)")
    assert files(tmp_path) == {"notes.txt"} and (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_missing_folder_is_still_said_to_be_missing(vit, lg, tmp_path):
    done = lg("shrink", vit, "--depth", "2", "-o", "no/such/x.safetensors", cwd=tmp_path)
    refused(done, "no/such/x.safetensors: folder no/such does not exist")


def test_a_link_to_nothing_in_the_output_path_is_named(vit, lg, tmp_path):
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    done = lg("shrink", vit, "--depth", "2", "-o", "gone/x.safetensors", cwd=tmp_path)
    refused(done, "gone/x.safetensors: a part of the path is not a folder (gone is a link to nothing)")


# ---- 6. an empty folder is the output of a model folder ----

@pytest.mark.parametrize("output, flags", [("out/", []), ("out/", ["--force"]), ("out", []), ("out", ["--force"])])
def test_an_empty_folder_takes_a_model_folder(lg, tmp_path, output, flags):
    (tmp_path / "out").mkdir(mode=0o750)
    os.chmod(tmp_path / "out", 0o750)  # whatever the umask
    done = lg("shrink", LLAMA, "--depth", "2", "-o", output, *flags, cwd=tmp_path)
    assert done.code == 0, done.stderr
    assert f"wrote {output}" in done.stderr
    assert os.listdir(tmp_path) == ["out"]  # no temporary folder left beside it
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(tmp_path / "out"))
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o750  # the folder the user made keeps its mode
    assert lgcli.load(tmp_path / "out").spec.depth == 2


def test_an_empty_folder_takes_a_folder_of_shards(vit, lg, tmp_path):
    (tmp_path / "out").mkdir()
    done = lg("shrink", vit, "--depth", "2", "-o", "out/", "--shard-size", "60KB", cwd=tmp_path)
    assert done.code == 0, done.stderr
    assert "model.safetensors.index.json" in os.listdir(tmp_path / "out")


def test_an_empty_folder_is_taken_by_a_dry_run_too(lg, tmp_path):
    (tmp_path / "out").mkdir()
    done = lg("shrink", LLAMA, "--depth", "2", "-o", "out/", "--dry-run", cwd=tmp_path)
    assert done.code == 0, done.stderr
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("output, said", [("out/", "names a folder"), ("out", "is an empty folder")])
@pytest.mark.parametrize("force", [False, True])
def test_an_empty_folder_for_a_model_of_one_file_is_told_the_file_name_inside(vit, lg, tmp_path, output, said,
                                                                              force):
    (tmp_path / "out").mkdir()
    done = lg("shrink", vit, "--depth", "2", "-o", output, *["--force"] * force, cwd=tmp_path)
    refused(done, f"{output}: {said}; this model is one file: give a file name for the output "
                  f"(-o out/model.safetensors), or add --shard-size 227KB to write it as a folder of shards")
    assert files(tmp_path) == {"out"}
    hinted = lg("shrink", vit, "--depth", "2", "-o", *hint_of(done.stderr), cwd=tmp_path)  # runs as printed
    assert hinted.code == 0, hinted.stderr
    assert files(tmp_path) == {"out", "out/model.safetensors"}


def test_a_folder_that_holds_files_is_still_refused(lg, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine\n")
    done = lg("shrink", LLAMA, "--depth", "2", "-o", "out/", "--force", cwd=tmp_path)
    refused(done, "out/: is a folder that holds no model (no config.json naming a model_type or a timm "
                  "architecture, no model.safetensors.index.json with a weight map); lg replaces only a model "
                  "folder it could have written, and never deletes anything else: choose another output")
    assert files(tmp_path) == {"out", "out/notes.txt"}


def test_a_model_folder_lg_wrote_still_needs_force(lg, tmp_path):
    (tmp_path / "out").mkdir()
    assert lg("shrink", LLAMA, "--depth", "2", "-o", "out/", cwd=tmp_path).code == 0
    refused(lg("shrink", LLAMA, "--depth", "3", "-o", "out/", cwd=tmp_path),
            "out/: exists; pass --force to overwrite it")


def test_a_model_card_is_not_written_over_an_empty_folder(vit, lg, tmp_path):
    (tmp_path / "card").mkdir()
    done = lg("shrink", vit, "--depth", "2", "-o", "x.safetensors", "--card", "card", "--force", cwd=tmp_path)
    refused(done, "card: is an empty folder; lg replaces only a model folder it could have written, and never "
                  "deletes anything else: choose another output")
    assert files(tmp_path) == {"card"}


def test_a_folder_written_into_while_lg_works_is_refused_not_deleted(lg, tmp_path, monkeypatch):
    (tmp_path / "out").mkdir()
    real = lgcli.checkpoint.writing._write_readme

    def meanwhile(folder, readme, meta):  # the last file lg writes into its temporary folder
        (tmp_path / "out" / "mine.txt").write_text("written while lg worked\n")
        return real(folder, readme, meta)

    monkeypatch.setattr(lgcli.checkpoint.writing, "_write_readme", meanwhile)
    for flags in ([], ["--force"]):
        done = lg("shrink", LLAMA, "--depth", "2", "-o", "out/", *flags, cwd=tmp_path)
        refused(done, "out: the output folder, empty when lg began, now holds files: nothing written (lg never "
                      "deletes what it did not write)")
        assert files(tmp_path) == {"out", "out/mine.txt"}
        (tmp_path / "out" / "mine.txt").unlink()


def test_the_rename_over_an_empty_folder_refuses_one_that_is_not(tmp_path, monkeypatch):
    """A file that lands between the last look and the rename: rename(2)
    refuses a folder that is not empty, and nothing is deleted."""
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(atomic, "is_empty_folder", lambda path: True)  # every look says empty
    with pytest.raises(LgError) as error:
        with atomic_folder(out, force=True, output=True) as tmp:
            (tmp / "model.safetensors").write_bytes(b"new")
            (out / "mine.txt").write_text("mine\n")
    assert str(error.value) == (f"{out}: the output folder, empty when lg began, now holds files: nothing written "
                                f"(lg never deletes what it did not write)")
    assert files(tmp_path) == {"out", "out/mine.txt"}


@pytest.mark.parametrize("moment", ["start", "middle", "rename"])
def test_an_interrupt_leaves_the_empty_folder_as_it_was(tmp_path, moment):
    work = tmp_path / "work"
    work.mkdir()
    output = work / "out"
    output.mkdir()
    done = run_interrupted(moment, "SIGINT", 1, output, ["shrink", LLAMA, "--depth", "2", "-o", f"{output}/"])
    check_interrupted_run(done, "SIGINT", moment, work, {"out"})
    assert done.returncode == 128 + signal.SIGINT
    if moment == "rename":  # the signal waited: the new folder is whole
        assert len(safetensors.torch.load_file(str(output / "model.safetensors"))) > 0
    else:
        assert os.listdir(output) == []


# ---- 7. a file where -o DIR/ asks for a folder ----

@pytest.mark.parametrize("name", ["tleg.lg.safetensors", "plain"])
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("model", ["llama", "vit"])
def test_a_file_named_as_a_folder_is_refused_whatever_force_says(vit, lg, tmp_path, name, force, model):
    (tmp_path / name).write_bytes(b"precious")
    done = lg("shrink", LLAMA if model == "llama" else vit, "--depth", "2", "-o", f"{name}/",
              *["--force"] * force, cwd=tmp_path)
    refused(done, f"{name}/: is a file, not a folder (a trailing / names a folder; --force would not change that): "
                  f"choose another output")
    assert files(tmp_path) == {name} and (tmp_path / name).read_bytes() == b"precious"


# ---- 11. a PyTorch pickle's name on safetensors ----

@pytest.mark.parametrize("name, better", [("out.pt", "out.safetensors"), ("out.PTH", "out.safetensors"),
                                          ("w/model.bin", "w/model.safetensors"), ("x.ckpt", "x.safetensors")])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_pickle_name_for_one_file_is_refused_with_the_safetensors_name(vit, lg, tmp_path, name, better, dry_run):
    (tmp_path / "w").mkdir()
    done = lg("shrink", vit, "--depth", "2", "-o", name, *["--dry-run"] * dry_run, cwd=tmp_path)
    refused(done, f"{name}: lg writes safetensors, not a PyTorch pickle (torch.load would not read it): give a "
                  f".safetensors name (-o {better})")
    assert files(tmp_path) == {"w"}
    hinted = lg("shrink", vit, "--depth", "2", "-o", *hint_of(done.stderr), cwd=tmp_path)  # runs as printed
    assert hinted.code == 0, hinted.stderr
    assert len(safetensors.torch.load_file(str(tmp_path / better))) > 0


def test_a_pickle_name_for_a_model_folder_is_refused_with_a_folder_name(lg, tmp_path):
    done = lg("shrink", LLAMA, "--depth", "2", "-o", "small.bin", cwd=tmp_path)
    refused(done, "small.bin: lg writes this model as a folder of safetensors files, not a PyTorch pickle: give a "
                  "folder name (-o small/)")
    assert files(tmp_path) == set()
    hinted = lg("shrink", LLAMA, "--depth", "2", "-o", *hint_of(done.stderr), cwd=tmp_path)
    assert hinted.code == 0, hinted.stderr
    assert "config.json" in os.listdir(tmp_path / "small")


def test_a_learngene_output_is_checked_for_its_form_before_training(vit, lg, tmp_path, monkeypatch):
    """A learngene is one file: a pickle's name, a folder name or an empty
    folder is refused before any step (it used to be refused after them),
    by the dry run too."""
    import lgcli.condense

    def no_training(*args, **kwargs):
        raise AssertionError("the output was not refused before the work")

    monkeypatch.setattr(lgcli.condense, "condense", no_training)
    (tmp_path / "empty").mkdir()
    expected = {"gene.pt": "gene.pt: lg writes safetensors, not a PyTorch pickle (torch.load would not read it): "
                           "give a .safetensors name (-o gene.safetensors)",
                "gene/": "gene/: names a folder; this model is one file: give a file name for the output "
                         "(-o gene.safetensors)",
                "empty": "empty: is an empty folder; this model is one file: give a file name for the output "
                         "(-o empty/model.safetensors)"}
    for output, line in expected.items():
        for dry_run in ([], ["--dry-run"]):
            done = lg("condense", vit, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2",
                      "-o", output, *dry_run, cwd=tmp_path)
            refused(done, line)
    assert files(tmp_path) == {"empty"}


def test_a_training_checkpoint_keeps_its_pt_name(lg, tmp_path):
    """The refusal is for outputs lg writes as safetensors: a training
    checkpoint (`--checkpoint run.pt`, OUT.train.pt) is a torch pickle, as named."""
    teacher = LLAMA.parent / "fmnist_vit.safetensors"
    done = lg("condense", teacher, "--method", "tleg", "--data", "fashion-mnist-mini", "--steps", "2",
              "--batch-size", "16", "--subset", "64", "--test-subset", "32", "--device", "cpu",
              "--checkpoint", "run.pt", "--checkpoint-every", "1", "-o", "gene.safetensors", cwd=tmp_path)
    assert done.code == 0, done.stderr
    assert {"gene.safetensors", "run.pt"} <= files(tmp_path)


def test_a_card_named_as_a_folder_is_told_a_file_name_for_the_card(vit, lg, tmp_path):
    done = lg("shrink", vit, "--depth", "2", "-o", "x.safetensors", "--card", "notes/", cwd=tmp_path)
    refused(done, "--card notes/: names a folder; the model card is one file: give a file name (--card notes.md)")
    assert files(tmp_path) == set()
    hinted = lg("shrink", vit, "--depth", "2", "-o", "x.safetensors", "--card", "notes.md", cwd=tmp_path)
    assert hinted.code == 0, hinted.stderr
    assert files(tmp_path) == {"x.safetensors", "notes.md"}
