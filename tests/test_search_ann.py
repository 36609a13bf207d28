"""Partitioned ANN search against exact search on msmarco-sample (ScaNN with P = 1, FAISS
with P = 2) and dbpedia-sample (FAISS, P = 4): for each mode, nDCG@10 no more than 0.01
below exact and overlap@10 >= 0.9 at the default knobs; on msmarco the same top-10 for both
builds at exhaustive settings; the exact reference computed here independently (plain
numpy over the shards) and checked against the float reference figures (tests/helpers.py)
on those two and on cranfield (exact only): every dense mode from the default codecs within
0.01 of float, and softmax-centroid within 0.03 of pooled.
``MVR_ANN_TABLE=full`` runs every cell of the docs/search.md table instead."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from conftest import ann_build
from helpers import REFERENCE_NDCG10, REFERENCE_TOLERANCE, ndcg10, read_qrels
from mvr.operators import codecs
from mvr.operators.retrieval.scoring import MODES
from mvr.pipeline.config import SearchConfig
from mvr.pipeline.indexing.ann_build import build_ann
from mvr.pipeline.retrieval.searcher import Searcher
from mvr.storage.beir import read_collection
from mvr.storage.codec_file import read_codec
from mvr.storage.manifest import load_manifest

pytestmark = pytest.mark.ray

# The builds (tests/conftest.py's cached variants of the session indexes: a smaller training
# sample than the default, ScaNN with plain instead of anisotropic codes, every other build
# parameter and search knob at its default): msmarco-sample ScaNN P = 1 and FAISS P = 2
# (P-independence), dbpedia-sample FAISS P = 4 and codec-ivf P = 1 (backend independence),
# cranfield exact only.
# MVR_ANN_TABLE=full builds every cell of the docs/search.md table instead (both backends at
# P = 1 and 4 on both collections, ScaNN anisotropic: ~3 min more, into a copy of the index);
# benchmarks.md has the builds at the full defaults.
FULL_TABLE = os.environ.get("MVR_ANN_TABLE") == "full"
if FULL_TABLE:
    TABLE_BUILDS = [("faiss-ivfpq", 1), ("faiss-ivfpq", 4), ("scann", 1), ("scann", 4)]
    COLLECTION_BUILDS = {"msmarco-sample": TABLE_BUILDS, "dbpedia-sample": TABLE_BUILDS, "cranfield": []}
else:
    COLLECTION_BUILDS = {"msmarco-sample": [("scann", 1), ("faiss-ivfpq", 2)], "dbpedia-sample": [("faiss-ivfpq", 4), ("codec-ivf", 1)], "cranfield": []}
BUILDS = sorted({b for builds in COLLECTION_BUILDS.values() for b in builds})
# the cached variant (a fixture) of each default build
VARIANT_FIXTURE = {
    ("msmarco-sample", "scann", 1): "msmarco_scann1",
    ("msmarco-sample", "faiss-ivfpq", 2): "msmarco_faiss2",
    ("dbpedia-sample", "faiss-ivfpq", 4): "dbpedia_faiss4",
    ("dbpedia-sample", "codec-ivf", 1): "dbpedia_codec_ivf1",
}
INDEX_FIXTURE = {"msmarco-sample": "msmarco_index", "dbpedia-sample": "dbpedia_index", "cranfield": "cranfield_index"}
CENTROIDS_BELOW_POOLED = 0.03  # issue 36: softmax-centroid (unit space) at most this far below pooled
EXHAUSTIVE = {"k_prime": 1000, "candidate_cap": 100_000, "nprobe": 1 << 20, "leaves_to_search": 1 << 20, "reorder_k": 1000}
N_EXHAUSTIVE = 5  # queries compared at exhaustive settings
# judged queries searched by the independent brute force (FLOP-bound numpy over every decoded
# vector): all of msmarco-sample's 44 and dbpedia-sample's 41, cranfield's first 50 of 225
# (its exact nDCG over all 225 is mvr's exact path, which these 50 hold equal to the brute force)
N_INDEPENDENT = 50


def _brute_force_maxsim(queries: list[np.ndarray], vectors: np.ndarray, starts: np.ndarray, chunk: int = 16384) -> np.ndarray:
    """(queries, passages) MaxSim of each query's (n_q, dim) token vectors against every
    passage's rows of ``vectors`` (passage i: rows ``starts[i]`` up to the next start), in
    plain numpy: all the queries' tokens against a chunk of about ``chunk`` vectors (whole
    passages) in one product, each passage's max per query token, summed per query (one pass
    over the vectors for all queries: the same sums as a product per query)."""
    q_all = np.concatenate(queries)
    q_starts = np.r_[0, np.cumsum([len(q) for q in queries])[:-1]]
    out = np.empty((len(queries), len(starts)), np.float32)
    p0 = 0
    while p0 < len(starts):
        p1 = max(p0 + 1, int(np.searchsorted(starts, starts[p0] + chunk, side="right")) - 1)
        lo, hi = starts[p0], (starts[p1] if p1 < len(starts) else len(vectors))
        best = np.maximum.reduceat(q_all @ vectors[lo:hi].T, starts[p0:p1] - lo, axis=1)  # (query tokens, passages)
        out[:, p0:p1] = np.add.reduceat(best, q_starts, axis=0)
        p0 = p1
    return out


def independent_exact(index_url: str, encoded: dict, k: int = 10) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Brute force over the shards' files read and decoded here (pyarrow and the codec file,
    not the search core's storage readers, partitions, candidates or ranking):
    {mode: {qid: [(doc, score)]}}."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    m = load_manifest(index_url)
    loaded = {g: read_codec(os.path.join(index_url, e["path"])) for g, e in m.codecs.items()}
    codec = {"tokens": loaded["tokens"], "centroids": loaded["pooled"], "first_m": loaded["pooled"], "pooled": loaded["pooled"]}
    doc_ids, codes, lengths = [], {"tokens": [], "centroids": [], "first_m": [], "pooled": []}, {"tokens": [], "centroids": [], "first_m": []}
    for s in m.shards:
        doc_ids += pq.read_table(os.path.join(index_url, s.path), columns=["doc_id"])["doc_id"].to_pylist()
        t = ipc.open_file(os.path.join(index_url, s.codes)).read_all()
        for name in codes:
            col = t[name].combine_chunks()
            if name in lengths:
                lengths[name].append(np.diff(np.asarray(col.offsets)))
                col = col.flatten()
            width = (loaded["first_m"] if name == "first_m" and "first_m" in loaded else codec[name]).bytes_per_vector
            codes[name].append(np.frombuffer(col.buffers()[1], np.uint8)[col.offset * width :][: len(col) * width])
    joined = {}
    if "first_m" in loaded:  # first-m refines the token codes: each passage's first m token codes, then the first_m column's
        codec["first_m"] = codecs.Refined(loaded["tokens"], loaded["first_m"])
        tokens = np.concatenate(codes["tokens"]).reshape(-1, loaded["tokens"].bytes_per_vector)
        token_starts, first_lengths = np.r_[0, np.cumsum(np.concatenate(lengths["tokens"]))[:-1]], np.concatenate(lengths["first_m"])
        anchors = tokens[np.concatenate([np.arange(a, a + n) for a, n in zip(token_starts, first_lengths)])]
        joined["first_m"] = np.concatenate([anchors, np.concatenate(codes["first_m"]).reshape(len(anchors), -1)], axis=1)
        codes["first_m"] = []
    flat = {}
    for name, ls in lengths.items():  # (all vectors decoded, start row of each passage)
        n = np.concatenate(ls)
        rows = joined[name] if name in joined else np.concatenate(codes[name]).reshape(-1, codec[name].bytes_per_vector)
        flat[name] = (codec[name].decode(rows), np.r_[0, np.cumsum(n)[:-1]])
    pooled_m = codec["pooled"].decode(np.concatenate(codes["pooled"]).reshape(-1, codec["pooled"].bytes_per_vector))
    maxsim_all = _brute_force_maxsim([e.tokens for e in encoded.values()], *flat["tokens"])
    runs: dict[str, dict] = {mode: {} for mode in MODES}
    for qid, e, maxsim in zip(encoded, encoded.values(), maxsim_all):
        v, starts = flat["first_m"]
        first_m = np.maximum.reduceat(v @ e.pooled, starts)
        v, starts = flat["centroids"]
        c = v @ e.pooled
        w = np.exp(c - np.repeat(np.maximum.reduceat(c, starts), np.diff(np.r_[starts, len(c)])))
        softmax = np.add.reduceat(w * c, starts) / np.add.reduceat(w, starts)
        for mode, scores in (("maxsim", maxsim), ("first-m", first_m), ("softmax-centroid", softmax), ("pooled", pooled_m @ e.pooled)):
            best: dict[str, float] = {}
            for i in np.argsort(-scores, kind="stable"):
                best.setdefault(doc_ids[i], float(scores[i]))
                if len(best) == k:
                    break
            runs[mode][qid] = list(best.items())
    return runs


def overlap10(a: list, b: list) -> float:
    return len({d for d, _ in a[:10]} & {d for d, _ in b[:10]}) / 10


@pytest.fixture(scope="module", params=list(INDEX_FIXTURE))
def runs(request, datasets, tmp_path_factory):
    """Every build of the collection's index, searched with all judged queries."""
    name = request.param
    index_url = request.getfixturevalue(INDEX_FIXTURE[name])
    collection = read_collection(str(datasets / name))
    queries = collection.judged_queries
    exact_searcher = Searcher(index_url, config=SearchConfig(exact=True))
    encoder = exact_searcher.query_encoder.encoder
    encoded = dict(zip(queries, exact_searcher.encode(list(queries.values()))))
    out = {"name": name, "qrels": read_qrels(datasets / name / "qrels" / "test.tsv"), "index": index_url, "dataset_dir": str(datasets / name)}
    out["independent"] = independent_exact(index_url, dict(list(encoded.items())[:N_INDEPENDENT]))
    # every query of a mode in one pass over the vectors (the exact path's batch, which
    # tests/test_exact_batch.py checks against one query at a time)
    out["exact"] = {m: dict(zip(encoded, exact_searcher.search_encoded_batch(list(encoded.values()), 10, m))) for m in MODES}
    # no ANN built yet: the default searcher answers exactly and says so
    plain = Searcher(index_url, modes=("pooled",), encoder=encoder)
    out["no_ann_path"] = plain.paths["pooled"], plain.search([next(iter(queries.values()))], 5, "pooled")[0].path
    print(f"\n{name}: index and exact references ready")
    copy = None
    for backend, p in COLLECTION_BUILDS[name]:
        t0 = time.perf_counter()
        if FULL_TABLE:  # every cell built here, into a copy of the index (the cached ones are read only)
            copy = copy or str(tmp_path_factory.mktemp("ann-table") / name)
            if not os.path.exists(copy):
                shutil.copytree(index_url, copy)
            build_ann(copy, ann_build(backend, p, bm25=None), log=lambda _: None)
            built = copy
        else:
            built = request.getfixturevalue(VARIANT_FIXTURE[name, backend, p])
        print(f"\n{name} {backend} P={p}: built (or read from the fixture cache) in {time.perf_counter() - t0:.1f} s")
        s = Searcher(built, encoder=encoder)
        assert s.manifest.ann["tokens"]["backend"] == backend and len(s.partitions["maxsim"]) == p
        print(f"{name} {backend} P={p}: searcher loaded at {time.perf_counter() - t0:.1f} s")
        for mode in MODES:
            out[backend, p, mode] = {q: s.search_encoded(e, 10, mode) for q, e in encoded.items()}
            out[backend, p, mode, "exhaustive"] = {q: s.search_encoded(e, 10, mode, **EXHAUSTIVE) for q, e in list(encoded.items())[:N_EXHAUSTIVE]}
        out[backend, p, "partitions"] = {m: len(s.partitions[m]) for m in MODES}
        out[backend, p, "index"] = built
        print(f"{name} {backend} P={p}: searched at {time.perf_counter() - t0:.1f} s")
        out["last_build"] = built
    return out


@pytest.mark.parametrize("mode", MODES)
def test_exact_path_matches_independent_brute_force_and_reference(runs, mode):
    exact = {q: r.hits() for q, r in runs["exact"][mode].items()}
    independent = runs["independent"][mode]
    assert len(independent) == min(len(exact), N_INDEPENDENT)
    for q in independent:
        hits = exact[q]
        assert [d for d, _ in hits] == [d for d, _ in independent[q]] or overlap10(hits, independent[q]) >= 0.9, q
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in independent[q]], atol=1e-4)
    got = ndcg10(exact, runs["qrels"])
    print(f"\n{runs['name']} {mode}: exact nDCG@10 {got:.4f} from the default codecs, float reference {REFERENCE_NDCG10[runs['name']][mode]}")
    assert got == pytest.approx(REFERENCE_NDCG10[runs["name"]][mode], abs=REFERENCE_TOLERANCE)
    assert runs["no_ann_path"] == ("exact", "exact")


def test_softmax_centroid_is_within_a_little_of_pooled(runs):
    """The centroids in the unit space (the default) aggregate to nearly what one pooled
    vector does with a model trained for pooling; the paper's raw form was 0.13–0.25 below."""
    got = {m: ndcg10({q: r.hits() for q, r in runs["exact"][m].items()}, runs["qrels"]) for m in ("softmax-centroid", "pooled")}
    print(f"\n{runs['name']}: exact nDCG@10 {got}")
    assert got["softmax-centroid"] >= got["pooled"] - CENTROIDS_BELOW_POOLED


@pytest.mark.parametrize("backend,partitions", BUILDS)
@pytest.mark.parametrize("mode", MODES)
def test_ann_quality_within_tolerance_of_exact(runs, backend, partitions, mode):
    if (backend, partitions) not in COLLECTION_BUILDS[runs["name"]]:
        pytest.skip(f"{runs['name']}: not built for this collection")
    approx = runs[backend, partitions, mode]
    assert all(r.path == "ann" and r.partitions == partitions for r in approx.values())
    assert runs[backend, partitions, "partitions"][mode] == partitions
    exact = runs["independent"][mode]
    a = {q: r.hits() for q, r in approx.items()}
    overlap = np.mean([overlap10(a[q], exact[q]) for q in exact])
    approx_ndcg, exact_ndcg = ndcg10(a, runs["qrels"]), ndcg10(exact, runs["qrels"])
    print(f"\n{runs['name']} {mode} {backend} P={partitions}: nDCG@10 {approx_ndcg:.4f} (exact {exact_ndcg:.4f}), overlap@10 {overlap:.3f}")
    assert overlap >= 0.9, overlap
    # One-sided: the approximate path ranks a candidate subset by exact scores, so it can only
    # differ from exact by missing passages; missing a non-relevant one can raise nDCG (ScaNN's
    # threaded training varies per build: dbpedia pooled P=1 has measured 0.523 vs exact 0.511).
    assert approx_ndcg >= exact_ndcg - 0.01, (approx_ndcg, exact_ndcg)


def test_codec_ivf_lists_hold_four_bytes_a_vector_as_the_plan_says(runs):
    """codec-ivf's token lists are the codes' own centroid ids: the token codec's codebook
    as its cells, 4 B (a uint32 id) a vector, and the plan's size of the partition exact."""
    if ("codec-ivf", 1, "index") not in runs:
        pytest.skip(f"{runs['name']}: no codec-ivf build")
    from mvr.operators.planning.capacity import ann_index_size

    index_url = runs["codec-ivf", 1, "index"]
    m = load_manifest(index_url)
    (part,) = m.ann["tokens"]["partitions"]
    files = {name: f["bytes"] for name, f in part["files"].items()}
    codec = read_codec(os.path.join(index_url, m.codecs["tokens"]["path"]))
    cells = len(codec.coarse_centroids())
    n_vectors = m.counts["tokens"]
    assert part["params"]["nlist"] == cells  # the codebook's centroids, not k-means cells of its own
    assert files["index/lists.npy"] == 128 + 4 * n_vectors
    assert files["index/centroids.npy"] == 128 + 2 * cells * m.dim
    index_bytes = sum(b for name, b in files.items() if name.startswith("index/") and name != "index/ann.json")
    assert ann_index_size("codec-ivf", m.dim, n_vectors, codec_cells=cells).file_bytes == index_bytes


def test_results_do_not_depend_on_partition_count_or_backend(runs):
    """Exhaustive knobs: every build gives the same top-10 (ties aside), = exact."""
    builds = COLLECTION_BUILDS[runs["name"]]
    if len(builds) < 2:
        pytest.skip(f"{runs['name']}: one build only")
    for build in builds[1:]:
        for mode in MODES:
            first, other = runs[(*builds[0], mode, "exhaustive")], runs[(*build, mode, "exhaustive")]
            for q in first:
                a, b = first[q].hits(), other[q].hits()
                np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-5)
                tenth = a[-1][1]
                clear = lambda hits, tenth=tenth: {d for d, s in hits if s > tenth + 1e-5}  # noqa: E731 - above any tie at the cut
                assert clear(a) == clear(b), (build, mode, q)
                assert clear(a) == clear(runs["independent"][mode][q]), (mode, q)


def test_eval_job_writes_table_json_and_sweep_plot(runs, tmp_path, capsys):
    """``mvr eval`` on the last build (FAISS, P = 2 in CI): ir-measures figures, overlap with exact,
    latency, the JSON shape of the design, and a PNG of the sweep."""
    if runs["name"] != "msmarco-sample":
        pytest.skip("run once")
    import json

    from mvr.jobs.evaluate import main as eval_main

    out = tmp_path / "eval.json"
    dataset = runs["dataset_dir"]
    assert eval_main([runs["last_build"], "--dataset", dataset, "--modes", "pooled,first-m", "--sweep", "10,100", "--json", str(out)]) == 0
    body = json.loads(out.read_text())
    assert set(body["modes"]) == {"pooled", "first-m"} and body["queries"] == 43
    for mode, f in body["modes"].items():
        assert {"nDCG@10", "RR@10", "R@100", "latency_ms_p50", "latency_ms_p95", "overlap@10"} <= set(f)
        assert f["path"] == "ann" and f["partitions"] == COLLECTION_BUILDS[runs["name"]][-1][1] and f["overlap@10"] >= 0.9
        assert f["nDCG@10"] == pytest.approx(ndcg10(runs["independent"][mode], runs["qrels"]), abs=0.01)
        assert f["latency_ms_p95"] >= f["latency_ms_p50"] > 0
        assert [p["k_prime"] for p in body["sweep"][mode]] == [10, 100]
    assert (tmp_path / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "nDCG@10" in capsys.readouterr().out
    assert eval_main([runs["last_build"], "--dataset", dataset, "--modes", "pooled", "--exact", "--json", str(out)]) == 0
    exact = json.loads(out.read_text())["modes"]["pooled"]
    assert exact["path"] == "exact" and "overlap@10" not in exact
    assert exact["nDCG@10"] == pytest.approx(ndcg10(runs["independent"]["pooled"], runs["qrels"]), abs=1e-3)


def test_bad_requests_are_refused_with_the_reason(runs):
    s = Searcher(runs["index"], modes=("pooled",))
    for args, message in [
        (("", 10, "pooled"), "query is empty"),
        (("   ", 10, "pooled"), "query is empty"),
        (("x" * 5000, 10, "pooled"), "at most 4096"),
        (("q", 0, "pooled"), "k must be an integer between 1 and 1000"),
        (("q", 1001, "pooled"), "between 1 and 1000"),
        (("q", 10, "colbert"), "unknown mode 'colbert'"),
        (("q", 10, "maxsim"), "mode 'maxsim' is not loaded"),
    ]:
        with pytest.raises(ValueError, match=message):
            s.search([args[0]], args[1], args[2])
    with pytest.raises(ValueError, match="unknown search knob"):
        s.search(["q"], 10, "pooled", nprob=3)
    with pytest.raises(ValueError, match="k_prime"):
        s.search(["q"], 10, "pooled", k_prime=0)
