"""Every Python block of README.md runs as pasted, in order, in a fresh process with a fresh working folder.

The test fills in only what a block leaves to the reader: ``my_llm`` (LlamaIndex's ``MockLLM``) and the
``./my_corpus/`` folder the blocks index (the Leland corpus as text files).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.leland_corpus import PASSAGES

pytestmark = pytest.mark.slow  # each block runs in a child process

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)
PLACEHOLDERS = {"my_llm": "from llama_index.core.llms import MockLLM\nmy_llm = MockLLM(max_tokens=8)\n"}


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


def test_every_python_block_of_the_readme_runs_as_pasted(tmp_path):
    corpus = tmp_path / "my_corpus"
    corpus.mkdir()
    for title, text in PASSAGES:
        (corpus / f"{title}.txt").write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)  # nothing may reach for LlamaIndex's OpenAI defaults
    for number, block in enumerate(BLOCKS, start=1):
        prelude = "".join(code for name, code in PLACEHOLDERS.items() if re.search(rf"\b{name}\b", block))
        done = subprocess.run([sys.executable, "-c", prelude + block], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"README block {number} failed:\n{block}\n{done.stderr[-3000:]}"
        if ".retrieve(" in block or "source_nodes" in block:  # a block that prints what it found found the corpus
            assert any(title in done.stdout for title, _ in PASSAGES), done.stdout[-2000:]
