# `make demo` and `make test` work on a fresh machine: each creates .venv when
# absent and installs lg into it (torch/torchvision come from the local wheels).
VENV ?= .venv
PY := $(VENV)/bin/python
LG := $(VENV)/bin/lg
STAMP := $(VENV)/.lg-installed
BUILD := build

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p $(BUILD)
	$(PY) -c "import timm, lgcli; lgcli.save_model(timm.create_model('vit_base_patch16_224', depth=6, embed_dim=192, num_heads=3, patch_size=4, img_size=28, in_chans=1, num_classes=10), '$(BUILD)/demo-vit.safetensors', method='timm-random-init', force=True)"
	$(LG) inspect $(BUILD)/demo-vit.safetensors

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(BUILD) .pytest_cache
