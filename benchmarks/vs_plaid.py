"""mvr against fast-plaid (the PLAID engine PyLate uses) and xtr-warp-rs (the WARP engine) on
the same vectors, side by side.

    python benchmarks/vs_plaid.py [--corpus msmarco|combined|both] [--queries N] [--rounds 3]
        [--workdir /tmp/mvr-bench] [--threads T] [--limit N] [--peers plaid,warp] [--json OUT]
    python benchmarks/vs_plaid.py --from-json OUT      # the tables again
    python benchmarks/peers/plaid_venv.py              # only build fast-plaid's venv (first run does it)
    python benchmarks/peers/warp_venv.py               # only build xtr-warp-rs's venv (first run does it)

Corpora: msmarco-sample (5,000 passages; its judged queries) and msmarco-sample +
dbpedia-sample indexed together (10,016 passages; both collections' judged queries, dbpedia
query and document ids prefixed ``dbpedia:``). Each is indexed with ``mvr index`` defaults
(reused when the workdir holds it; ``--limit N`` indexes the first N input rows only, for smoke
tests) and token-vector ANN partitions are built with ``mvr build-ann`` defaults for
codec-ivf (mvr's default ANN path), faiss-ivfpq and scann (P = 1, no BM25, timed).

The same vectors on every side: mvr's exact partition is decoded (what mvr's rescoring scores)
and exported with the queries as mvr encodes them (``Searcher.encode``: model, then the
codec's projection). Each peer (``--peers``, default both) indexes exactly those passage
vectors and searches exactly those query vectors, in its own venv (fast-plaid:
``benchmarks/peers/plaid_venv.py``; xtr-warp-rs: ``benchmarks/peers/warp_venv.py``; each pins
its own torch) in a subprocess (``benchmarks/peers/peer_side.py``, which imports nothing of
mvr) on the CPU, with the same thread count as mvr (torch, OpenMP and rayon pools; xtr-warp-rs's
``num_threads``). Settings: ``PLAID_SETTINGS`` (fast-plaid's defaults and three others: fewer
IVF probes and full scores; 2-bit residuals) and ``WARP_SETTINGS`` (xtr-warp-rs's defaults, its
per-query optimiser, and four settings of its search knobs: fewer probes; more; more with no
query token left out; more still, with 2,000 candidates kept), each peer's settings with the same create() keywords sharing one index.

Timing: encoding is excluded on every side (queries are encoded once). Each round times every
query on every searcher, the searchers in rotating order (each peer one entry of the
rotation, its settings rotating among themselves), mvr's in process around
``Searcher.search_encoded`` and a peer's in its process around its ``search`` (one query a
call, no progress bar), so drifting machine load hits all alike; a query's latency is its
median over the rounds. k = 10; the peers rank passages, so they are asked for 10 + (passages
− documents) and their passages are aggregated to documents as mvr does (a document scores as
its best passage). A second, untimed pass at k = 100 gives R@100.

Columns: ``p50 ms`` / ``p95 ms``: percentiles over queries of the per-query search latency;
``overlap@10``: mean share of the exact-MaxSim top-10 (mvr exact, same vectors) in the
searcher's top-10; ``nDCG@10`` (the k = 10 run) and ``R@100`` (the k = 100 run): ir-measures
against the qrels (``pipeline.retrieval.evaluation.quality``); ``build s``: mvr: ``build_ann``
wall time (the codec was trained and the codes written by ``mvr index``, not counted); a peer:
its ``create`` (k-means, compression, IVF) over the exported vectors; ``B/vec``: bytes on disk a
token vector: mvr: the codes (shards' token column) + the ANN partition's index files
(``pipeline.indexing.index_info.vector_bytes``); a peer: its index directory (xtr-warp-rs's
also keeps per-chunk copies for updates: the bytes its search loads are printed under the
table). A peer's setting column shows its knobs as it resolved them (xtr-warp-rs: its
optimiser's, for the first query).

The last lines of each table compare, at p50, mvr's default ANN path and each mvr backend with
(a) xtr-warp-rs's fastest setting with overlap@10 ≥ 0.95, or its best-overlap setting where
none reaches it, and (b) fast-plaid's fastest setting with overlap@10 ≥ 0.95 (none where none
reaches it), with each backend's bytes a token vector (codes + first stage); then the issue's
target (mvr's default ANN path ≥ 3× faster at p50 than (b), no worse in nDCG@10 or R@100).
CPU steal over the timed rounds is printed: on a shared VM it moves every figure. Method and
notes: docs/vs_plaid.md.
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
from typing import Any, Callable, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_throughput import Steal
from peers import plaid_venv, warp_venv
from peers.plaid_venv import installed_versions, peer_env
from search_latency import combined_corpus

K = 10
K_RECALL = 100
OVERLAP_TARGET = 0.95
SPEED_TARGET = 3.0
MVR_BACKENDS = ("codec-ivf", "faiss-ivfpq", "scann")  # the first is mvr's default ANN path (AnnBuildConfig.backend)
# fast-plaid settings: create() and search() keywords; {} is fast-plaid's own default (in
# 1.7.0: nbits 4, kmeans_niters 4; n_ivf_probe 8, n_full_scores 4096). Settings with the same
# create() keywords share one index.
PLAID_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {"create": {}, "search": {}},
    "probe4-full1024": {"create": {}, "search": {"n_ivf_probe": 4, "n_full_scores": 1024}},
    "probe2-full256": {"create": {}, "search": {"n_ivf_probe": 2, "n_full_scores": 256}},
    "nbits2": {"create": {"nbits": 2}, "search": {}},
}
# xtr-warp-rs settings (2.1.0.2110): search() keywords over one index of its create() defaults
# (nbits 4, kmeans_niters 4, max_points_per_centroid 256). Its search() knobs default to None:
# a per-query optimiser (xtr_warp.hyperparams.optimize) picks them from the index's density
# (token vectors a centroid), k and the query's length; a setting fixes some of them.
# nprobe: the centroids each query token probes (their codes scored); centroid_score_threshold:
# a query token whose best centroid scores below it is left out (0: none is); bound and t_prime:
# a token's score for a document it missed is the score of the centroid among its top `bound`
# at which their cumulated sizes reach t'; max_candidates: documents kept before the sort.
WARP_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {"create": {}, "search": {}},
    "nprobe1": {"create": {}, "search": {"nprobe": 1}},
    "nprobe8": {"create": {}, "search": {"nprobe": 8}},
    "nprobe16-thr0": {"create": {}, "search": {"nprobe": 16, "centroid_score_threshold": 0.0}},
    # its optimiser keeps 250 candidates whatever the probes: the widest setting keeps more
    "nprobe32-thr0-cand2000": {"create": {}, "search": {"nprobe": 32, "centroid_score_threshold": 0.0, "max_candidates": 2000}},
}
PEER_SCRIPT = Path(__file__).resolve().parent / "peers" / "peer_side.py"


@dataclass(frozen=True)
class PeerSpec:
    """One peer: its settings, its venv, how its rows are named and labelled."""

    key: str  # --peers name and row prefix (plaid:<setting>)
    searcher: str  # the tables' searcher column: the package
    side: str  # peers/peer_side.py's PEER
    settings: dict[str, dict[str, dict[str, Any]]]
    ensure_venv: Callable[[], Path]
    knobs: tuple[str, ...]  # the resolved parameters a row records
    label: Callable[[dict[str, Any]], str]  # its setting column, from those
    fallback: bool  # compared at its best overlap where no setting reaches overlap@10 0.95


PEERS = {
    "plaid": PeerSpec(
        "plaid",
        "fast-plaid",
        "fast-plaid",
        PLAID_SETTINGS,
        plaid_venv.ensure_venv,
        ("nbits", "kmeans_niters", "n_ivf_probe", "n_full_scores"),
        lambda p: f"nbits {p['nbits']}, probe {p['n_ivf_probe']}, full {p['n_full_scores']}",
        False,
    ),
    "warp": PeerSpec(
        "warp",
        "xtr-warp-rs",
        "xtr-warp",
        WARP_SETTINGS,
        warp_venv.ensure_venv,
        ("nbits", "nprobe", "centroid_score_threshold", "bound", "t_prime", "max_candidates"),
        lambda p: f"probe {p['nprobe']}, thr {p['centroid_score_threshold']:g}, t' {p['t_prime']}, cand {p['max_candidates']}",
        True,
    ),
}
COMPARED = ("warp", "plaid")  # the order of the final comparison: (a) xtr-warp-rs, (b) fast-plaid


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
    float32 arrays + offsets (what ``peers/peer_side.py`` reads). Checked: MaxSim of
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


class PeerProcess:
    """A peer in its venv's python, answering one JSON line per command (see
    ``peers/peer_side.py``); its stderr goes to ``log``. ``top_k``: the k of the timed
    searches (its warm-up's, and what its resolved knobs are for)."""

    def __init__(self, peer: PeerSpec, python: Path, work: Path, threads: int, top_k: int, log: Path) -> None:
        self.peer = peer
        self.log_path = log
        self.log = open(log, "w")
        cmd = [str(python), str(PEER_SCRIPT), peer.side, str(work), str(threads), str(top_k), json.dumps(peer.settings)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=peer_env(threads), cwd=work)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.log.flush()
            tail = self.log_path.read_text()[-3000:]
            raise RuntimeError(f"{self.peer.searcher} side exited with status {self.proc.returncode}:\n{tail}")
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


def peer_result(text: str, hits: list[list[float]], doc_ids: list[str], passage_idx: np.ndarray, k: int, searcher: str = "fast-plaid") -> Any:
    """A peer's ranked passages as an mvr SearchResult of documents (best passage each)."""
    from mvr.operators.retrieval.ranking import top_documents
    from mvr.pipeline.retrieval.plan import SearchResult

    rows = np.array([int(p) for p, _ in hits], dtype=np.int64)
    scores = np.array([s for _, s in hits], dtype=np.float32)
    ranked = top_documents(scores, [doc_ids[r] for r in rows], passage_idx[rows], k)
    return SearchResult(text, "maxsim", ranked, searcher, len(rows), 1, 1)


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


def peer_rows(peer: PeerSpec, ready: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Table rows of a peer's settings, their parameters as its side resolved them (its
    defaults, and xtr-warp-rs's optimiser for the first query)."""
    rows = {}
    for name in peer.settings:
        build = ready["builds"][ready["settings"][name]]
        params = {**ready["defaults"]["create"], **build["create"], **ready["resolved"][name]}
        params = {p: params.get(p) for p in peer.knobs}
        rows[f"{peer.key}:{name}"] = {
            "searcher": peer.searcher,
            "setting": f"{name} ({peer.label(params)})",
            "params": params,
            "build_s": build["seconds"],
            "bytes_per_vector": build["bytes_per_vector"],
            "searched_bytes_per_vector": build.get("searched_bytes_per_vector"),
        }
    return rows


@dataclass
class Run:
    """What the searchers answered: latencies (rounds, queries) ms and results by query id."""

    times: dict[str, np.ndarray]
    top10: dict[str, dict[str, Any]]
    top100: dict[str, dict[str, Any]]


def extra_passages(passages: Any) -> int:
    """Passages beyond one a document: k + this many passages hold k documents."""
    return len(passages.doc_ids) - len(set(passages.doc_ids))


def measure(searchers: dict[str, Any], peers: dict[str, PeerProcess], query_ids: list[str], encoded: list[Any], passages: Any, rounds: int) -> Run:
    """The timed rounds at k = 10 (searchers in rotating order, each peer one entry of the
    rotation, its settings in rotating order among themselves), then an untimed pass at k = 100."""
    doc_ids, extra = passages.doc_ids, extra_passages(passages)
    names = [*searchers, *(f"{key}:{setting}" for key, p in peers.items() for setting in p.peer.settings)]
    run = Run({n: np.zeros((rounds, len(encoded))) for n in names}, {n: {} for n in names}, {n: {} for n in names})

    def peer_answer(key: str, i: int, e: Any, k: int, into: dict[str, dict[str, Any]], rotate: int = 0) -> dict[str, float]:
        """Query i on every setting of a peer, its documents into ``into``; its timings."""
        answer = peers[key].query(i, k + extra, rotate=rotate)
        for setting, hits in answer["top"].items():
            into[f"{key}:{setting}"][query_ids[i]] = peer_result(e.text, hits, doc_ids, passages.passage_idx, k, peers[key].peer.searcher)
        return answer["ms"]

    rotation = [*searchers, *peers]
    for s in searchers.values():  # warm-up (the peers' sides warmed themselves up)
        s.search_encoded(encoded[0], K, "maxsim")
    for r in range(rounds):
        for i, (q, e) in enumerate(zip(query_ids, encoded)):
            shift = (i + r) % len(rotation)
            for n in rotation[shift:] + rotation[:shift]:
                if n in peers:
                    for setting, ms in peer_answer(n, i, e, K, run.top10, rotate=i + r).items():
                        run.times[f"{n}:{setting}"][r, i] = ms
                else:
                    t0 = time.perf_counter()
                    res = searchers[n].search_encoded(e, K, "maxsim")
                    run.times[n][r, i] = (time.perf_counter() - t0) * 1e3
                    run.top10[n][q] = res
    for i, (q, e) in enumerate(zip(query_ids, encoded)):
        for n, s in searchers.items():
            run.top100[n][q] = s.search_encoded(e, K_RECALL, "maxsim")
        for key in peers:
            peer_answer(key, i, e, K_RECALL, run.top100)
    return run


def run_corpus(spec: Corpus, args: argparse.Namespace, pythons: dict[str, Path], threads: int, encoder: Any) -> tuple[dict[str, Any], Any]:
    """Build, export, time and score one corpus against the peers of ``pythons`` (key → its
    venv's python); returns its report and the query encoder's model (reused for the next corpus)."""
    from mvr.pipeline.retrieval.evaluation import overlap_at_10, quality

    searchers, rows = mvr_searchers(spec, args, encoder)
    exact = searchers["exact"]
    passages = exact.partitions["maxsim"][0]
    if passages.live is not None:
        raise SystemExit(f"{spec.index} has deleted passages: benchmark a compacted index")
    query_ids = list(spec.collection.queries)
    encoded = exact.encode([spec.collection.queries[q] for q in query_ids])
    peer_work = Path(args.workdir) / "peers" / spec.index.name
    export(peer_work, passages, encoded, float(exact.search_encoded(encoded[0], 1, "maxsim").ranked.scores[0]))

    peers: dict[str, PeerProcess] = {}
    try:
        for key, python in pythons.items():
            peer = PEERS[key]
            print(f"{spec.label}: {peer.searcher} create ({len(peer.settings)} settings) ...", flush=True)
            peers[key] = PeerProcess(peer, python, peer_work, threads, K + extra_passages(passages), peer_work / f"{peer.side}_side.log")
            rows |= peer_rows(peer, peers[key].ready)
        print(f"{spec.label}: timing {len(encoded)} queries x {args.rounds} rounds, then k = {K_RECALL} untimed ...", flush=True)
        steal = Steal()
        run = measure(searchers, peers, query_ids, encoded, passages, args.rounds)
        steal_pct = steal.percent()
    finally:
        for p in peers.values():
            p.close()

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
        "peers": {
            p.peer.searcher: {k: p.ready[k] for k in ("versions", "torch_threads", "defaults", "resolved", "resolved_for", "builds")} for p in peers.values()
        },
        "rows": rows,
    }
    report["target"] = target(rows)
    return report, exact.query_encoder.encoder


def pick(rows: dict[str, dict[str, Any]], searcher: str, fallback: bool) -> Optional[dict[str, Any]]:
    """A peer's row to compare with: its fastest setting (p50) with overlap@10 ≥ 0.95; with
    ``fallback``, where none reaches it, its best-overlap setting (the fastest of equals)."""
    own = [(n, r) for n, r in rows.items() if r["searcher"] == searcher]
    ok = [(n, r) for n, r in own if r["overlap@10"] >= OVERLAP_TARGET]
    if ok:
        name, row = min(ok, key=lambda nr: nr[1]["p50_ms"])
    elif fallback and own:
        name, row = max(own, key=lambda nr: (nr[1]["overlap@10"], -nr[1]["p50_ms"]))
    else:
        return None
    return {"row": name, "reached": bool(ok), **{m: row[m] for m in ("p50_ms", "overlap@10", "nDCG@10", "R@100")}}


def target(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each mvr ANN backend's p50 against the peers' rows to compare with (``pick``: xtr-warp-rs
    falls back to its best overlap, fast-plaid does not), and issue 16's target: mvr's default
    ANN path ≥ 3× faster at p50 than fast-plaid's fastest setting with overlap@10 ≥ 0.95, no
    worse in nDCG@10 or R@100."""
    mvr = rows[MVR_BACKENDS[0]]
    peers = [PEERS[key] for key in COMPARED if any(r["searcher"] == PEERS[key].searcher for r in rows.values())]
    picks = {p.searcher: pick(rows, p.searcher, p.fallback) for p in peers}
    out: dict[str, Any] = {"mvr": MVR_BACKENDS[0], "peers": picks}
    out["ratios"] = {b: {s: p["p50_ms"] / rows[b]["p50_ms"] for s, p in picks.items() if p} for b in MVR_BACKENDS if b in rows}
    best = picks.get("fast-plaid")
    if not best:
        return out | {"plaid_setting": None}
    return out | {
        "plaid_setting": best["row"].split(":", 1)[1],
        "speedup_p50": best["p50_ms"] / mvr["p50_ms"],
        "nDCG@10_delta": mvr["nDCG@10"] - best["nDCG@10"],
        "R@100_delta": mvr["R@100"] - best["R@100"],
        "met": bool(best["p50_ms"] / mvr["p50_ms"] >= SPEED_TARGET and mvr["nDCG@10"] >= best["nDCG@10"] and mvr["R@100"] >= best["R@100"]),
    }


def times(ratio: float) -> str:
    """A peer's p50 ÷ mvr's, in words."""
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def print_target(rows: dict[str, dict[str, Any]]) -> None:
    """The comparison lines under a corpus's table (recomputed from its rows, so an older
    report prints them too)."""
    t = target(rows)
    for searcher, p in t["peers"].items():
        if p is None:
            print(f"no {searcher} setting reached overlap@10 >= {OVERLAP_TARGET}")
        elif p["reached"]:
            print(f"{searcher}: {p['row']}, its fastest setting with overlap@10 >= {OVERLAP_TARGET} (overlap {p['overlap@10']:.3f}, p50 {p['p50_ms']:.2f} ms)")
        else:
            print(
                f"{searcher}: no setting reached overlap@10 >= {OVERLAP_TARGET}; its best overlap: {p['row']} ({p['overlap@10']:.3f}, p50 {p['p50_ms']:.2f} ms)"
            )
    codes = rows["exact"]["bytes_per_vector"]  # the exact row's bytes: the codes alone
    for b, ratios in t["ratios"].items():
        vs = (
            ", ".join(f"{times(r)} than {t['peers'][s]['row']} (overlap {t['peers'][s]['overlap@10']:.3f})" for s, r in ratios.items())
            or "no peer row to compare with"
        )
        default = " (default)" if b == t["mvr"] else ""
        r = rows[b]
        print(
            f"  mvr {b}{default}: {vs}; its overlap {r['overlap@10']:.3f}, p50 {r['p50_ms']:.2f} ms; "
            f"{r['bytes_per_vector']:.1f} B a token vector (codes {codes:.1f} + first stage {r['bytes_per_vector'] - codes:.1f})"
        )
    if t["plaid_setting"] is not None:
        print(
            f"issue 16 target (mvr {t['mvr']} >= {SPEED_TARGET:g}x faster at p50 than plaid:{t['plaid_setting']}, no worse in quality): "
            f"{t['speedup_p50']:.2f}x; mvr - fast-plaid: nDCG@10 {t['nDCG@10_delta']:+.4f}, R@100 {t['R@100_delta']:+.4f}; "
            f"target {'met' if t['met'] else 'NOT met'}"
        )


def print_report(report: dict[str, Any]) -> None:
    v = report["versions"]
    peers = [name for name in v if name not in ("mvr", "python")]
    peer_versions = "; ".join(f"{name} {pv[name]} (torch {pv['torch']}, numpy {pv['numpy']})" for name, pv in ((n, v[n]) for n in peers))
    print(
        f"\nmvr vs {' and '.join(peers)}, maxsim, k = {K}, {report['threads']} thread(s) each; versions: mvr torch {v['mvr']['torch']}, "
        f"faiss {v['mvr']['faiss']}, scann {v['mvr']['scann']}, numpy {v['mvr']['numpy']}; {peer_versions}; python {v['python']}"
    )
    for c in report["corpora"]:
        print(
            f"\n{c['corpus']}: {c['passages']} passages ({c['documents']} documents), {c['token_vectors']} token vectors, "
            f"{c['codec']} (dim {c['dim']}); {c['queries']} judged queries ({c['query_vectors_mean']:.1f} vectors each) "
            f"x {c['rounds']} rounds; CPU steal {c['cpu_steal_pct']:.0f}%"
        )
        header = f"{'searcher':<12}{'setting':<58}{'p50 ms':>8}{'p95 ms':>8}{'overlap@10':>11}{'nDCG@10':>9}{'R@100':>8}{'build s':>9}{'B/vec':>8}"
        print(header)
        print("-" * len(header))
        for r in c["rows"].values():
            print(
                f"{r['searcher']:<12}{r['setting']:<58}{r['p50_ms']:>8.2f}{r['p95_ms']:>8.2f}{r['overlap@10']:>11.3f}"
                f"{r['nDCG@10']:>9.4f}{r['R@100']:>8.4f}{'-' if r['build_s'] is None else format(r['build_s'], '.1f'):>9}{r['bytes_per_vector']:>8.1f}"
            )
        searched = {(r["searcher"], r["bytes_per_vector"], r["searched_bytes_per_vector"]) for r in c["rows"].values() if r.get("searched_bytes_per_vector")}
        for searcher, whole, loaded in sorted(searched):
            print(
                f"{searcher} B/vec: its whole index directory ({whole:.1f}); the files its search loads: {loaded:.1f} (the rest: per-chunk copies for add/update)"
            )
        print_target(c["rows"])


def versions(pythons: dict[str, Path]) -> dict[str, Any]:
    import faiss
    import torch

    out: dict[str, Any] = {"mvr": {"torch": torch.__version__, "faiss": faiss.__version__, "scann": version("scann"), "numpy": np.__version__}}
    for key, python in pythons.items():
        package, peer = PEERS[key].searcher, installed_versions(python)
        out[package] = {package: peer.get(package, peer.get(package.replace("-", "_"), "?")), "torch": peer.get("torch", "?"), "numpy": peer.get("numpy", "?")}
    out["python"] = sys.version.split()[0]
    return out


def peer_list(text: str) -> list[str]:
    """``--peers``: a comma-separated subset of PEERS' keys."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys or set(keys) - set(PEERS):
        raise argparse.ArgumentTypeError(f"one or more of {','.join(PEERS)}, comma-separated (got {text!r})")
    return list(dict.fromkeys(keys))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[1]
    p.add_argument("--datasets", default=os.environ.get("MVR_DATASETS", str(root.parent / "shared" / "datasets")))
    p.add_argument("--workdir", default="/tmp/mvr-bench")
    p.add_argument("--corpus", choices=("msmarco", "combined", "both"), default="both")
    p.add_argument("--queries", type=int, default=None, help="the first N judged queries of each collection (default: all)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="threads for every side (default: all CPUs)")
    p.add_argument("--limit", type=int, default=None, help="index only the first N passages (smoke tests; its own index directory)")
    p.add_argument("--peers", type=peer_list, default=list(PEERS), help=f"the peers to run, comma-separated (default: {','.join(PEERS)})")
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--from-json", default=None, help="print the tables of a written report and exit")
    args = p.parse_args()
    if args.from_json:
        print_report(json.loads(Path(args.from_json).read_text()))
        return

    import faiss

    from mvr.operators.encode.encoder import set_threads
    from mvr.pipeline.ray_runtime import init_ray

    pythons = {key: PEERS[key].ensure_venv() for key in args.peers}
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
    settings = {PEERS[key].searcher: PEERS[key].settings for key in args.peers}
    report: dict[str, Any] = {"threads": threads, "versions": versions(pythons), "peer_settings": settings, "corpora": []}
    encoder = None
    for spec in corpora(args.corpus, Path(args.datasets), work, args.queries, args.limit):
        c, encoder = run_corpus(spec, args, pythons, threads, encoder)
        report["corpora"].append(c)
    report["cpu_steal_pct"] = steal.percent()
    print_report(report)
    print(f"\nCPU steal over the whole run: {report['cpu_steal_pct']:.0f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
