"""Reading and writing checkpoints: safetensors files, stdin/stdout ('-'),
sharded folders, and legacy PyTorch pickles (tensors only).

Writes are atomic (a temporary file in the destination folder, then a
rename), an existing output is refused without ``force``, and an input is
never opened for writing.

The modules, each importing only those listed before it:

- ``names``        '-' and the file names of a Hugging Face model folder
- ``memory``       available memory, refusing what does not fit
- ``hashing``      SHA-256 in one background thread
- ``atomic``       temporary file or folder, renamed into place; signals deferred meanwhile
- ``metadata``     lg's ``__metadata__`` keys and provenance
- ``companions``   tokenizer and config files beside the weights
- ``destination``  where an output may go
- ``loaded``       the `Checkpoint` and the safetensors dtype names
- ``pickles``      legacy PyTorch pickles, with ``weights_only``
- ``reading``      files, streams, model folders, shards
- ``writing``      streamed, sharded, verified safetensors writes

This package re-exports what the rest of lg imports from it.
"""

from .atomic import atomic_path, committed_outputs, raise_or_defer
from .companions import COMPANION_KEY, companion_bytes, companion_metadata, companion_size, folder_companions
from .destination import check_form, check_output
from .loaded import Checkpoint
from .memory import available_memory, check_memory, release_freed_memory
from .metadata import decode_lg_metadata, encode_lg_metadata, provenance_chain, provenance_metadata
from .names import SAFETENSORS_INDEX, STDIO
from .pickles import unwrap_state_dict
from .reading import check_source, read_bytes, read_checkpoint
from .writing import write_checkpoint, write_tensors

__all__ = ["Checkpoint", "check_source", "read_checkpoint", "write_checkpoint", "check_output", "check_form",
           "provenance_metadata", "provenance_chain", "decode_lg_metadata", "encode_lg_metadata",
           "unwrap_state_dict", "read_bytes", "STDIO"]
