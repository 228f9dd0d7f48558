# Two entry points on a fresh machine: `make demo` and `make test`. Each creates .venv when missing and installs
# exactly the versions of a lock (every file checked against its hash): `make demo` the package's own dependencies
# (requirements-demo-lock.txt), `make test` those and the dev, local and bench extras (requirements-lock.txt).
# The demo lock is resolved within the full lock's pins, so the two never disagree on a version.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements-lock.txt
DEMO_LOCK := requirements-demo-lock.txt
PIP_COMPILE := pip-compile --quiet --allow-unsafe --generate-hashes --strip-extras --no-emit-index-url \
	--no-emit-find-links --constraint=constraints.txt
# The full lock: pyproject.toml's ranges with the dev, local and bench extras, constraints.txt's pins.
COMPILE := $(PIP_COMPILE) --extra=dev --extra=local --extra=bench --output-file=$(LOCK) pyproject.toml
# The demo lock: the package's own dependencies, each at the full lock's version.
COMPILE_DEMO := $(PIP_COMPILE) --constraint=.lock-pins.txt --output-file=$(DEMO_LOCK) pyproject.toml
# Test workers: one per core, at most 4 (`make test WORKERS=0` runs in one process).
WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: setup setup-demo demo test bench lint lock demo-lock upgrade clean

# Installs what a lock names, nothing else: --no-deps on the package itself, whose ranges the lock satisfies.
# setuptools warns at every editable install that a folder named like the package takes precedence on imports:
# here that folder is the package itself, so that one warning is silenced.
install_locked = (test -d $(1) || $(PYTHON) -m venv $(1)) \
	&& $(1)/bin/pip install --quiet --require-hashes --no-deps -r $(2) \
	&& PYTHONWARNINGS="ignore:Editable installation:UserWarning" \
	   $(1)/bin/pip install --quiet --no-deps --no-build-isolation -e .

$(VENV)/.demo-installed: pyproject.toml $(DEMO_LOCK)
	$(call install_locked,$(VENV),$(DEMO_LOCK))
	touch $@

$(VENV)/.test-installed: pyproject.toml $(LOCK)
	$(call install_locked,$(VENV),$(LOCK))
	touch $@ $(VENV)/.demo-installed

setup-demo: $(VENV)/.demo-installed

setup: $(VENV)/.test-installed

demo: setup-demo
	$(BIN)/mhop demo

test: setup
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist worksteal

bench: setup
	$(BIN)/mhop bench --dataset ../shared/datasets/hotpotqa-100 --out results/hotpotqa-100.json --plot results/hotpotqa-100.png

lint: setup
	$(BIN)/ruff check llama_index_mhop tests examples benchmarks

# pip-tools, in an environment of its own.
.venv-lock/bin/pip-compile:
	$(PYTHON) -m venv .venv-lock && .venv-lock/bin/pip install --quiet pip-tools

# Re-resolve both locks after a change of pyproject.toml's dependencies, keeping every pin that still fits.
lock: .venv-lock/bin/pip-compile
	.venv-lock/bin/$(COMPILE)
	$(MAKE) --no-print-directory demo-lock

demo-lock: .venv-lock/bin/pip-compile
	sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' $(LOCK) > .lock-pins.txt
	.venv-lock/bin/$(COMPILE_DEMO); status=$$?; rm -f .lock-pins.txt; exit $$status

# Re-resolve every dependency to its newest release within pyproject.toml's ranges, install that into a fresh
# environment, run the whole suite there, and keep the new locks only when it passes.
upgrade: .venv-lock/bin/pip-compile
	rm -rf .venv-upgrade && $(PYTHON) -m venv .venv-upgrade
	cp $(LOCK) $(LOCK).previous && cp $(DEMO_LOCK) $(DEMO_LOCK).previous
	.venv-lock/bin/$(COMPILE) --upgrade && $(MAKE) --no-print-directory demo-lock
	$(call install_locked,.venv-upgrade,$(LOCK)) && .venv-upgrade/bin/python -m pytest -q -n $(WORKERS) \
		|| { mv $(LOCK).previous $(LOCK); mv $(DEMO_LOCK).previous $(DEMO_LOCK); \
		     echo "upgrade failed: the locks are unchanged"; exit 1; }
	rm -rf $(LOCK).previous $(DEMO_LOCK).previous .venv-upgrade
	@echo "locks upgraded: review 'git diff $(LOCK) $(DEMO_LOCK)', then run 'make test' and commit them"

clean:
	rm -rf $(VENV) .venv-upgrade .venv-lock .mhop
