# Two entry points on a fresh machine: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,local

.PHONY: setup demo test bench lint clean

$(BIN)/mhop: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch lies on these machines; an unpinned torch would pull a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
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

clean:
	rm -rf $(VENV) .mhop
