"""Encode throughput: the full indexing pipeline against a bare model loop, side by side.

    python benchmarks/encode_throughput.py [--dataset ../shared/datasets/msmarco-sample] [-n 2000]

Both encode the same first N passages with the same model and mini-batch size, length-sorted.
The bare loop is a fresh Python process: import, load the model, tokenize, encode. Its *warm*
time is tokenize + encode only; its *cold* time is the whole process (imports and model load
included, as the pipeline's encode actor must do them too). The pipeline is ``mvr index`` end
to end on the local Ray cluster (started before the clock):
validation scan, tokenize, encode actor (model load included), compression into every
representation, Parquet shards, rejects, DuckDB catalog and manifest. The two run alternately
for --rounds pairs, and each run's CPU steal (time the hypervisor gave other guests) is shown,
since on a shared 2-core VM it moves every figure by tens of percent.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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

    from mvr.operators.encode.encoder import set_threads
    from mvr.pipeline.config import IndexConfig
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.ray_runtime import init_ray
    from mvr.storage.manifest import load_manifest

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
            steal = Steal()
            cold_s, warm_s, n_passages = bare_loop_process(corpus, args.batch_size)
            bare_steal = steal.percent()
            index = str(Path(tmp) / f"index-{r}")
            steal = Steal()
            t0 = time.perf_counter()
            result = index_corpus(str(corpus), index, config, log=lambda _: None)
            pipe_s = time.perf_counter() - t0
            assert load_manifest(index).counts["passages"] == result.manifest.counts["passages"] == n_passages
            rows.append((warm_s, cold_s, bare_steal, pipe_s, steal.percent()))

    print(f"passages: {n_passages}  batch size: {args.batch_size}  torch threads: {threads}")
    print(f"{'round':<6}{'bare warm s':>12}{'bare cold s':>12}{'steal %':>8}{'mvr index s':>12}{'steal %':>8}{'ratio warm':>11}{'ratio cold':>11}")
    for r, (w, c, bs, p_, ps) in enumerate(rows):
        print(f"{r + 1:<6}{w:>12.1f}{c:>12.1f}{bs:>8.0f}{p_:>12.1f}{ps:>8.0f}{w / p_:>11.2f}{c / p_:>11.2f}")
    warm, cold, pipe = (sum(x[i] for x in rows) for i in (0, 1, 3))
    print(
        f"passages/s: bare warm {n_passages * len(rows) / warm:.1f}, bare cold {n_passages * len(rows) / cold:.1f}, "
        f"mvr index {n_passages * len(rows) / pipe:.1f}"
    )
    print(f"ratio pipeline / bare loop, all rounds: {warm / pipe:.2f} against the warm loop, {cold / pipe:.2f} against the cold one")


class Steal:
    """Share of CPU time the hypervisor gave to other guests since construction (/proc/stat)."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> list[int]:
        try:
            with open("/proc/stat") as f:
                return [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return []

    def percent(self) -> float:
        end = self._read()
        if not end or not self.start:
            return float("nan")
        delta = [b - a for a, b in zip(self.start, end)]
        return 100.0 * delta[7] / max(sum(delta), 1)


def bare_loop_process(corpus: Path, batch_size: int) -> tuple[float, float, int]:
    """Run ``bare_loop`` in a fresh Python process. Returns (cold seconds: process start to
    end, imports and model load included; warm seconds: tokenize + encode only; passages)."""
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import encode_throughput as e; e.bare_loop_main({str(corpus)!r}, {batch_size})"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    cold = time.perf_counter() - t0
    warm, n = out.strip().splitlines()[-1].split()
    return cold, float(warm), int(n)


def bare_loop_main(corpus: str, batch_size: int) -> None:
    """The bare loop: same model and settings as ``mvr index``, all cores, length-sorted
    mini-batches; prints its tokenize + encode seconds and passage count."""
    from mvr.operators.encode.encoder import TokenEncoder, set_threads
    from mvr.operators.encode.tokenizer import PassageTokenizer
    from mvr.pipeline.config import IndexConfig

    config = IndexConfig()
    set_threads(None)
    with open(corpus) as f:
        docs = [json.loads(line) for line in f]
    encoder = TokenEncoder(config.model.name)
    tokenizer = PassageTokenizer(encoder.tokenizer, **config.tokenizer.model_dump())
    t0 = time.perf_counter()
    passages = tokenizer.split([d["_id"] for d in docs], [d.get("title", "") for d in docs], [d["text"] for d in docs])
    encoder.encode([p.input_ids for p in passages], batch_size=batch_size, pad_id=tokenizer.pad_id)
    print(f"{time.perf_counter() - t0:.3f} {len(passages)}")


if __name__ == "__main__":
    main()
