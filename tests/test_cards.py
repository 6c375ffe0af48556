"""Model cards (issue 22): every output folder lg writes (a Hugging Face
folder, a timm hub folder, a folder of shards) holds a README.md whose
front matter the Hub reads (parsed here as YAML), that names the source's
true sha256 and carries the exact load line `lg inspect` prints; `--card
FILE` writes the same text beside a single file, as outputs are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import make_vit, write_plain
from test_hub import COMMIT_MAIN, REPO_ID, add_to_cache, gpt2_folder, hub_cache, no_network  # noqa: F401
from test_timm_folders import load_local_dir
from text_models import load_strict, outputs, token_ids
from timm.models import save_for_hf

from lgcli.card import HEADS_ASSUMED_NOTE


def front_matter(text: str) -> tuple[dict, str]:
    """(the YAML front matter, the body) of a model card."""
    assert text.startswith("---\n")
    head, separator, body = text[4:].partition("\n---\n")
    assert separator
    return yaml.safe_load(head), body


def load_line(card_body: str) -> str:
    """The Python block of a card: the import and the line that loads the model."""
    return card_body.split("```python\n", 1)[1].split("\n```", 1)[0]


def inspected(lg, path) -> dict:
    result = lg("inspect", path, "--json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def inspect_load_line(lg, path, heads: int | None = None) -> str:
    """The line `lg inspect` prints (given --heads for a file that records none: it prints none without)."""
    result = lg("inspect", path, "--json", *(("--heads", str(heads)) if heads else ()))
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    return f"{report['load_imports']}\nmodel = {report['load_call']}"


def card_of(folder: Path) -> tuple[dict, str]:
    return front_matter((folder / "README.md").read_text())


@pytest.fixture
def vit_file(tmp_path) -> Path:
    return write_plain(make_vit("cls-token"), tmp_path / "vit.safetensors")


def test_a_hugging_face_folder_holds_a_card_with_the_true_source_hash_and_the_inspect_line(tmp_path, lg):
    source, _ = gpt2_folder(tmp_path, "gpt2")
    out = tmp_path / "out"
    result = lg("shrink", source, "--depth", "2", "-o", out)
    assert result.code == 0, result.stderr
    meta, body = card_of(out)
    assert meta["library_name"] == "transformers"
    assert "lg" in meta["tags"] and "lg-select" in meta["tags"]  # lg, and the method (select: shrink's default)
    assert meta["pipeline_tag"] == "text-generation"
    assert "base_model" not in meta  # a local folder is no hub model
    assert f"sha256 `{inspected(lg, source)['sha256']}`" in body
    assert load_line(body) == inspect_load_line(lg, out)
    assert "lg shrink" in body and "--depth 2" in body  # the command that made it
    assert "not a finished model" in body and f"lg eval {out}" in body
    # A language model is scored as it is, as the hint on stderr says: a training probe of a real LLM on a CPU
    # takes hours, so the card does not propose one.
    assert f"lg eval {out} --data YOUR_TEXT --steps 0" in body and "--data kjv-mini --steps 0" in result.stderr
    # The card takes nothing from loading: transformers loads the folder strictly.
    model = load_strict(out, "gpt2-lm")
    assert outputs(model, token_ids()).isfinite().all()


def test_a_pipes_card_names_the_file_upstream_with_its_hash_not_stdin(tmp_path, lg):
    """Through `lg shrink SRC -o - | lg shrink - ...` the model between came
    in on stdin: the card names SRC and SRC's sha256, which provenance records
    on the step after it."""
    source, _ = gpt2_folder(tmp_path, "gpt2")
    first = lg("shrink", source, "--depth", "3", "-o", "-")
    assert first.code == 0, first.stderr
    out = tmp_path / "out"
    assert lg("shrink", "-", "--depth", "2", "-o", out, stdin=first.stdout).code == 0
    _, body = card_of(out)
    assert f"its weights come from `{source.name}`" in body
    assert f"- source: `{source.name}`, sha256 `{inspected(lg, source)['sha256']}`" in body


def test_a_timm_hub_folder_holds_a_card_with_timms_load_line(tmp_path, lg):
    source = tmp_path / "vit_hub"
    save_for_hf(make_vit("cls-token", model_name="vit_tiny_patch16_224", num_heads=4), str(source),
                safe_serialization=True)
    out = tmp_path / "out"
    result = lg("shrink", source, "--depth", "1", "-o", out)
    assert result.code == 0, result.stderr
    meta, body = card_of(out)
    assert (meta["library_name"], meta["pipeline_tag"]) == ("timm", "image-classification")
    assert load_line(body) == inspect_load_line(lg, out) == (
        f"import timm\nmodel = timm.create_model('local-dir:{out}', pretrained=True)")
    assert f"lg eval {out} --data YOUR_DATA --steps 300" in body  # an image model: how fast it learns, too
    load_local_dir(out)  # the line's own loader reads the folder with its card in it


def test_a_sharded_folder_holds_a_card(vit_file, tmp_path, lg):
    out = tmp_path / "sharded"
    result = lg("grow", vit_file, "--depth", "3", "--method", "clone", "--shard-size", "100KB", "-o", out)
    assert result.code == 0, result.stderr
    assert len(list(out.glob("model-*.safetensors"))) > 1
    meta, body = card_of(out)
    assert meta["library_name"] == "timm" and "lg-clone" in meta["tags"]
    assert f"sha256 `{inspected(lg, vit_file)['sha256']}`" in body
    # make_vit's file records no heads: the card's line passes those lg assumed (1) and says so.
    assert load_line(body) == inspect_load_line(lg, out, heads=1) + HEADS_ASSUMED_NOTE


def test_base_model_names_a_hub_source_directly_and_through_a_pipe(hub_cache, tmp_path, lg):  # noqa: F811
    folder, _ = gpt2_folder(tmp_path, "gpt2")
    add_to_cache(hub_cache, REPO_ID, folder, COMMIT_MAIN)
    direct = tmp_path / "direct"
    assert lg("shrink", REPO_ID, "--depth", "2", "-o", direct).code == 0
    assert card_of(direct)[0]["base_model"] == REPO_ID
    piped = lg("shrink", REPO_ID, "--depth", "2", "-o", "-")
    assert piped.code == 0, piped.stderr
    grown = tmp_path / "grown"
    result = lg("grow", "-", "--depth", "3", "-o", grown, stdin=piped.stdout)
    assert result.code == 0, result.stderr
    meta, body = card_of(grown)
    assert meta["base_model"] == REPO_ID  # the provenance names the hub model two steps back
    assert f"`{REPO_ID}@{COMMIT_MAIN}`" in body


def test_a_source_readme_is_replaced_and_its_license_carried(tmp_path, lg):
    source, _ = gpt2_folder(tmp_path, "gpt2")
    (source / "README.md").write_text("---\nlicense: apache-2.0\nbase_model:\n- someone/original\ntags:\n- gpt2\n"
                                      "---\n\n# The source model\n\nIt scores 99 % on everything.\n")
    out = tmp_path / "out"
    assert lg("shrink", source, "--depth", "2", "-o", out).code == 0
    meta, body = card_of(out)
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "someone/original"
    assert "gpt2" not in meta["tags"] and "99 %" not in body and "# out" in body


def test_card_file_for_a_single_file_never_overwrites_without_force(vit_file, tmp_path, lg):
    out, card = tmp_path / "small.safetensors", tmp_path / "card.md"
    result = lg("shrink", vit_file, "--depth", "1", "-o", out, "--card", card)
    assert result.code == 0, result.stderr
    meta, body = front_matter(card.read_text())
    assert meta["library_name"] == "timm" and meta["tags"][:2] == ["lg", "lg-select"]
    assert load_line(body) == inspect_load_line(lg, out, heads=1) + HEADS_ASSUMED_NOTE
    assert f"sha256 `{inspected(lg, vit_file)['sha256']}`" in body
    # Again without --force: refused before any work; neither the card nor a new output is written.
    written = card.read_bytes()
    other = tmp_path / "other.safetensors"
    refused = lg("shrink", vit_file, "--depth", "1", "-o", other, "--card", card)
    assert refused.code == 1 and refused.stderr == f"lg: error: {card}: exists; pass --force to overwrite it\n"
    assert card.read_bytes() == written and not other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.md", "small.safetensors", "vit.safetensors"]
    again = lg("shrink", vit_file, "--depth", "1", "-o", other, "--card", card, "--force")
    assert again.code == 0, again.stderr
    assert load_line(front_matter(card.read_text())[1]) == inspect_load_line(lg, other, heads=1) + HEADS_ASSUMED_NOTE


def test_a_card_file_may_not_be_the_output(vit_file, tmp_path, lg):
    out = tmp_path / "small.safetensors"
    result = lg("shrink", vit_file, "--depth", "1", "-o", out, "--card", out)
    assert result.code == 1 and "--card" in result.stderr and not out.exists()


def test_a_model_built_from_a_learngene_says_what_condensing_measured(tmp_path, lg):
    teacher = write_plain(make_vit("cls-token", depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28,
                                   in_chans=1, num_classes=10), tmp_path / "teacher.safetensors")
    gene = tmp_path / "tleg.lg.safetensors"
    # A plain timm file records no heads: --teacher-heads gives them (lg refuses to assume them).
    condensed = lg("condense", teacher, "--method", "tleg", "--teacher-heads", "2", "--data", "fashion-mnist-mini",
                   "--steps", "2",
                   "--batch-size", "16", "--subset", "64", "--test-subset", "32", "--device", "cpu", "-o", gene)
    assert condensed.code == 0, condensed.stderr
    out = tmp_path / "grown"
    assert lg("grow", gene, "--depth", "3", "--shard-size", "20KB", "-o", out).code == 0
    meta, body = card_of(out)
    assert "learngene-tleg" in meta["tags"]
    accuracy = inspected(lg, gene)["condensed"]["accuracy"]["top1"]
    assert f"top-1 {accuracy:.2f} %" in body and "auxiliary model" in body


def test_a_fitted_descendant_says_how_its_fit_went(tmp_path, lg):
    teacher = write_plain(make_vit("cls-token", depth=2, embed_dim=32, num_heads=2, patch_size=7, img_size=28,
                                   in_chans=1, num_classes=10), tmp_path / "teacher.safetensors")
    gene = tmp_path / "wave.lg.safetensors"
    condensed = lg("condense", teacher, "--method", "wave", "--teacher-heads", "2", "--template-dim", "16",
                   "--data", "fashion-mnist-mini",
                   "--steps", "2", "--batch-size", "16", "--subset", "64", "--test-subset", "32", "--device", "cpu",
                   "-o", gene)
    assert condensed.code == 0, condensed.stderr
    single, card = tmp_path / "grown.safetensors", tmp_path / "grown.md"
    result = lg("grow", gene, "--depth", "3", "--data", "fashion-mnist-mini", "--steps", "3", "--subset", "64",
                "--batch-size", "16", "--device", "cpu", "-o", single, "--card", card, "--json")
    assert result.code == 0, result.stderr
    fit = json.loads(result.stdout)["details"]
    meta, body = front_matter(card.read_text())
    assert "learngene-wave" in meta["tags"] and "without training" not in body
    assert (f"fitted on fashion-mnist-mini for 3 steps: training loss {fit['loss_first']:.3f} -> "
            f"{fit['loss_last']:.3f}") in body
