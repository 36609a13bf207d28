"""Encode throughput: the full indexing pipeline against a bare model loop, side by side.

    python benchmarks/encode_throughput.py [--dataset ../shared/datasets/msmarco-sample] [-n 2000]

Both encode the same first N passages with the same model and mini-batch size, length-sorted.
The bare loop is tokenize + forward in this process (model loaded before the clock starts).
The pipeline is ``mvr index`` end to end on the local Ray cluster (started before the clock):
validation scan, tokenize, encode actor (model load included), compression into every
representation, Parquet shards, rejects, DuckDB catalog and manifest. The two run alternately
for --rounds pairs (this machine's speed drifts); prints passages/s of each and the ratios.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--dataset", default=str(root.parent / "shared" / "datasets" / "msmarco-sample"))
    p.add_argument("-n", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2, help="bare/pipeline pairs, run alternately")
    args = p.parse_args()

    from operators.encoder import set_threads
    from pipeline.config import IndexConfig
    from pipeline.indexing import index_corpus
    from pipeline.ray_runtime import init_ray
    from storage.manifest import load_manifest

    with open(Path(args.dataset) / "corpus.jsonl") as f:
        docs = [json.loads(line) for _, line in zip(range(args.n), f)]
    config = IndexConfig.from_yaml(None, **{"runtime.encode_batch_size": args.batch_size})

    threads = set_threads(None)
    init_ray()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
        for r in range(args.rounds):  # alternate, so drifting machine load hits both alike
            bare_s, n_passages, n_tokens = bare_loop(config, docs, args.batch_size)
            index = str(Path(tmp) / f"index-{r}")
            t0 = time.perf_counter()
            result = index_corpus(str(corpus), index, config, log=lambda _: None)
            pipe_s = time.perf_counter() - t0
            assert load_manifest(index).counts["passages"] == result.manifest.counts["passages"] == n_passages
            rows.append((bare_s, pipe_s))

    print(f"passages: {n_passages}  token vectors: {n_tokens}  batch size: {args.batch_size}  torch threads (bare): {threads}")
    print(f"{'round':<7}{'bare loop s':>12}{'bare p/s':>10}{'mvr index s':>13}{'mvr p/s':>10}{'ratio':>8}")
    for r, (b, p_) in enumerate(rows):
        print(f"{r + 1:<7}{b:>12.1f}{n_passages / b:>10.1f}{p_:>13.1f}{n_passages / p_:>10.1f}{b / p_:>8.2f}")
    bare_total, pipe_total = sum(b for b, _ in rows), sum(p_ for _, p_ in rows)
    print(f"ratio pipeline / bare loop (all rounds): {bare_total / pipe_total:.2f}")


def bare_loop(config, docs: list[dict], batch_size: int) -> tuple[float, int, int]:
    """Tokenize + encode ``docs`` in this process, length-sorted. Returns (seconds, passages,
    token vectors); the model is loaded before the clock starts."""
    from operators.encoder import TokenEncoder
    from operators.tokenizer import PassageTokenizer

    encoder = TokenEncoder(config.model.name)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    t0 = time.perf_counter()
    passages = tokenizer.split([d["_id"] for d in docs], [d.get("title", "") for d in docs], [d["text"] for d in docs])
    vectors = encoder.encode([p.input_ids for p in passages], batch_size=batch_size, pad_id=tokenizer.pad_id)
    return time.perf_counter() - t0, len(passages), sum(len(v) for v in vectors)


if __name__ == "__main__":
    main()
