"""mvr against fast-plaid (the PLAID engine PyLate uses) on the same vectors, side by side.

    python benchmarks/vs_plaid.py [--corpus msmarco|combined|both] [--queries N] [--rounds 3]
        [--workdir /tmp/mvr-bench] [--threads T] [--limit N] [--json OUT]
    python benchmarks/vs_plaid.py --from-json OUT      # the tables again
    python benchmarks/peers/plaid_venv.py              # only build fast-plaid's venv (first run does it)

Corpora: msmarco-sample (5,000 passages; its judged queries) and msmarco-sample +
dbpedia-sample indexed together (10,016 passages; both collections' judged queries, dbpedia
query and document ids prefixed ``dbpedia:``). Each is indexed with ``mvr index`` defaults
(reused when the workdir holds it; ``--limit N`` indexes the first N input rows only, for smoke
tests) and token-vector ANN partitions are built with ``mvr build-ann`` defaults for
faiss-ivfpq (mvr's default ANN path), scann and codec-ivf (P = 1, no BM25, timed).

The same vectors on both sides: mvr's exact partition is decoded (the default codec
``pca-64+residual-2`` gives 64-dim unit vectors: what mvr's rescoring scores) and exported
with the queries as mvr encodes them (``Searcher.encode``: model, then the codec's
projection). fast-plaid indexes exactly those passage vectors and searches exactly those
query vectors, in its own venv (``benchmarks/peers/plaid_venv.py``: fast-plaid pins its own
torch) in a subprocess (``benchmarks/peers/fast_plaid_side.py``) on the CPU, with the same
thread count as mvr (torch, OpenMP and rayon pools). Its settings (``PLAID_SETTINGS``): its
defaults and three others (fewer IVF probes and full scores; 2-bit residuals, mvr's size).

Timing: encoding is excluded on both sides (queries are encoded once). Each round times every
query on every searcher, the searchers in rotating order, mvr's in process around
``Searcher.search_encoded`` and fast-plaid's in its process around ``FastPlaid.search`` (one
query a call, no progress bar), so drifting machine load hits all alike; a query's latency is
its median over the rounds. k = 10; fast-plaid ranks passages, so it is asked for 10 + (passages
− documents) and its passages are aggregated to documents as mvr does (a document scores as
its best passage). A second, untimed pass at k = 100 gives R@100.

Columns: ``p50 ms`` / ``p95 ms``: percentiles over queries of the per-query search latency;
``overlap@10``: mean share of the exact-MaxSim top-10 (mvr exact, same vectors) in the
searcher's top-10; ``nDCG@10`` (the k = 10 run) and ``R@100`` (the k = 100 run): ir-measures
against the qrels (``pipeline.retrieval.evaluation.quality``); ``build s``: mvr: ``build_ann`` wall time
(the codec was trained and the codes written by ``mvr index``, not counted); fast-plaid:
``FastPlaid.create`` (k-means, compression, IVF) over the exported vectors; ``B/vec``: bytes
on disk a token vector: mvr: the codes (shards' token column) + the ANN partition's index
files (``pipeline.indexing.index_info.vector_bytes``); fast-plaid: its index directory. The last lines
compare fast-plaid's fastest setting with overlap@10 ≥ 0.95 to mvr's default ANN path (the
issue's target: mvr ≥ 3× faster at p50, no worse in nDCG@10 or R@100). CPU steal over the
timed rounds is printed: on a shared VM it moves every figure. Method and notes: docs/vs_plaid.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal
from peers.plaid_venv import ensure_venv, peer_env
from search_latency import combined_corpus

K = 10
K_RECALL = 100
OVERLAP_TARGET = 0.95
SPEED_TARGET = 3.0
MVR_BACKENDS = ("faiss-ivfpq", "scann", "codec-ivf")  # the first is mvr's default ANN path
# fast-plaid settings: create() and search() keywords; {} is fast-plaid's own default (in
# 1.7.0: nbits 4, kmeans_niters 4; n_ivf_probe 8, n_full_scores 4096). Settings with the same
# create() keywords share one index.
PLAID_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {"create": {}, "search": {}},
    "probe4-full1024": {"create": {}, "search": {"n_ivf_probe": 4, "n_full_scores": 1024}},
    "probe2-full256": {"create": {}, "search": {"n_ivf_probe": 2, "n_full_scores": 256}},
    "nbits2": {"create": {"nbits": 2}, "search": {}},
}
PEER_SCRIPT = Path(__file__).resolve().parent / "peers" / "fast_plaid_side.py"


@dataclass
class Corpus:
    """One benchmark corpus: where its text is, where its index goes, its judged queries."""

    label: str
    corpus: str
    index: Path
    collection: Any  # storage.beir.TestCollection, judged queries only


def first_judged(collection: Any, n: Optional[int], prefix: str = "") -> tuple[dict[str, str], list[Any]]:
    """The first ``n`` judged queries of a collection and their judgments, ids prefixed."""
    from mvr.storage.beir import Judgment

    queries = dict(list(collection.judged_queries.items())[:n])
    qrels = [Judgment(prefix + j.query_id, prefix + j.doc_id, j.relevance) for j in collection.qrels if j.query_id in queries]
    return {prefix + q: t for q, t in queries.items()}, qrels


def corpora(which: str, datasets: Path, work: Path, n_queries: Optional[int], limit: Optional[int]) -> list[Corpus]:
    from mvr.storage.beir import TestCollection, read_collection

    suffix = f"-limit{limit}" if limit else ""
    note = f" (first {limit} rows)" if limit else ""
    ms = read_collection(str(datasets / "msmarco-sample"))
    out = []
    if which in ("msmarco", "both"):
        q, j = first_judged(ms, n_queries)
        out.append(Corpus(f"msmarco 5k{note}", str(datasets / "msmarco-sample"), work / f"msmarco{suffix}", TestCollection("msmarco-sample", q, j)))
    if which in ("combined", "both"):
        combined_corpus(datasets, work / "combined" / "corpus.jsonl")
        q1, j1 = first_judged(ms, n_queries)
        q2, j2 = first_judged(read_collection(str(datasets / "dbpedia-sample")), n_queries, "dbpedia:")
        collection = TestCollection("msmarco-sample+dbpedia-sample", q1 | q2, j1 + j2)
        out.append(Corpus(f"msmarco+dbpedia 10k{note}", str(work / "combined" / "corpus.jsonl"), work / f"msmarco-dbpedia{suffix}", collection))
    return out


def maxsim_all(docs: np.ndarray, offsets: np.ndarray, query: np.ndarray) -> np.ndarray:
    """(passages,) MaxSim of ``query`` against every passage of the packed ``docs``."""
    sims = docs @ query.T
    nonempty = offsets[1:] > offsets[:-1]
    out = np.full(len(offsets) - 1, -np.inf, dtype=np.float32)
    out[nonempty] = np.maximum.reduceat(sims, offsets[:-1][nonempty], axis=0).sum(axis=1)
    return out


def export(work: Path, passages: Any, encoded: list[Any], exact_best: float) -> None:
    """The exact partition's decoded token vectors and the encoded queries' vectors, as
    float32 arrays + offsets (what ``peers/fast_plaid_side.py`` reads). Checked: MaxSim of
    the first query over the exported vectors has the best score mvr's exact search gave it
    (``exact_best``), so both sides score the same vectors."""
    work.mkdir(parents=True, exist_ok=True)
    docs = np.concatenate(list(passages.vectors.vector_blocks())).astype(np.float32, copy=False)
    offsets = passages.vectors.offsets.astype(np.int64)
    best = float(maxsim_all(docs, offsets, encoded[0].tokens).max())
    if abs(best - exact_best) > 1e-3 * max(1.0, abs(exact_best)):
        raise RuntimeError(f"exported vectors score {best:.5f} for the first query's best passage, mvr's exact search {exact_best:.5f}")
    np.save(work / "docs.npy", docs)
    np.save(work / "doc_offsets.npy", offsets)
    lengths = [len(e.tokens) for e in encoded]
    np.save(work / "queries.npy", np.concatenate([e.tokens for e in encoded]).astype(np.float32, copy=False))
    np.save(work / "query_offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


class PlaidPeer:
    """fast-plaid in its venv's python, answering one JSON line per command (see
    ``peers/fast_plaid_side.py``); its stderr goes to ``log``."""

    def __init__(self, python: Path, work: Path, threads: int, settings: dict[str, Any], log: Path) -> None:
        self.log_path = log
        self.log = open(log, "w")
        cmd = [str(python), str(PEER_SCRIPT), str(work), str(threads), json.dumps(settings)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=peer_env(threads), cwd=work)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.log.flush()
            tail = self.log_path.read_text()[-3000:]
            raise RuntimeError(f"fast-plaid side exited with status {self.proc.returncode}:\n{tail}")
        return json.loads(line)

    def query(self, i: int, top_k: int, rotate: int = 0) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps({"op": "time", "query": i, "top_k": top_k, "rotate": rotate}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def plaid_result(text: str, hits: list[list[float]], doc_ids: list[str], passage_idx: np.ndarray, k: int) -> Any:
    """fast-plaid's ranked passages as an mvr SearchResult of documents (best passage each)."""
    from mvr.operators.retrieval.ranking import top_documents
    from mvr.pipeline.retrieval.plan import SearchResult

    rows = np.array([int(p) for p, _ in hits], dtype=np.int64)
    scores = np.array([s for _, s in hits], dtype=np.float32)
    ranked = top_documents(scores, [doc_ids[r] for r in rows], passage_idx[rows], k)
    return SearchResult(text, "maxsim", ranked, "fast-plaid", len(rows), 1, 1)


def summary(ms: np.ndarray) -> dict[str, float]:
    """p50 / p95 over queries of (rounds, queries) latencies, each query's median over rounds."""
    per_query = np.median(ms, axis=0)
    return {"p50_ms": float(np.percentile(per_query, 50)), "p95_ms": float(np.percentile(per_query, 95))}


def mvr_searchers(spec: Corpus, args: argparse.Namespace, encoder: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The index (built unless the workdir holds it), its exact searcher and one ANN searcher
    a backend (partitions built now, timed): the searchers and their table rows."""
    from mvr.pipeline.config import AnnBuildConfig, IndexConfig, SearchConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.indexing.index_info import vector_bytes
    from mvr.pipeline.retrieval.searcher import Searcher
    from mvr.storage.manifest import load_manifest, read_manifest

    index = str(spec.index)
    if read_manifest(index) is None:
        print(f"{spec.label}: indexing with mvr index defaults ...", flush=True)
        index_corpus(spec.corpus, index, IndexConfig(limit=args.limit), log=lambda _: None)
    exact = Searcher(index, ("maxsim",), SearchConfig(exact=True), encoder)
    searchers: dict[str, Any] = {"exact": exact}
    rows: dict[str, dict[str, Any]] = {"exact": {"searcher": "mvr", "setting": "exact MaxSim (brute force)", "build_s": None}}
    for backend in MVR_BACKENDS:
        print(f"{spec.label}: mvr build-ann --backend {backend} ...", flush=True)
        t0 = time.perf_counter()
        config = AnnBuildConfig(backend=backend, partitions=args.partitions, vectors=["tokens"], bm25=None)
        build_ann(index, config, log=lambda _: None, force=True)
        build_s = time.perf_counter() - t0
        # loaded now: the next build replaces this one in the manifest (its codes stay in the shards)
        searchers[backend] = Searcher(index, ("maxsim",), SearchConfig(), exact.query_encoder.encoder)
        tokens = vector_bytes(index, load_manifest(index))["kinds"]["tokens"]
        rows["exact"]["bytes_per_vector"] = tokens["codes_per_vector"]
        default = " (default)" if backend == MVR_BACKENDS[0] else ""
        rows[backend] = {
            "searcher": "mvr",
            "setting": f"{backend}{default}, P = {args.partitions}",
            "build_s": build_s,
            "bytes_per_vector": tokens["total_per_vector"],
        }
    return searchers, rows


def plaid_rows(ready: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Table rows of fast-plaid's settings, their parameters resolved against its defaults."""
    rows = {}
    for name, setting in PLAID_SETTINGS.items():
        build = ready["builds"][ready["settings"][name]]
        params = {**ready["defaults"]["create"], **build["create"], **ready["defaults"]["search"], **setting["search"]}
        params = {p: params[p] for p in ("nbits", "kmeans_niters", "n_ivf_probe", "n_full_scores")}
        label = f"{name} (nbits {params['nbits']}, probe {params['n_ivf_probe']}, full {params['n_full_scores']})"
        rows[f"plaid:{name}"] = {
            "searcher": "fast-plaid",
            "setting": label,
            "params": params,
            "build_s": build["seconds"],
            "bytes_per_vector": build["bytes_per_vector"],
        }
    return rows


@dataclass
class Run:
    """What the searchers answered: latencies (rounds, queries) ms and results by query id."""

    times: dict[str, np.ndarray]
    top10: dict[str, dict[str, Any]]
    top100: dict[str, dict[str, Any]]


def measure(searchers: dict[str, Any], peer: PlaidPeer, query_ids: list[str], encoded: list[Any], passages: Any, rounds: int) -> Run:
    """The timed rounds at k = 10 (searchers in rotating order, fast-plaid's settings one entry
    of the rotation), then an untimed pass at k = 100."""
    doc_ids = passages.doc_ids
    extra = len(doc_ids) - len(set(doc_ids))  # passages beyond one a document: k + extra passages hold k documents
    plaid = [f"plaid:{name}" for name in PLAID_SETTINGS]
    run = Run({n: np.zeros((rounds, len(encoded))) for n in [*searchers, *plaid]}, {n: {} for n in [*searchers, *plaid]}, {n: {} for n in [*searchers, *plaid]})
    names = [*searchers, "fast-plaid"]
    for s in searchers.values():  # warm-up (fast-plaid's side warmed itself up)
        s.search_encoded(encoded[0], K, "maxsim")
    for r in range(rounds):
        for i, (q, e) in enumerate(zip(query_ids, encoded)):
            shift = (i + r) % len(names)
            for n in names[shift:] + names[:shift]:
                if n == "fast-plaid":
                    answer = peer.query(i, K + extra, rotate=i + r)
                    for setting, ms in answer["ms"].items():
                        run.times[f"plaid:{setting}"][r, i] = ms
                        run.top10[f"plaid:{setting}"][q] = plaid_result(e.text, answer["top"][setting], doc_ids, passages.passage_idx, K)
                else:
                    t0 = time.perf_counter()
                    res = searchers[n].search_encoded(e, K, "maxsim")
                    run.times[n][r, i] = (time.perf_counter() - t0) * 1e3
                    run.top10[n][q] = res
    for i, (q, e) in enumerate(zip(query_ids, encoded)):
        for n, s in searchers.items():
            run.top100[n][q] = s.search_encoded(e, K_RECALL, "maxsim")
        for setting, hits in peer.query(i, K_RECALL + extra)["top"].items():
            run.top100[f"plaid:{setting}"][q] = plaid_result(e.text, hits, doc_ids, passages.passage_idx, K_RECALL)
    return run


def run_corpus(spec: Corpus, args: argparse.Namespace, python: Path, threads: int, encoder: Any) -> tuple[dict[str, Any], Any]:
    """Build, export, time and score one corpus; returns its report and the query encoder's
    model (reused for the next corpus)."""
    from mvr.pipeline.retrieval.evaluation import overlap_at_10, quality

    searchers, rows = mvr_searchers(spec, args, encoder)
    exact = searchers["exact"]
    passages = exact.partitions["maxsim"][0]
    if passages.live is not None:
        raise SystemExit(f"{spec.index} has deleted passages: benchmark a compacted index")
    query_ids = list(spec.collection.queries)
    encoded = exact.encode([spec.collection.queries[q] for q in query_ids])
    peer_work = Path(args.workdir) / "plaid" / spec.index.name
    export(peer_work, passages, encoded, float(exact.search_encoded(encoded[0], 1, "maxsim").ranked.scores[0]))

    print(f"{spec.label}: fast-plaid create ({len(PLAID_SETTINGS)} settings) ...", flush=True)
    peer = PlaidPeer(python, peer_work, threads, PLAID_SETTINGS, peer_work / "fast_plaid_side.log")
    try:
        rows |= plaid_rows(peer.ready)
        print(f"{spec.label}: timing {len(encoded)} queries x {args.rounds} rounds, then k = {K_RECALL} untimed ...", flush=True)
        steal = Steal()
        run = measure(searchers, peer, query_ids, encoded, passages, args.rounds)
        steal_pct = steal.percent()
    finally:
        peer.close()

    for n, row in rows.items():
        row.update(summary(run.times[n]))
        row["per_query_ms"] = [round(float(v), 3) for v in np.median(run.times[n], axis=0)]
        row["overlap@10"] = overlap_at_10(run.top10[n], run.top10["exact"])
        row["nDCG@10"] = quality(run.top10[n], spec.collection)["nDCG@10"]
        row["R@100"] = quality(run.top100[n], spec.collection)["R@100"]
    report = {
        "corpus": spec.label,
        "index": str(spec.index),
        "passages": len(passages),
        "documents": len(set(passages.doc_ids)),
        "token_vectors": int(passages.n_vectors),
        "dim": int(passages.dim),
        "codec": exact.manifest.codecs["tokens"]["name"],
        "queries": len(encoded),
        "query_vectors_mean": float(np.mean([len(e.tokens) for e in encoded])),
        "rounds": args.rounds,
        "cpu_steal_pct": steal_pct,
        "fast_plaid": {k: peer.ready[k] for k in ("versions", "torch_threads", "defaults", "builds")},
        "rows": rows,
    }
    report["target"] = target(rows)
    return report, exact.query_encoder.encoder


def target(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """fast-plaid's fastest setting with overlap@10 ≥ 0.95 against mvr's default ANN path."""
    mvr = rows[MVR_BACKENDS[0]]
    ok = [(n, r) for n, r in rows.items() if r["searcher"] == "fast-plaid" and r["overlap@10"] >= OVERLAP_TARGET]
    if not ok:
        return {"plaid_setting": None, "mvr": MVR_BACKENDS[0]}
    name, best = min(ok, key=lambda nr: nr[1]["p50_ms"])
    return {
        "mvr": MVR_BACKENDS[0],
        "plaid_setting": name.split(":", 1)[1],
        "speedup_p50": best["p50_ms"] / mvr["p50_ms"],
        "nDCG@10_delta": mvr["nDCG@10"] - best["nDCG@10"],
        "R@100_delta": mvr["R@100"] - best["R@100"],
        "met": bool(best["p50_ms"] / mvr["p50_ms"] >= SPEED_TARGET and mvr["nDCG@10"] >= best["nDCG@10"] and mvr["R@100"] >= best["R@100"]),
    }


def print_report(report: dict[str, Any]) -> None:
    v = report["versions"]
    print(
        f"\nmvr vs fast-plaid, maxsim, k = {K}, {report['threads']} thread(s) each; versions: mvr torch {v['mvr']['torch']}, "
        f"faiss {v['mvr']['faiss']}, scann {v['mvr']['scann']}, numpy {v['mvr']['numpy']}; fast-plaid {v['fast-plaid']['fast-plaid']} "
        f"(torch {v['fast-plaid']['torch']}, numpy {v['fast-plaid']['numpy']}); python {v['python']}"
    )
    for c in report["corpora"]:
        print(
            f"\n{c['corpus']}: {c['passages']} passages ({c['documents']} documents), {c['token_vectors']} token vectors, "
            f"{c['codec']} (dim {c['dim']}); {c['queries']} judged queries ({c['query_vectors_mean']:.1f} vectors each) "
            f"x {c['rounds']} rounds; CPU steal {c['cpu_steal_pct']:.0f}%"
        )
        header = f"{'searcher':<11}{'setting':<48}{'p50 ms':>8}{'p95 ms':>8}{'overlap@10':>11}{'nDCG@10':>9}{'R@100':>8}{'build s':>9}{'B/vec':>8}"
        print(header)
        print("-" * len(header))
        for r in c["rows"].values():
            print(
                f"{r['searcher']:<11}{r['setting']:<48}{r['p50_ms']:>8.2f}{r['p95_ms']:>8.2f}{r['overlap@10']:>11.3f}"
                f"{r['nDCG@10']:>9.4f}{r['R@100']:>8.4f}{'-' if r['build_s'] is None else format(r['build_s'], '.1f'):>9}{r['bytes_per_vector']:>8.1f}"
            )
        t = c["target"]
        if t["plaid_setting"] is None:
            print(f"no fast-plaid setting reached overlap@10 >= {OVERLAP_TARGET}")
        else:
            print(
                f"fast-plaid's fastest setting with overlap@10 >= {OVERLAP_TARGET}: {t['plaid_setting']}. mvr {t['mvr']}'s speed-up "
                f"(its p50 / mvr's p50): {t['speedup_p50']:.2f}x (target >= {SPEED_TARGET:g}x); mvr - fast-plaid: "
                f"nDCG@10 {t['nDCG@10_delta']:+.4f}, R@100 {t['R@100_delta']:+.4f} (target >= 0); target {'met' if t['met'] else 'NOT met'}"
            )


def versions(python: Path) -> dict[str, Any]:
    import faiss
    import torch

    from peers.plaid_venv import installed_versions

    peer = installed_versions(python)
    return {
        "mvr": {"torch": torch.__version__, "faiss": faiss.__version__, "scann": version("scann"), "numpy": np.__version__},
        "fast-plaid": {"fast-plaid": peer.get("fast_plaid", peer.get("fast-plaid", "?")), "torch": peer.get("torch", "?"), "numpy": peer.get("numpy", "?")},
        "python": sys.version.split()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=os.environ.get("MVR_DATASETS", str(root.parent / "shared" / "datasets")))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--corpus", choices=("msmarco", "combined", "both"), default="both")
    p.add_argument("--queries", type=int, default=None, help="the first N judged queries of each collection (default: all)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="threads for both sides (default: all CPUs)")
    p.add_argument("--limit", type=int, default=None, help="index only the first N passages (smoke tests; its own index directory)")
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--from-json", default=None, help="print the tables of a written report and exit")
    args = p.parse_args()
    if args.from_json:
        print_report(json.loads(Path(args.from_json).read_text()))
        return

    import faiss

    from mvr.operators.encode.encoder import set_threads
    from mvr.pipeline.ray_runtime import init_ray

    python = ensure_venv()
    threads = set_threads(args.threads)  # torch (query encoding)
    faiss.omp_set_num_threads(threads)  # FAISS search; numpy's BLAS uses every CPU by default
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        pass
    init_ray(quiet=True)  # before any timed build
    work = Path(args.workdir)
    steal = Steal()
    report: dict[str, Any] = {"threads": threads, "versions": versions(python), "plaid_settings": PLAID_SETTINGS, "corpora": []}
    encoder = None
    for spec in corpora(args.corpus, Path(args.datasets), work, args.queries, args.limit):
        c, encoder = run_corpus(spec, args, python, threads, encoder)
        report["corpora"].append(c)
    report["cpu_steal_pct"] = steal.percent()
    print_report(report)
    print(f"\nCPU steal over the whole run: {report['cpu_steal_pct']:.0f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
