"""Pre-train the example text ancestry `examples/kjv_llama/`.

A Llama of 4 layers x 128 (4 heads of 32 sharing 2 key/value heads, SwiGLU
MLP 344, RMSNorm, RoPE, LM head tied to the token embedding; 0.86 M
parameters) with a byte-level BPE tokenizer of 1,024 tokens, trained from
transformers' random initialisation with `lgcli.train` on the King James
Bible without the Gospel of John (Debian's bible-kjv-text, 3.9 MB), written
with lg's own writer as a Hugging Face folder (config.json, model.safetensors
with lg's metadata, tokenizer.json), and scored from the stored folder on the
test split of the text embedded in lg (`--data kjv-mini`: the last 10 % of
Genesis, Mark and John, which is the end of John: text neither the tokenizer
nor the model has seen).

    sudo apt-get install bible-kjv-text
    OMP_NUM_THREADS=2 nice python examples/train_kjv_llama.py --force

Why not train on kjv-mini's own train split: its 106 k tokens are memorised
by a 0.86 M-parameter model long before it generalises (800 steps: train
loss 0.33, test loss 5.1). Grouped-query attention and a tied head make the
example exercise what Llama-family checkpoints have.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ARCHITECTURE = dict(num_hidden_layers=4, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=344, max_position_embeddings=256, tie_word_embeddings=True,
                    rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None, pad_token_id=None)
VOCAB = 1024


def train_tokenizer(text: str, folder: Path) -> None:
    """A byte-level BPE (GPT-2's scheme: any text encodes, nothing is unknown),
    trained on `text`, saved as tokenizer.json (what transformers and lg read)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(text.splitlines(), trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": ARCHITECTURE["max_position_embeddings"]},
        indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--score-on", default="kjv-mini", help="the text whose test split the model is scored on")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--checkpoint", default=os.path.join(tempfile.gettempdir(), "lg-kjv_llama.train.pt"))
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("-o", "--output", default=str(HERE / "kjv_llama"))
    args = parser.parse_args()

    import transformers

    from lgcli.arch.base import CAUSAL_LM
    from lgcli.text import FileTokenizer, bible_text, evaluate_text, load_text
    from lgcli.train import TrainConfig, train

    work = Path(tempfile.mkdtemp(prefix="lg-kjv-tokenizer-"))
    # Every book but John (kjv-mini's test split is John's last chapters).
    corpus = work / "kjv-without-john.txt"
    corpus.write_text(bible_text(("Gen1:1-Luke24:53", "Acts1:1-Rev22:21")), encoding="utf-8")
    train_tokenizer(corpus.read_text(encoding="utf-8"), work)
    tokenizer = FileTokenizer(work)
    data = load_text(corpus, tokenizer=tokenizer, task=CAUSAL_LM, seq_len=args.seq_len, seed=args.seed,
                     test_fraction=0.02)
    scored = load_text(args.score_on, tokenizer=tokenizer, task=CAUSAL_LM, seq_len=args.seq_len, seed=args.seed)

    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig(vocab_size=VOCAB, **ARCHITECTURE)
    model = transformers.LlamaForCausalLM(config)
    train_config = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup,
                               weight_decay=0.1, seed=args.seed, device=args.device,
                               checkpoint_path=args.checkpoint, checkpoint_every=250, resume=args.resume,
                               force=args.force, description="pre-training kjv_llama")
    started = time.time()
    train(model, data.train, train_config)
    minutes = (time.time() - started) / 60

    from lgcli.api import load_model, save_model

    options = {"data": "bible-kjv without John", "steps": args.steps, "batch_size": args.batch_size, "seq_len": args.seq_len,
               "lr": args.lr, "warmup": args.warmup, "seed": args.seed, "tokenizer": f"byte-level BPE {VOCAB}",
               "script": "examples/train_kjv_llama.py"}
    output = Path(args.output)
    save_model(model.cpu().eval(), output, method="pretrain", options=options, force=args.force or args.resume)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(work / file, output / file)
    shutil.rmtree(work, ignore_errors=True)
    # Score the stored folder, not the weights in memory: that folder is what users get.
    stored, _ = load_model(output)
    for what, split in ((f"{args.score_on} {scored.test_split}", scored.test),
                        (f"the held-out end of its training text", data.test)):
        scores = evaluate_text(stored, split, device=args.device)
        print(f"{output}: test loss {scores['loss']:.4f} (perplexity {scores['perplexity']:.2f}) on {what}",
              file=sys.stderr)
    print(f"trained {minutes:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
