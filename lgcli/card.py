"""Model cards: the README.md a Hugging Face repository shows, for what lg writes.

Every model folder lg writes (a Hugging Face folder, a timm hub folder, a
folder of shards) holds one; `lg shrink|grow --card FILE` writes the same
text beside a single file. The card says what the Hub reads in its front
matter (`library_name`, `base_model`, `license`, `tags`, `pipeline_tag`),
then how the model was made (the command, the method, the source's sha256
and the provenance chain, all read from the metadata written into the
weights), the line that loads it (the one `lg inspect` prints), that it is
an initialisation to fine-tune and not a finished model, how to fine-tune
and evaluate it, and what lg measured on the way (a learngene's condensing,
a fitting on data).

A source folder's own README.md describes another model, so it is not
copied: its `license` (with `license_name` and `license_link`) is carried
into the new card's front matter, since a resized model is a derivative of
the source's weights, and its `base_model` is used when no hub id is found
in the provenance.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .errors import counted
from .hub import hub_name_of_path, open_snapshot_link, parse_hub_id
from .preprocessing import PREPROCESSING

if TYPE_CHECKING:  # annotations only: this module stays importable without torch
    from .checkpoint import Checkpoint
    from .stack import ArchSpec

# The pipeline tag the Hub shows for what a family's model does (lgcli.arch.base.TASKS).
PIPELINE_TAGS = {"image-classification": "image-classification", "causal-lm": "text-generation",
                 "masked-lm": "fill-mask", "text-encoder": "feature-extraction"}
# Front-matter fields of a source's README.md carried into the card (the license, as a derivative).
CARRIED_FIELDS = ("license", "license_name", "license_link")
# A source README larger than this is not read (a card is a few KB).
MAX_SOURCE_README_BYTES = 1 << 20


# After a load line whose heads lg assumed (the file records none): a Python comment, so the line runs as pasted.
HEADS_ASSUMED_NOTE = "  # heads assumed: set them to the model's own"


@dataclass(frozen=True)
class CardFacts:
    """What the card says that the written metadata does not: the command
    line that made the output (None from the library), and lines of
    results lg measured while making it (a fitting on data)."""

    command: str | None = None
    results: Sequence[str] = field(default_factory=tuple)


def model_card(spec: ArchSpec, path: str, *, folder: bool, metadata: Mapping[str, str], task: str,
               parameters: int, source: Checkpoint | None = None, facts: CardFacts | None = None) -> str:
    """The README.md of a model of `spec` written at `path` (a folder when
    `folder`; "<file>" for a stream) with `metadata` (its safetensors
    ``__metadata__``), `parameters` in all, doing `task`."""
    from .arch import get_adapter
    from .arch.base import IMAGE_CLASSIFICATION, with_heads
    from .checkpoint import decode_lg_metadata, provenance_chain

    facts = facts or CardFacts()
    adapter = get_adapter(spec.family)
    lg = decode_lg_metadata(metadata)
    chain = provenance_chain(lg)
    inherited = source_card_fields(source)
    base_model = hub_base_model(chain) or inherited.get("base_model")
    built_from = lg.get("source") if isinstance(lg.get("source"), Mapping) else {}
    learngene = built_from.get("method") if built_from.get("kind") == "learngene" else None

    front: list[tuple[str, Any]] = [("library_name", adapter.library)]
    if base_model:
        front.append(("base_model", base_model))
    front += [(key, inherited[key]) for key in CARRIED_FIELDS if key in inherited]
    tags = ["lg", f"lg-{lg.get('method')}" if lg.get("method") else None,
            f"learngene-{learngene}" if learngene else None, "initialisation"]
    front.append(("tags", [tag for tag in tags if tag]))
    if task in PIPELINE_TAGS:
        front.append(("pipeline_tag", PIPELINE_TAGS[task]))

    name = os.path.basename(path.rstrip("/" + os.sep)) or path
    shown_path = "OUT" if path == "<file>" else path
    options = lg.get("options") or {}
    made = ("built from a " + learngene + " learngene") if learngene else f"made by {lg.get('method') or 'lg'}"
    lines = ["---", *front_matter_lines(front), "---", "", f"# {name}", "",
             f"A {spec.depth}-layer, width-{spec.width} {spec.family} model ({parameters:,} parameters), "
             f"{made} with `lg` (lgcli){'' if facts.results else ' without training'}. "
             f"**This is an initialisation to fine-tune, "
             f"not a finished model**: its weights come from {_source_phrase(base_model, chain)}, "
             f"{'distilled from a teacher' if lg.get('method') == 'distill' else 'resized'}; "
             f"train it on your task before you use it.", "",
             "## How it was made", ""]
    if facts.command:
        lines += ["```sh", facts.command, "```", ""]
    lines.append(f"- method: `{lg.get('method') or '?'}`" + (f" with `{json.dumps(options, sort_keys=True)}`"
                                                            if options else ""))
    source_name, source_sha256 = named_source(chain)
    if source_sha256:
        lines.append(f"- source: `{source_name}`, sha256 `{source_sha256}`")
    lines.append(f"- size: depth {spec.depth}, width {spec.width}, {spec.heads} head{'s' * (spec.heads != 1)}"
                 + (f" ({spec.key_value_heads} key/value heads)" if spec.key_value_heads != spec.heads else "")
                 + f" of dimension {spec.head_dim}, MLP {spec.mlp_dim}")
    recipe = spec.extras.get(PREPROCESSING)
    if recipe is not None:  # what the load line's data config, and a folder's processor config, also say
        lines.append(f"- preprocessing: {recipe.describe()}, input {recipe.size}x{recipe.size} "
                     f"({recipe.channels} channel{'s' * (recipe.channels != 1)}): lg fed it so "
                     f"(from {recipe.source})")
    lines += ["- provenance, newest first:", *(f"  {n}. {step_text(step)}" for n, step in enumerate(chain, 1)), ""]
    # Heads a file records none of are passed, as lg's own loader refuses it without them, and said assumed.
    call = with_heads(adapter.load_call(spec, path, folder=folder), path, spec.heads if spec.heads_assumed else None)
    call += HEADS_ASSUMED_NOTE if spec.heads_assumed else ""
    lines += ["## Load", "", "```python", adapter.load_imports(spec, path, folder=folder), f"model = {call}", "```", "",
              "## Fine-tune and evaluate", ""]
    if adapter.scored_by_lg(spec) and task != IMAGE_CLASSIFICATION:
        # As lg's own hint after a resize: a training probe of a real language model on a CPU takes hours.
        lines += [f"Fine-tune it with {adapter.fine_tune}. lg scores it as it is (held-out perplexity) on your "
                  "text, and `--steps N` first trains it for N steps to see how fast it learns:", "",
                  "```sh", f"lg eval {shown_path} --data YOUR_TEXT --steps 0", "```", ""]
    elif adapter.scored_by_lg(spec):
        lines += [f"Fine-tune it with {adapter.fine_tune}. lg scores it, and how fast it learns, on your data:", "",
                  "```sh", f"lg eval {shown_path} --data YOUR_DATA --steps 300", "```", ""]
    else:  # a model of features, a text encoder without a language-model head: nothing for lg eval to score
        lines += [f"Fine-tune it with {adapter.fine_tune}. lg does not score it: lg scores image classifiers and "
                  "language models, and this model has no head to score.", ""]
    results = [*facts.results, *learngene_results(built_from)]
    if results:
        lines += ["## What lg measured", "", *(f"- {line}" for line in results), ""]
    return "\n".join(lines)


def front_matter_lines(fields: Sequence[tuple[str, Any]]) -> list[str]:
    """YAML for string and list-of-string fields: every string a JSON string,
    which YAML reads as the same double-quoted scalar."""
    lines = []
    for key, value in fields:
        if isinstance(value, (list, tuple)):
            lines += [f"{key}:", *(f"- {json.dumps(str(item))}" for item in value)]
        else:
            lines.append(f"{key}: {json.dumps(str(value))}")
    return lines


def step_text(step: Mapping[str, Any]) -> str:
    """One provenance step in words (as `lg inspect` lists them)."""
    text = step.get("method") or step.get("kind") or "a checkpoint lg did not write"
    if step.get("file"):
        text = f"`{step['file']}`: {text}"
    if step.get("options"):
        text += f" `{json.dumps(step['options'], sort_keys=True)}`"
    if step.get("truncated"):
        text += " (older steps not kept)"
    return text


def hub_base_model(chain: Sequence[Mapping[str, Any]]) -> str | None:
    """The nearest ancestor read from the Hugging Face cache (provenance
    records it as org/name@commit), as the Hub names a base model: org/name."""
    for step in chain[1:]:
        parsed = parse_hub_id(str(step.get("file", "")))
        if parsed is not None:
            return parsed[0]
    return None


def _source_phrase(base_model: str | None, chain: Sequence[Mapping[str, Any]]) -> str:
    if base_model:
        return f"`{base_model}`"
    name, _ = named_source(chain)
    return f"`{name}`" if name else "its source"


# Names of models read from no file of the user's: passed over for the one before them.
UNNAMED = ("<stdin>", "<in memory>")


def named_source(chain: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """(name, sha256) of the nearest ancestor read from a named file, a
    step between held in memory or piped through stdin passed over (the
    hash of a step's source is on the step after it, newer, in the chain);
    the nearest piped one where no file is named; (None, None) for none."""
    ancestors = range(1, len(chain))
    for wanted in (lambda file: file not in UNNAMED, lambda file: file == "<stdin>"):
        for index in ancestors:
            if chain[index].get("file") and wanted(chain[index]["file"]):
                return chain[index]["file"], chain[index - 1].get("source_sha256")
    return None, None


def condensed_score(condensed: Mapping[str, Any], teacher: str) -> str:
    """The test figure condensing recorded, beside the teacher's: top-1 on
    images, loss (and perplexity) on text."""
    if "accuracy" in condensed:
        return (f"top-1 {condensed['accuracy']['top1']:.2f} % ({teacher} "
                f"{condensed['teacher_accuracy']['top1']:.2f} %)")
    own, theirs = condensed["loss"], condensed["teacher_loss"]
    return (f"test loss {own['loss']:.3f}, perplexity {own['perplexity']:.1f} ({teacher} {theirs['loss']:.3f}, "
            f"{theirs['perplexity']:.1f})")


def learngene_results(built_from: Mapping[str, Any]) -> list[str]:
    """What condensing recorded in the learngene a model was built from."""
    condensed = (built_from.get("learngene") or {}).get("condensed") if built_from.get("kind") == "learngene" else None
    if not isinstance(condensed, Mapping):
        return []
    scored = all(isinstance(condensed.get(k), Mapping) for k in ("accuracy", "teacher_accuracy")) or all(
        isinstance(condensed.get(k), Mapping) for k in ("loss", "teacher_loss"))
    if not scored:
        return []
    data = (condensed.get("data") or {}).get("name", "its data") if isinstance(condensed.get("data"), Mapping) \
        else "its data"
    steps = f" after {condensed['steps']} condensing steps" if condensed.get("steps") else ""
    return [f"the {built_from.get('method')} learngene's auxiliary model: {condensed_score(condensed, 'teacher')} "
            f"on {data}{steps} (the descendant itself is not scored until you fine-tune it)"]


def fitting_results(details: Mapping[str, Any]) -> list[str]:
    """A descendant's fitting on data (`lg grow LG --data D`), from its report."""
    if not details.get("fitted"):
        return []
    data = (details.get("data") or {}).get("name", "the data") if isinstance(details.get("data"), Mapping) \
        else "the data"
    return [f"fitted on {data} for {counted(details['steps'], 'step')}: training loss {details['loss_first']:.3f} -> "
            f"{details['loss_last']:.3f}"]


def source_card_fields(source: Checkpoint | None) -> dict[str, str]:
    """The front-matter fields of the source folder's README.md that the
    card carries (CARRIED_FIELDS, and base_model), as plain strings."""
    text = _source_readme(source)
    if not text or not text.startswith("---"):
        return {}
    fields: dict[str, str] = {}
    key = None
    for line in text.splitlines()[1:]:
        if line.strip() == "---":
            break
        if line.startswith(("- ", "  - ")) and key and key not in fields:  # the first item of a list
            fields[key] = _scalar(line.split("-", 1)[1])
        elif ":" in line and not line.startswith((" ", "-", "#")):
            key, value = (part.strip() for part in line.split(":", 1))
            if value and key in (*CARRIED_FIELDS, "base_model"):
                fields[key] = _scalar(value)
            elif key not in (*CARRIED_FIELDS, "base_model"):
                key = None
    return {k: v for k, v in fields.items() if v}


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _source_readme(source: Checkpoint | None) -> str | None:
    """The README.md of the folder the source was read from (a model folder,
    or the cached snapshot its file is in), or None. A snapshot's link is
    followed into its blobs only; elsewhere a link is not followed."""
    from .checkpoint.names import README_NAME, STDIO

    if source is None or not isinstance(source.source, str) or source.source == STDIO:
        return None
    folder = source.source if os.path.isdir(source.source) else (
        os.path.dirname(source.source) if hub_name_of_path(source.source) else None)
    if folder is None:
        return None
    fd = open_snapshot_link(folder, README_NAME) if hub_name_of_path(folder) else None
    try:
        if fd is None:
            fd = os.open(os.path.join(folder, README_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as f:
            fd = None
            data = f.read(MAX_SOURCE_README_BYTES + 1)
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > MAX_SOURCE_README_BYTES:
        return None
    return data.decode("utf-8", "replace")
