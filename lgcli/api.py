"""What the command line does, as functions for notebooks and scripts.

    >>> import lgcli
    >>> loaded = lgcli.load("deit_s.safetensors")          # spec + canonical stack
    >>> model, spec = lgcli.load_model("deit_s.safetensors")  # a timm nn.Module
    >>> lgcli.inspect_checkpoint("deit_s.safetensors")["load_call"]
    >>> gene = lgcli.load_learngene("tleg.lg.safetensors")  # a learngene (kind, spec, tensors)
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator, Mapping

from .arch import detect_family, family_of_config, get_adapter, known_model_types
from .card import CardFacts, model_card
from .checkpoint import (STDIO, Checkpoint, atomic_path, check_memory, check_output, companion_bytes,
                         companion_metadata, companion_size, provenance_chain, provenance_metadata, read_checkpoint,
                         write_checkpoint, write_tensors)
from .checkpoint.writing import shard_parts
from .errors import LgError, notify_stderr, shown
from .hub import hub_name_of_path
from .lazy import nn, torch
from .learngenes import Learngene, get_kind
from .learngenes.base import check_tensors, is_global
from .preprocessing import MODEL_ATTRIBUTE, PREPROCESSING, preprocessing_of_spec, resolve, with_preprocessing
from .sizing import spec_sizes
from .stack import ArchSpec, Stack

MODEL, LEARNGENE = "model", "learngene"


@dataclass
class Loaded:
    """A checkpoint read into lg's canonical view."""

    spec: ArchSpec
    stack: Stack
    checkpoint: Checkpoint

    @property
    def dtype(self) -> torch.dtype:
        return _dominant_dtype(self.checkpoint.tensors)


def load(source: str | os.PathLike | Checkpoint, heads: int | None = None,
         *, kv_heads: int | None = None, stdin: BinaryIO | None = None) -> Loaded:
    """Read a model checkpoint (file, '-', sharded folder, .pth) into (spec, stack).

    `heads` (or `kv_heads`, for grouped-query attention) gives the heads
    when the file does not record them; else they are read from the weights
    where they show them, else assumed (`spec.heads_assumed`).

    The stack is lazy: each role is read from the file when it is asked for
    (`loaded.stack.layers["fc1"]`), and not kept, so a checkpoint of any size
    loads in the memory of its largest role. `loaded.stack.materialized()`
    holds every role in memory."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
    lg = checkpoint.lg
    if lg.get("kind", MODEL) == LEARNGENE:
        raise LgError(f"{checkpoint.label}: is a learngene, not a model: build a model from it with "
                      f"`lg grow {checkpoint.label} --depth N -o OUT`")
    if lg.get("kind", MODEL) != MODEL:
        raise LgError(f"{checkpoint.label}: is a {lg.get('kind')}, not a model checkpoint")
    # A model folder's config.json is its configuration (lg's own metadata
    # records the same when lg wrote the folder); a single file's is lg.config.
    config = checkpoint.config if checkpoint.config is not None else lg.get("config")
    family = lg.get("family") or (family_of_config(checkpoint.config) if checkpoint.config is not None else None)
    if checkpoint.config is not None and family is None:
        raise LgError(f"{checkpoint.label}: config.json's model_type {shown(checkpoint.config.get('model_type'))} "
                      f"is not one lg reads ({', '.join(known_model_types())})")
    adapter = get_adapter(family or detect_family(checkpoint.tensors))
    try:
        spec, stack = adapter.to_stack(checkpoint.tensors, config=config, heads=heads, kv_heads=kv_heads,
                                       reader=checkpoint.read_into)
        # How an image model's images are prepared (`lgcli.preprocessing`): carried by the spec into every output.
        spec = with_preprocessing(spec, resolve(checkpoint, spec, adapter))
    except LgError as exc:  # name the file or folder the problem is in
        where = checkpoint.label
        raise (exc if str(exc).startswith(where) else LgError(f"{where}: {exc}")) from None
    # A role stack is a copy of its layers' tensors: one larger than the memory
    # available (a sparse file, say) is refused with the figures, not half-made.
    check_memory(stack.largest_role_elements() * 4, f"{checkpoint.label}: its largest role stack (float32)")
    return Loaded(spec=spec, stack=stack, checkpoint=checkpoint)


@dataclass
class OutputPlan:
    """What `save` will write, known before any tensor is made: the
    adapter's groups of tensors, every entry (name, dtype, shape) in file
    order, and the form the output takes."""

    parent: Checkpoint | None
    folder_config: dict[str, Any] | None  # a model folder's config.json; None: weights only
    groups: list
    entries: list
    target_dtype: torch.dtype
    shards: int  # safetensors files the weights are split into

    @property
    def tensor_bytes(self) -> int:
        return sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in self.entries)

    def form(self, destination: str | os.PathLike) -> str:
        """stream ('-'), folder (a model folder), shards (a folder of shards) or file."""
        if str(destination) == STDIO:
            return "stream"
        return "folder" if self.folder_config is not None else "shards" if self.shards > 1 else "file"


def plan_output(destination: str | os.PathLike, spec: ArchSpec, stack: Stack, *,
                source: Loaded | Checkpoint | None = None, force: bool = False, dtype: torch.dtype | None = None,
                shard_size: int | None = None) -> OutputPlan:
    """Check the output (where it goes, that the family loads it strictly)
    and plan it from the stack's shapes alone: what `save` writes, and what
    `--dry-run` reports."""
    parent = source.checkpoint if isinstance(source, Loaded) else source
    adapter = get_adapter(spec.family)
    # A folder's config.json, or None: the output is one file (the family's
    # form, or the source's: a timm ViT read from a timm hub folder).
    folder_config = adapter.folder_config(spec)
    check_output(destination, force=force, inputs=(parent.source,) if parent else (),
                 folder=folder_config is not None)
    groups = adapter.write_plan(spec, stack)
    shapes = {key: shape for group in groups for key, shape in group.entries}
    try:
        adapter.check_loadable(spec, shapes)  # what lg writes, the family's library loads strictly
    except LgError as refused:  # "refusing to write: ...": which output, said first
        raise LgError(f"{shown(str(destination))}: {refused}") from None
    # Each tensor in its own dtype in the source (blocks float16 and the rest
    # float32 stay so), a new one (a grown block) in the source's dominant
    # dtype; `dtype` sets every one.
    target_dtype = dtype or (_dominant_dtype(parent.tensors) if parent else None) or torch.float32
    entries = [(key, dtype or _own_dtype(parent, key) or target_dtype, shape) for key, shape in shapes.items()]
    shards = 1 if str(destination) == STDIO else len(shard_parts(entries, shard_size))
    return OutputPlan(parent=parent, folder_config=folder_config, groups=groups, entries=entries,
                      target_dtype=target_dtype, shards=shards)


def save(destination: str | os.PathLike, spec: ArchSpec, stack: Stack, *, kind: str = MODEL,
         method: str | None = None, options: Mapping[str, Any] | None = None,
         source: Loaded | Checkpoint | None = None, force: bool = False,
         dtype: torch.dtype | None = None, stdout: BinaryIO | None = None,
         shard_size: int | None = None, card: CardFacts | None = None, card_file: str | None = None) -> str:
    """Write (spec, stack) as the family's plain checkpoint with lg metadata.

    The file is streamed: its header is written from the stack's shapes, then
    the adapter's groups of roles are made (a lazy stack computes them now)
    and written one group at a time, so only one group is ever in memory.
    Every float tensor is written in `dtype`, by default the source's (so
    bf16 in, bf16 out; methods compute in float32). Past `shard_size` bytes
    the output is a sharded folder with its index. A folder output holds
    its model card (README.md, `lgcli.card`), `card` adding what the
    metadata does not say; `card_file` gets the same text whatever the
    output. Returns the sha256 of what was written.
    """
    # How an image model's images are prepared: what its metadata, folder
    # configs, load line and card all state (a live model's spec may carry none).
    spec = with_preprocessing(spec, preprocessing_of_spec(spec, get_adapter(spec.family)))
    plan = plan_output(destination, spec, stack, source=source, force=force, dtype=dtype, shard_size=shard_size)
    parent, folder_config = plan.parent, plan.folder_config
    if card_file is not None:
        check_card_file(card_file, destination, force=force, inputs=(parent.source,) if parent else ())
    adapter = get_adapter(spec.family)

    # A folder holds the source's tokenizer files beside the weights; a
    # single file (a pipe) carries them in its header, to the folder at its end.
    as_folder = folder_config is not None and str(destination) != STDIO
    files = folder_files(adapter, spec, parent, folder_config) if as_folder else None
    carried = {} if as_folder else carried_companions(parent)

    preprocessing = spec.extras.get(PREPROCESSING)

    def metadata(source_sha256: str | None = None) -> dict[str, str]:
        return {**provenance_metadata(kind=kind, family=spec.family, config=adapter.config(spec), method=method,
                                      options=options, source=parent, source_sha256=source_sha256,
                                      preprocessing=preprocessing.record() if preprocessing else None), **carried}

    def card_text(meta: Mapping[str, str], folder: bool) -> str:
        return model_card(spec, str(destination) if str(destination) != STDIO else "<file>", folder=folder,
                          metadata=meta, task=task_of(spec), parameters=stack.num_parameters(), source=parent,
                          facts=card)

    def readme(meta: Mapping[str, str]) -> bytes:
        return card_text(meta, folder=True).encode()

    # The source's sha256 (the provenance) is computed in the background from
    # the moment it is read. When the output is smaller than the source, the
    # work goes ahead while it finishes, and the header is completed at the
    # end: hashing the output back is then cheaper than waiting.
    with contextlib.ExitStack() as card_output:
        # The card's temporary file is made before the model is written, so a
        # --card that cannot be written fails before the model is (a command
        # that fails writes nothing); it is renamed into place just after.
        card_tmp = card_output.enter_context(atomic_path(card_file)) if card_file is not None else None
        if parent is not None and not parent.digest_ready and plan.tensor_bytes < parent.nbytes and files is None:
            digest = write_tensors(destination, plan.entries, _made(plan.groups), metadata("0" * 64), force=force,
                                   stdout=stdout, shard_size=shard_size, final_metadata=metadata, readme=readme)
        else:
            digest = write_tensors(destination, plan.entries, _made(plan.groups), metadata(), force=force,
                                   stdout=stdout, shard_size=shard_size, folder_files=files, readme=readme)
        if card_tmp is not None:
            card_tmp.write_text(card_text(metadata(), folder=os.path.isdir(destination)), encoding="utf-8")
    return digest


def check_card_file(card_file: str, destination: str | os.PathLike, *, force: bool,
                    inputs: tuple[str | os.PathLike, ...] = ()) -> None:
    """Refuse a --card file as an output is refused (exists without force,
    an input, no such folder), or one that names the output itself."""
    if card_file == STDIO or os.path.abspath(card_file) == os.path.abspath(destination):
        raise LgError(f"--card {card_file}: give a file of its own for the model card (not the output, not '-')")
    check_output(card_file, force=force, inputs=inputs, folder=False)


def write_card(card_file: str, text: str, *, force: bool) -> None:
    """The model card as a file of its own, written as outputs are (atomically; never over one without force)."""
    check_output(card_file, force=force, folder=False)
    with atomic_path(card_file) as tmp:
        tmp.write_text(text, encoding="utf-8")


# Companions up to this size are read, for the adapter to rewrite a size
# they state (a pooling config); larger ones (tokenizers) are streamed as they are.
REWRITTEN_COMPANION_BYTES = 1 << 20


def folder_files(adapter, spec: ArchSpec, parent: Checkpoint | None,
                 config: Mapping[str, Any]) -> dict[str, Any]:
    """What a model folder holds beside its weights: `config` (the adapter's
    `folder_config`) as config.json, and the source folder's tokenizer and
    generation files, copied (the adapter rewrites what states a size)."""
    import json

    files: dict[str, Any] = {"config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()}
    companions = parent.companions if parent is not None else {}
    for name, item in companions.items():
        if companion_size(item) > REWRITTEN_COMPANION_BYTES:
            files[name] = item
        else:
            files[name] = adapter.rewrite_companion(name, companion_bytes(companions, name), spec)
    # What the family writes where the source had none (an image model's preprocessor_config.json).
    written = getattr(adapter, "written_companions", None)
    for name, data in (written(spec) if written is not None else {}).items():
        files.setdefault(name, data)
    return files


def carried_companions(parent: Checkpoint | None, notify: Callable[[str], None] = notify_stderr) -> dict[str, str]:
    """The metadata entries that carry the source's tokenizer (and other
    companion) files through a single file: a pipe, or a learngene, whose
    model folder at the end of the line then holds them again."""
    if parent is None or not parent.companions:
        return {}
    entries, total = companion_metadata(parent.companions)
    if not entries:
        notify(f"the source's tokenizer and config files hold {total / 2**20:.0f} MiB, more than a safetensors "
               f"header carries: copy them into the final model folder yourself")
    return entries


def _made(plan) -> Iterator[tuple[str, torch.Tensor]]:
    """The plan's tensors, group after group; what a group held is handed back
    to the system before the next is made (the peak stays one group's)."""
    from .checkpoint.memory import release_freed_memory

    for group in plan:
        yield from group.make()
        release_freed_memory()


def is_learngene(checkpoint: Checkpoint) -> bool:
    return checkpoint.lg.get("kind") == LEARNGENE


def load_learngene(source: str | os.PathLike | Checkpoint, *, stdin: BinaryIO | None = None) -> Learngene:
    """Read a learngene file: its kind, the family configuration it expands
    from, its tensors by role, and what condensing recorded."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source, stdin=stdin)
    lg = checkpoint.lg
    if lg.get("kind", MODEL) != LEARNGENE:
        raise LgError(f"{checkpoint.label}: is a model checkpoint, not a learngene (make one with "
                      f"`lg condense TEACHER --method tleg|wave --data D -o OUT`)")
    try:
        get_kind(lg.get("method"))
    except LgError as exc:  # what the file says, not a mistyped flag: a refusal of the file (exit 1)
        raise LgError(f"{checkpoint.label}: refused: metadata lg.method: {exc}") from None
    adapter = get_adapter(lg.get("family") or "")
    spec, template = adapter.template_from_config(lg.get("config") or {})
    try:  # the preprocessing its teacher was condensed with, for its descendants
        spec = with_preprocessing(spec, resolve(checkpoint, spec, adapter))
    except LgError as exc:
        raise LgError(f"{checkpoint.label}: {exc}") from None
    kind = get_kind(lg.get("method"), spec)
    info = lg.get("learngene") or {}
    sizes, condensed = info.get("sizes", {}), info.get("condensed", {})
    if not isinstance(sizes, dict) or not isinstance(condensed, dict):
        raise LgError(f"{checkpoint.label}: refused: metadata lg.learngene must hold objects 'sizes' and 'condensed'")
    learngene = Learngene(kind=kind.name, spec=spec, tensors=dict(checkpoint.tensors), sizes=sizes,
                          condensed=condensed, checkpoint=checkpoint)
    check_tensors(learngene, kind.expected_tensors(learngene, template), checkpoint.label)
    return learngene


def save_learngene(destination: str | os.PathLike, learngene: Learngene, *, options: Mapping[str, Any] | None = None,
                   source: Checkpoint | None = None, force: bool = False,
                   stdout: BinaryIO | None = None) -> str:
    """Write a learngene file (kind ``learngene``): its tensors by role in
    float32, the family configuration it expands from, its sizes, the condense
    settings (`options`) and the teacher's provenance (`source`)."""
    check_output(destination, force=force, inputs=(source.source,) if source else ())
    adapter = get_adapter(learngene.spec.family)
    preprocessing = learngene.spec.extras.get(PREPROCESSING)
    metadata = provenance_metadata(kind=LEARNGENE, family=learngene.spec.family,
                                   config=adapter.config(learngene.spec), method=learngene.kind,
                                   options=options, source=source,
                                   learngene={"sizes": learngene.sizes, "condensed": learngene.condensed},
                                   preprocessing=preprocessing.record() if preprocessing else None)
    metadata.update(carried_companions(source))
    tensors = {name: t.detach().float().contiguous() for name, t in learngene.tensors.items()}
    return write_checkpoint(destination, tensors, metadata, force=force, stdout=stdout)


def task_of(spec: ArchSpec) -> str:
    """What a model of `spec` does (`lgcli.arch.base.TASKS`), as its family says."""
    with torch.device("meta"):  # a skeleton: no memory, no initialisation
        model = get_adapter(spec.family).create_model(spec)
    return get_adapter(spec.family).model_task(model)


def load_model(source: str | os.PathLike | Checkpoint, heads: int | None = None,
               *, stdin: BinaryIO | None = None) -> tuple[nn.Module, ArchSpec]:
    """A timm model built from a checkpoint and loaded strictly (float32)."""
    loaded = load(source, heads=heads, stdin=stdin)
    model = get_adapter(loaded.spec.family).load_model(loaded.spec, loaded.stack)
    # How its images are prepared, for whoever feeds it (`lgcli.recipe.preprocessing_of(model)`).
    setattr(model, MODEL_ATTRIBUTE, loaded.spec.extras.get(PREPROCESSING))
    return model.float(), loaded.spec


def spec_of_model(model: nn.Module, family: str | None = None) -> tuple[ArchSpec, Stack]:
    """(spec, stack) of a live model of a family lg knows."""
    from .arch import adapter_of_model

    adapter = get_adapter(family) if family is not None else adapter_of_model(model)
    config = adapter.spec_of_model(model)
    spec, stack = adapter.to_stack(adapter.saved_state(model), config=config)
    # A model lgcli.load_model built says how its images are prepared.
    return with_preprocessing(spec, getattr(model, MODEL_ATTRIBUTE, None)), stack


def save_model(model: nn.Module, destination: str | os.PathLike, *, method: str | None = None,
               options: Mapping[str, Any] | None = None, source: Loaded | Checkpoint | None = None,
               force: bool = False, dtype: torch.dtype | None = None, family: str | None = None,
               stdout: BinaryIO | None = None) -> str:
    """Write a live timm model with lg metadata (heads, pooling, provenance)."""
    spec, stack = spec_of_model(model, family)
    return save(destination, spec, stack, method=method, options=options, source=source,
                force=force, dtype=dtype or next(model.parameters()).dtype, stdout=stdout)


def create_model(spec: ArchSpec, seed: int | None = None) -> nn.Module:
    """The family's own random initialisation of the architecture `spec` describes."""
    return get_adapter(spec.family).create_model(spec, seed=seed)


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
        "load_call": adapter.load_call(spec, shown_path),
        "load_imports": adapter.load_imports(spec, shown_path),
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
        "num_classes": spec.extras.get("num_classes"),
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
        "expand_call": f"lg grow {shown_path} --depth N -o OUT",
        "load_call": f"lgcli.load_learngene({shown_path!r})",
    }


def load_line(spec: ArchSpec, path: str | os.PathLike) -> str | None:
    """The line that loads what was written at `path` in its family's library
    (imports; model = ...), or None for a stream (its reader names the file)."""
    if str(path) == STDIO:
        return None
    adapter = get_adapter(spec.family)
    return f"{adapter.load_imports(spec, str(path))}; model = {adapter.load_call(spec, str(path))}"


def _load_path(checkpoint: Checkpoint) -> str:
    """The path a load line can name: a stream (stdin, a pipe) has none."""
    source = checkpoint.source
    if source == STDIO or not (os.path.isfile(source) or os.path.isdir(source)):
        return "<file>"
    return source


def _own_dtype(parent: Checkpoint | None, key: str) -> torch.dtype | None:
    """The floating dtype of the source's tensor of that name, if it has one."""
    tensor = parent.tensors.get(key) if parent is not None else None
    return tensor.dtype if tensor is not None and tensor.is_floating_point() else None


def _dominant_dtype(tensors: Mapping[str, torch.Tensor]) -> torch.dtype | None:
    counts: dict[torch.dtype, int] = {}
    for t in tensors.values():
        if t.is_floating_point():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=counts.get) if counts else None
