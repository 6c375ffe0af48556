"""lg's metadata and provenance.

Every file lg writes carries its own description in the safetensors
``__metadata__`` (a string -> string map): ``format: pt`` (what timm and
transformers expect) plus lg's keys, all prefixed ``lg.``:

- ``lg.kind``     ``model`` or ``learngene``
- ``lg.family``   architecture family (``vit``)
- ``lg.config``   JSON: the family's constructor arguments (timm ``model_args``)
- ``lg.method``   the method that produced the file, ``lg.options`` its options (JSON)
- ``lg.source_sha256`` and ``lg.source`` (JSON of the source's own lg metadata,
  which nests its source in turn: provenance chains through pipes)
- ``lg.learngene`` (learngenes only, JSON): the kind's own sizes, and what
  condensing recorded (steps, seconds, the auxiliary model's test accuracy)
- ``lg.preprocessing`` (image models and learngenes, JSON): how the model's
  images are prepared (mean, std, interpolation, crop_pct, crop_mode:
  `lgcli.preprocessing`), what lg fed it
- ``lg.version``

and, in a single file made from a text model (a pipe, a learngene), the
source's tokenizer and other companion files, ``companion:NAME`` (UTF-8
text) or ``companion-base64:NAME`` (see `companions`), outside ``lg.*`` so
that no provenance step nests them.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Mapping

from .. import __version__
from ..errors import LgError, shown
from ..header import load_json
from .names import STDIO, _display_name

if TYPE_CHECKING:  # only for an annotation: `loaded` imports this module
    from .loaded import Checkpoint

LG_PREFIX = "lg."
JSON_KEYS = ("config", "options", "source", "learngene", "preprocessing")


# lg's metadata fields and what each must be (after JSON decoding).
LG_FIELD_TYPES: dict[str, type] = {"kind": str, "family": str, "method": str, "source_sha256": str,
                                   "version": str, "config": dict, "options": dict, "source": dict,
                                   "learngene": dict, "preprocessing": dict}
LG_KINDS = ("model", "learngene")
# Provenance steps kept in a file: a longer chain keeps its newest steps and
# marks the cut (`truncated`), so every file lg writes reads back.
MAX_PROVENANCE = 32
# JSON levels a metadata value may nest: a provenance step holds options
# and configs a few levels deep.
MAX_METADATA_DEPTH = 8 * MAX_PROVENANCE


def decode_lg_metadata(metadata: Mapping[str, str], name: str = STDIO) -> dict[str, Any]:
    """lg's ``lg.*`` keys, JSON values decoded, every field's type checked.

    Unknown ``lg.*`` keys are kept as strings (a newer lg may add some); a
    field of the wrong type, a kind lg does not know, or a provenance chain
    deeper than MAX_PROVENANCE is refused naming the key."""
    label = _display_name(name) if name == STDIO else name
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not key.startswith(LG_PREFIX):
            continue
        field_name = key[len(LG_PREFIX):]
        if field_name in JSON_KEYS:
            value = load_json(value, f"{shown(label)}: refused: metadata {shown(key)} (its value",
                              max_depth=MAX_METADATA_DEPTH)
        expected = LG_FIELD_TYPES.get(field_name)
        if expected is not None and not isinstance(value, expected):
            raise LgError(f"{shown(label)}: refused: metadata {shown(key)} must be "
                          f"{'a JSON object' if expected is dict else 'a string'}, "
                          f"found {_json_type(value)}")
        out[field_name] = value
    if "kind" in out and out["kind"] not in LG_KINDS:
        raise LgError(f"{shown(label)}: refused: metadata lg.kind is {shown(out['kind'])}, "
                      f"expected {' or '.join(LG_KINDS)}")
    sha = out.get("source_sha256")
    if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise LgError(f"{shown(label)}: refused: metadata lg.source_sha256 is not a SHA-256 hex digest")
    if len(provenance_chain(out)) > MAX_PROVENANCE + 1:
        raise LgError(f"{shown(label)}: refused: metadata lg.source chains more than {MAX_PROVENANCE} "
                      f"steps (lg writes at most {MAX_PROVENANCE})")
    _check_provenance(out.get("source"), label)
    return out


# The fields of a provenance step (lg.source, and each step's own source),
# and what each must be: a file name that is an object was carried into
# every output and shown as such.
PROVENANCE_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "file": str, "kind": str, "method": str, "options": dict, "source_sha256": str, "version": str,
    "truncated": bool, "source": dict, "family": str, "config": dict, "learngene": dict}


def _check_provenance(step: Any, label: str) -> None:
    depth = 1
    while step is not None:
        if not isinstance(step, Mapping):
            raise LgError(f"{shown(label)}: refused: metadata lg.source (step {depth}) must be a JSON object, "
                          f"found {_json_type(step)}")
        for field_name, expected in PROVENANCE_FIELD_TYPES.items():
            value = step.get(field_name)
            if value is not None and not isinstance(value, expected):
                raise LgError(f"{shown(label)}: refused: metadata lg.source (step {depth}) field "
                              f"{shown(field_name)} must be {'a JSON object' if expected is dict else 'a string' if expected is str else 'true or false'}, "
                              f"found {_json_type(value)}")
        step, depth = step.get("source"), depth + 1


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def encode_lg_metadata(lg: Mapping[str, Any]) -> dict[str, str]:
    out = {"format": "pt"}
    for name, value in lg.items():
        if value is None:
            continue
        # allow_nan=False: as strict as the reader, which refuses Infinity and NaN (not JSON), so no file lg
        # writes is one it then refuses.
        out[LG_PREFIX + name] = (json.dumps(value, sort_keys=True, allow_nan=False) if name in JSON_KEYS
                                 else str(value))
    return out


def provenance_metadata(*, kind: str, family: str, config: Mapping[str, Any],
                        method: str | None = None, options: Mapping[str, Any] | None = None,
                        source: Checkpoint | None = None,
                        learngene: Mapping[str, Any] | None = None,
                        source_sha256: str | None = None,
                        preprocessing: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The ``__metadata__`` of a file lg writes, chained to its source.
    `source_sha256` stands in for the source's hash (a placeholder of the
    same length, while the hash is still being computed)."""
    lg: dict[str, Any] = {"kind": kind, "family": family, "config": dict(config),
                          "method": method, "options": dict(options) if options else None,
                          "learngene": dict(learngene) if learngene else None,
                          "preprocessing": dict(preprocessing) if preprocessing else None, "version": __version__}
    if source is not None:
        lg["source_sha256"] = source.sha256 if source_sha256 is None else source_sha256
        parent = _trimmed(source.lg, MAX_PROVENANCE - 1)
        # A foreign source (no lg metadata) is still recorded by hash and name.
        lg["source"] = parent if parent else {"file": _display_name(source.source)}
        if parent:
            lg["source"].setdefault("file", _display_name(source.source))
    return encode_lg_metadata(lg)


def _trimmed(lg: Mapping[str, Any], keep: int) -> dict[str, Any]:
    """A copy of a provenance chain with at most `keep` steps; a cut chain's
    last kept step says ``truncated: true``."""
    top = dict(lg)
    node = top
    for _ in range(keep - 1):
        parent = node.get("source")
        if not isinstance(parent, Mapping):
            return top
        node["source"] = dict(parent)
        node = node["source"]
    if isinstance(node.get("source"), Mapping):
        del node["source"]
        node["truncated"] = True
    return top


def provenance_chain(lg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Steps from this file back to its first recorded ancestor."""
    steps = []
    node: Mapping[str, Any] | None = lg
    while node:
        steps.append({k: node.get(k) for k in ("file", "kind", "method", "options",
                                                "source_sha256", "version", "truncated")
                      if node.get(k) is not None})
        node = node.get("source") if isinstance(node.get("source"), Mapping) else None
    return steps
