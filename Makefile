# Two entry points on a fresh machine: `make demo` and `make test`. Each creates .venv when missing and installs
# exactly the versions in the lock (requirements-lock.txt, every file checked against its hash).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements-lock.txt
# How the lock is resolved: pyproject.toml's ranges with the dev and local extras, constraints.txt's pins.
COMPILE := pip-compile --quiet --allow-unsafe --generate-hashes --strip-extras --no-emit-index-url \
	--no-emit-find-links --extra=dev --extra=local --constraint=constraints.txt --output-file=$(LOCK) pyproject.toml

.PHONY: setup demo test bench lint upgrade clean

# Installs what the lock names, nothing else: --no-deps on the package itself, whose ranges the lock satisfies.
install_locked = (test -d $(1) || $(PYTHON) -m venv $(1)) \
	&& $(1)/bin/pip install --quiet --require-hashes --no-deps -r $(LOCK) \
	&& $(1)/bin/pip install --quiet --no-deps --no-build-isolation -e .

$(BIN)/mhop: pyproject.toml $(LOCK)
	$(call install_locked,$(VENV))
	touch $(BIN)/mhop

setup: $(BIN)/mhop

demo: setup
	$(BIN)/mhop demo

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/mhop bench --dataset ../shared/datasets/hotpotqa-100 --out results/hotpotqa-100.json --plot results/hotpotqa-100.png

lint: setup
	$(BIN)/ruff check llama_index_mhop tests examples benchmarks

# Re-resolve every dependency to its newest release within pyproject.toml's ranges, install that into a fresh
# environment, run the whole suite there, and keep the new lock only when it passes.
upgrade:
	rm -rf .venv-upgrade && $(PYTHON) -m venv .venv-upgrade
	.venv-upgrade/bin/pip install --quiet pip-tools
	cp $(LOCK) $(LOCK).previous
	.venv-upgrade/bin/$(COMPILE) --upgrade
	$(call install_locked,.venv-upgrade) && .venv-upgrade/bin/python -m pytest -q \
		|| { mv $(LOCK).previous $(LOCK); echo "upgrade failed: the lock is unchanged"; exit 1; }
	rm -rf $(LOCK).previous .venv-upgrade
	@echo "lock upgraded: review 'git diff $(LOCK)', then run 'make test' and commit it"

clean:
	rm -rf $(VENV) .venv-upgrade .mhop
