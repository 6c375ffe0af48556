"""What `lg inspect` reports of a model or a learngene, and the line that
loads a written model in its family's library."""

from __future__ import annotations

import math
import os
import shlex
from typing import Any, BinaryIO

from .arch import get_adapter
from .arch.base import with_heads
from .checkpoint import STDIO, Checkpoint, provenance_chain, read_checkpoint
from .hub import hub_name_of_path
from .learngene_files import is_learngene, load_learngene
from .loading import LEARNGENE, MODEL, load, task_of
from .learngenes import get_kind
from .learngenes.base import Learngene, depths_text, is_global
from .preprocessing import PREPROCESSING
from .sizing import own_depth, spec_sizes
from .stack import ArchSpec, Stack


def parameter_counts(stack: Stack) -> dict[str, int]:
    """Parameter counts: transformer blocks, embeddings, final norms, classifier head."""
    groups = {"blocks": 0, "embeddings": 0, "norm": 0, "head": 0}
    for role, _, shape, per_layer in stack.shapes():
        if per_layer:
            group = "blocks"
        elif role.startswith(("head", "lm_head", "pooler")):
            group = "head"
        elif "norm" in role:
            group = "norm"
        else:
            group = "embeddings"
        groups[group] += math.prod(shape)
    groups["total"] = sum(groups.values())
    return groups


def inspect_checkpoint(source: str | os.PathLike | Checkpoint, heads: int | None = None,
                       *, stdin: BinaryIO | None = None) -> dict[str, Any]:
    """Everything `lg inspect` reports, as a JSON-ready dict.

    A model's report needs its header (and config.json) only: a file or
    folder is read so (`header_only`), and torch is not imported unless a
    value must be read (a tied head saved twice is compared with what it
    copies). A learngene's kind reads its tensors."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin,
                                                                               header_only=True)
    lg = checkpoint.lg
    if is_learngene(checkpoint):
        if checkpoint.header_only:
            checkpoint = read_checkpoint(checkpoint.source)
        return inspect_learngene(checkpoint)
    loaded = load(checkpoint, heads=heads)
    spec = loaded.spec
    adapter = get_adapter(spec.family)
    dtypes: dict[str, int] = {}
    for tensor in checkpoint.tensors.values():
        name = str(tensor.dtype).replace("torch.", "")
        dtypes[name] = dtypes.get(name, 0) + tensor.numel()
    shown_path = _load_path(checkpoint)
    return {
        "file": checkpoint.source,
        "hub": hub_name_of_path(checkpoint.source),  # org/name@commit when read from the Hugging Face cache
        "sha256": checkpoint.sha256,
        "bytes": checkpoint.nbytes,
        "kind": lg.get("kind", MODEL),
        "family": spec.family,
        "depth": spec.depth,
        "width": spec.width,
        "heads": spec.heads,
        "kv_heads": spec.key_value_heads,
        "heads_assumed": spec.heads_assumed,
        "head_dim": spec.head_dim,
        "mlp_dim": spec.mlp_dim,
        # A model of stages (Swin): each stage's sizes (the fields above are the first stage's, depth all blocks).
        "stages": spec_sizes(spec).get("stages"),
        **{key: value for key, _, value in adapter.inspect_fields(spec)},
        "family_fields": [[key, label] for key, label, _ in adapter.inspect_fields(spec)],
        "parameters": parameter_counts(loaded.stack),
        "dtypes": dtypes,
        "config": adapter.config(spec),
        "provenance": provenance_chain(lg) if lg else [],
        # None where the heads are assumed: `lg inspect` prints the command that prints it given them.
        "load_call": None if spec.heads_assumed else with_heads(adapter.load_call(spec, shown_path), shown_path,
                                                                heads),
        "load_imports": None if spec.heads_assumed else adapter.load_imports(spec, shown_path),
        # How its images are prepared and where lg found that (None: a model of tokens).
        "preprocessing": preprocessing.report() if (preprocessing := spec.extras.get(PREPROCESSING)) else None,
    }


def inspect_learngene(checkpoint: Checkpoint) -> dict[str, Any]:
    """What `lg inspect` reports for a learngene: what it is, its parameters,
    the teacher, the auxiliary model's accuracy, and the sizes it can become."""
    gene = load_learngene(checkpoint)
    spec = gene.spec
    described = get_kind(gene.kind, gene.spec).describe(gene)
    chain = provenance_chain(checkpoint.lg)
    shown_path = _load_path(checkpoint)
    # A model of stages' learngene holds each stage's under stage<i>. (learngenes.stages).
    per_layer = sum(t.numel() for name, t in gene.tensors.items() if not is_global(name.split(".", 1)[1]
                                                                                 if spec.stages else name))
    return {
        "file": checkpoint.source,
        "sha256": checkpoint.sha256,
        "bytes": checkpoint.nbytes,
        "kind": LEARNGENE,
        "learngene": gene.kind,
        "family": spec.family,
        "aux_depth": spec.depth,
        "width": spec.width,
        "heads": spec.heads,
        "kv_heads": spec.key_value_heads,
        "head_dim": spec.head_dim,
        "mlp_dim": spec.mlp_dim,
        "stages": spec_sizes(spec).get("stages"),  # a model of stages (Swin): its sizes per stage
        "num_classes": get_adapter(spec.family).num_classes(spec),
        # What a descendant's model does, as its family says (a ViT classifies
        # images; a text family names its causal or masked LM, or encoder).
        "task": task_of(spec),
        "sizes": gene.sizes,
        "parameters": {"learngene": per_layer, "globals": gene.num_parameters() - per_layer,
                       "total": gene.num_parameters()},
        "teacher": chain[1] if len(chain) > 1 else None,
        "accuracy": gene.condensed.get("accuracy"),
        "condensed": gene.condensed,
        **described,
        "config": get_adapter(spec.family).config(spec),
        # How its descendants' images are prepared (its teacher's; None: a model of tokens).
        "preprocessing": preprocessing.report() if (preprocessing := spec.extras.get(PREPROCESSING)) else None,
        "provenance": chain,
        "expand_call": grow_hint(shown_path, gene),
        "load_call": f"lgcli.load_learngene({shown_path!r})",
    }


def grow_hint(path: str, learngene: Learngene) -> str:
    """The `lg grow` line that builds a model of the learngene at `path`, as
    it runs: at the auxiliary depth (or the deepest it was trained at, where
    its kind builds only those), and at the narrowest width it was trained
    at where it was trained at several (it builds those and refuses others),
    written beside the working directory in the family's form (a folder for a
    model folder's family); a shell comment says what else it builds, as its
    kind refuses the rest (LeTs: the depths it was trained at)."""
    spec, widths = learngene.spec, learngene.sizes.get("widths")
    depths = get_kind(learngene.kind, spec).trained_depths(learngene)
    depth = own_depth(spec)
    if depths and depth not in depths:
        depth = max(depths)
    name = os.path.basename(path).removesuffix(".safetensors").removesuffix(".lg") or "learngene"
    name += f"-depth{depth}" + (f"-width{min(widths)}" if widths else "")
    folder = get_adapter(spec.family).folder_config(spec) is not None
    sizes = f"--depth {depth}" + (f" --width {min(widths)}" if widths else "")
    builds = ("any depth" if not depths else f"depths {depths_text(depths, ', ')}") \
        + (f"; trained widths {', '.join(map(str, widths))}" if widths else "")
    return (f"lg grow {shlex.quote(path)} {sizes} -o {shlex.quote(name if folder else name + '.safetensors')}"
            f"  # {builds}")


def load_line(spec: ArchSpec, path: str | os.PathLike) -> str | None:
    """The line that loads what was written at `path` in its family's library
    (imports; model = ...), or None for a stream (its reader names the file)."""
    if str(path) == STDIO:
        return None
    adapter = get_adapter(spec.family)
    # Heads assumed (a depth change of a timm file that records none) are passed as a timm line states them,
    # so that it runs as printed; whoever prints it says they are assumed (lg resize's note).
    call = with_heads(adapter.load_call(spec, str(path)), str(path), spec.heads if spec.heads_assumed else None)
    return f"{adapter.load_imports(spec, str(path))}; model = {call}"


def _load_path(checkpoint: Checkpoint) -> str:
    """The path a load line can name: a stream (stdin, a pipe) has none."""
    source = checkpoint.source
    if source == STDIO or not (os.path.isfile(source) or os.path.isdir(source)):
        return "<file>"
    return source
