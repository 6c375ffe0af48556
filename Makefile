# `make demo` and `make test` work on a fresh machine: each creates .venv when
# absent and installs lg into it (torch/torchvision come from the local wheels).
VENV ?= .venv
PY := $(VENV)/bin/python
LG := $(VENV)/bin/lg
STAMP := $(VENV)/.lg-installed
BUILD := build

.PHONY: demo test install data clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The main job on the example shipped in the repo: shrink and grow the
# Fashion-MNIST ViT with lg, condense it into a TLEG learngene and grow two
# depths from it, then probe how fast each result learns against timm's random
# init, on the Fashion-MNIST subset shipped with lg (~8 min on CPU).
DEMO := $(BUILD)/demo
EXAMPLE := examples/fmnist_vit.safetensors
TEXT_EXAMPLE := examples/kjv_llama
demo: $(STAMP)
	mkdir -p $(DEMO)
	$(LG) inspect $(EXAMPLE)
	$(LG) shrink $(EXAMPLE) --depth 3 --width 64 --method bot -o $(DEMO)/bot-3x64.safetensors --force
	$(LG) shrink $(EXAMPLE) --depth 3 --width 64 --method select -o $(DEMO)/select-3x64.safetensors --force
	$(LG) grow $(EXAMPLE) --depth 8 --width 192 --method bot -o $(DEMO)/bot-8x192.safetensors --force
	# The recommended condense (docs/learngenes.md "How long to condense"): lg's
	# defaults, 600 steps of 64 started from the example's own weights, TLEG
	# trained at depths 2 to 12.
	OMP_NUM_THREADS=2 $(LG) condense $(EXAMPLE) --method tleg --data fashion-mnist-mini \
	  -o $(DEMO)/tleg.lg.safetensors --force
	$(LG) inspect $(DEMO)/tleg.lg.safetensors
	$(LG) grow $(DEMO)/tleg.lg.safetensors --depth 3 -o $(DEMO)/tleg-3.safetensors --force
	$(LG) grow $(DEMO)/tleg.lg.safetensors --depth 9 -o $(DEMO)/tleg-9.safetensors --force
	$(LG) shrink $(EXAMPLE) --depth 3 --method bot -o $(DEMO)/bot-3x128.safetensors --force
	$(LG) shrink $(EXAMPLE) --depth 3 --method select -o $(DEMO)/select-3x128.safetensors --force
	OMP_NUM_THREADS=1 $(LG) eval $(DEMO)/tleg-3.safetensors $(DEMO)/bot-3x128.safetensors \
	  $(DEMO)/select-3x128.safetensors $(DEMO)/tleg-9.safetensors --steps 200 --eval-every 50 \
	  --test-subset 500 --baseline random --plot $(DEMO)/curves.png --force
	# Text: the example Llama (a Hugging Face folder) shrunk with BoT and with
	# weight selection, probed on the King James text embedded in lg against
	# transformers' random init of the same config.
	$(LG) inspect $(TEXT_EXAMPLE)
	$(LG) shrink $(TEXT_EXAMPLE) --depth 2 --width 64 --method bot -o $(DEMO)/kjv-bot-2x64 --force
	$(LG) shrink $(TEXT_EXAMPLE) --depth 2 --width 64 --method select -o $(DEMO)/kjv-select-2x64 --force
	OMP_NUM_THREADS=2 $(LG) eval $(DEMO)/kjv-bot-2x64 $(DEMO)/kjv-select-2x64 --data kjv-mini --steps 100 \
	  --eval-every 25 --batch-size 32 --baseline random --plot $(DEMO)/kjv-curves.png --force

# The full Fashion-MNIST (Debian's dataset-fashion-mnist) for the tests that
# check the example model on the official test set. Best effort: without root
# or apt those tests are skipped, and say why.
FMNIST := /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz
data:
	@test -f $(FMNIST) || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; }; }; } || \
	  echo "note: dataset-fashion-mnist not installed (apt-get install dataset-fashion-mnist); its tests will be skipped"

test: $(STAMP) data
	$(PY) -m pytest -q --durations=30

clean:
	rm -rf $(BUILD) .pytest_cache
