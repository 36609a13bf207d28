"""``mvr scale-study``: Reimers & Gurevych (2021), "The curse of dense low-dimensional
information retrieval for large index sizes", on mvr's own indexes.

Two experiments over one BEIR collection's judged queries (``docs/scale_study.md``):

1. **distractors**: the index grows from the collection's judged passages (every passage of
   a document with a judgment in the split), through its other passages, to the passages
   of the distractor corpora (shuffled with the seed). ``steps`` geometric sizes from the
   judged-only size to everything, one of them moved onto the size of the whole dataset
   corpus, so that size reproduces the plain exact figures of the collection.
2. **random strings**: the judged passages plus ``random_strings`` passages of random
   lower-case letter "words", indexed like any corpus; besides nDCG@10 and RR@10, the share
   of queries for which some random string scores above every relevant passage.

Methods: BM25 (rebuilt at every size: its statistics depend on the collection), pooled single
vectors at every dimension of ``dims`` (the full dimension unprojected, lower ones by a PCA
fitted on the dataset corpus's pooled vectors) and the multi-vector modes at full dimension.
Dense scores do not depend on the collection, so every query's exact score against every
passage is computed once per method and each size ranks a prefix of them: exact search, no
ANN, so the study measures the representations, not an index structure."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, cast

import numpy as np
from tqdm import tqdm

from mvr.operators.codecs import Codec
from mvr.operators.encode.query import EncodedQuery
from mvr.operators.retrieval.bm25 import Analyzer, BM25Partition, TermStats, top_rows
from mvr.operators.retrieval.ranking import Ranked, top_documents
from mvr.operators.retrieval.scoring import MODE_VECTORS, score
from mvr.operators.retrieval.stored_vectors import StoredVectors
from mvr.pipeline.config import IndexConfig, ScaleStudyConfig
from mvr.pipeline.plots import png_bytes, pyplot
from mvr.pipeline.retrieval.evaluation import quality
from mvr.pipeline.retrieval.plan import SearchResult
from mvr.pipeline.retrieval.searcher import load_query_encoder
from mvr.storage import fs
from mvr.storage.beir import TestCollection, read_collection
from mvr.storage.bm25_partitions import read_passage_texts
from mvr.storage.codec_file import load_codecs
from mvr.storage.jsonl import write_jsonl
from mvr.storage.manifest import Manifest, load_manifest
from mvr.storage.partitions import ShardSlice, read_passages

K = 100  # documents ranked a query (nDCG@10, RR@10 and R@100 are measured on them)
DENSE_MULTI = ("maxsim", "first-m", "softmax-centroid")
EXPERIMENTS = ("distractors", "random-strings")


# ---------------------------------------------------------------- pure parts


def index_sizes(first: int, last: int, steps: int, anchor: Optional[int] = None) -> list[int]:
    """``steps`` index sizes from ``first`` to ``last``, geometric (rounded). An ``anchor``
    strictly between them replaces the interior size nearest to it on a log scale (or is
    added when there is no interior size), so it is always measured. Sorted, distinct."""
    if not 0 < first <= last:
        raise ValueError(f"index sizes need 0 < first <= last, got {first} and {last}")
    if first == last:
        return [first]
    sizes = [int(round(first * (last / first) ** (i / (steps - 1)))) for i in range(steps)]
    sizes[0], sizes[-1] = first, last
    if anchor is not None and first < anchor < last and anchor not in sizes:
        if steps > 2:
            i = min(range(1, steps - 1), key=lambda j: abs(math.log(sizes[j]) - math.log(anchor)))
            sizes[i] = anchor
        else:
            sizes.append(anchor)
    return sorted(set(sizes))


@dataclass
class Projection:
    """A PCA projection: ``mean`` (D,) and ``components`` (D, d), orthonormal columns."""

    mean: np.ndarray
    components: np.ndarray

    @property
    def dim(self) -> int:
        return self.components.shape[1]


def fit_pca(vectors: np.ndarray, dim: int) -> Projection:
    """PCA of (n, D) ``vectors`` to ``dim`` dimensions: the top right singular vectors of the
    mean-centred matrix (numpy SVD, float64)."""
    n, full = vectors.shape
    if not 0 < dim <= min(n, full):
        raise ValueError(f"cannot fit a {dim}-dimensional PCA on {n} vectors of {full} dimensions")
    x = np.asarray(vectors, dtype=np.float64)
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    return Projection(mean, vt[:dim].T.copy())


def project(vectors: np.ndarray, projection: Projection) -> np.ndarray:
    """(n, D) → (n, d) float32: centred, projected onto the components, L2-normalised."""
    y = (np.asarray(vectors, dtype=np.float64) - projection.mean) @ projection.components
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    return (y / np.maximum(norms, 1e-12)).astype(np.float32)


def random_strings(n: int, seed: int, words: tuple[int, int] = (10, 60), letters: tuple[int, int] = (1, 10)) -> list[str]:
    """``n`` passages of random lower-case "words": each a uniform number of words in
    ``words`` (inclusive), each word a uniform length in ``letters`` of uniform letters a-z."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lengths = rng.integers(letters[0], letters[1] + 1, size=int(rng.integers(words[0], words[1] + 1)))
        chars = (rng.integers(0, 26, size=int(lengths.sum())) + ord("a")).astype(np.uint8).tobytes().decode("ascii")
        ends = np.cumsum(lengths)
        out.append(" ".join(chars[e - n : e] for e, n in zip(ends, lengths)))
    return out


def random_share(best_random: np.ndarray, best_relevant: np.ndarray) -> float:
    """Share of queries whose best random-string score is above their best relevant passage's
    score (strictly). Both (n_queries,); a query without a relevant passage is NaN in
    ``best_relevant`` and left out; a size without random strings is -inf in ``best_random``."""
    keep = ~np.isnan(best_relevant)
    if not keep.any():
        return float("nan")
    return float(np.mean(best_random[keep] > best_relevant[keep]))


def rank(scores: np.ndarray, doc_ids: Sequence[str], passage_idx: np.ndarray, k: int, positive_only: bool = False) -> Ranked:
    """The top ``k`` documents of n scored passages (a document scores as its best passage;
    ties keep passage order, as in ``top_documents``). ``positive_only``: only passages that
    score above 0 (BM25: the passages matching a query term, as the search core does)."""
    rows = np.flatnonzero(scores > 0) if positive_only else np.arange(len(scores))
    if len(rows) == 0:
        return Ranked()
    rows = np.sort(top_rows(scores, rows, k, doc_ids))
    return top_documents(scores[rows], [doc_ids[int(r)] for r in rows], passage_idx[rows], k)


# ---------------------------------------------------------------- results


@dataclass
class Experiment:
    """One growth experiment: ``sizes`` (passages), ``composition`` {source: passages} at
    each size, ``methods`` {method: [figures at each size]} (nDCG@10, RR@10, R@100, and for
    random strings ``random_share`` and ``random_top10``, shares of the judged queries)."""

    name: str
    sizes: list[int]
    composition: list[dict[str, int]]
    methods: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def figure(self, method: str, metric: str = "nDCG@10") -> list[float]:
        return [f[metric] for f in self.methods[method]]


@dataclass
class ScaleStudyResult:
    collection: str
    queries: int
    judged_passages: int
    dataset_passages: int
    methods: dict[str, str]  # method → description
    indexes: dict[str, str]  # source → index URL
    experiments: dict[str, Experiment] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self, config: ScaleStudyConfig) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "config": config.model_dump(mode="json", by_alias=True)}

    def plot(self) -> bytes:
        """PNG of each method's change against index size (``plot_study``)."""
        return plot_study(self)


# ---------------------------------------------------------------- sources


@dataclass
class Source:
    """One index's passages in shard order: ``doc_ids`` (n,) (prefixed with ``name`` for
    anything but the dataset, so ids of different corpora never collide), ``passage_idx``
    (n,) int32, ``texts`` (n,), and the shard slices they were read from."""

    name: str
    index_url: str
    doc_ids: list[str]
    passage_idx: np.ndarray
    texts: list[str]
    slices: list[ShardSlice]
    manifest: Manifest
    codecs: dict[str, Codec]  # each index has its own: queries are projected into each one's spaces

    def __len__(self) -> int:
        return len(self.doc_ids)

    def vectors(self, kind: str, slices: Optional[Sequence[ShardSlice]] = None) -> StoredVectors:
        """The stored vectors of ``kind`` of the passages in ``slices`` (default: all)."""
        return read_passages(self.index_url, self.manifest.shards, self.slices if slices is None else slices, kind, self.codecs, ids=False).vectors

    def queries(self, queries: Sequence[EncodedQuery]) -> list[EncodedQuery]:
        """``queries`` (encoded without a codec) in the space of this index's decoded vectors."""
        t, p = self.codecs["tokens"], self.codecs["pooled"]
        return [EncodedQuery(q.text, t.project(q.tokens), p.project(q.pooled[None])[0]) for q in queries]


def corpus_name(url: str) -> str:
    """A corpus's short name: its last path component without extensions."""
    return str(url).rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0] or "corpus"


def _key(url: str) -> str:
    """A corpus URL in one spelling: local paths made absolute, no trailing slash."""
    url = str(url).rstrip("/")
    return url if "://" in url else os.path.abspath(url)


def resolve_index(corpus: str, config: ScaleStudyConfig, prebuilt: Mapping[str, str], log: Callable[[str], None]) -> str:
    """The index of ``corpus``: the prebuilt one given for it, or one in the workdir, built
    (or found up to date) by ``index_corpus`` with ``config.index``."""
    given = {_key(k): v for k, v in prebuilt.items()}
    if _key(corpus) in given:
        return given[_key(corpus)]
    if not config.workdir:
        raise ValueError(f"no index given for {corpus} and no workdir to build it in (--workdir)")
    from mvr.pipeline.indexing.corpus_job import index_corpus  # Ray Data; only when something is indexed

    digest = hashlib.sha1(_key(corpus).encode()).hexdigest()[:8]
    url = fs.join(config.workdir, "indexes", f"{corpus_name(corpus)}-{digest}")
    result = index_corpus(_key(corpus), url, config.index, log=log)
    log(f"{corpus} → {url}: " + ("up to date" if result.up_to_date else result.summary))
    return url


def read_source(name: str, index_url: str, prefix: bool) -> Source:
    """The passages of an index (ids, passage numbers, texts) in shard order."""
    manifest = load_manifest(index_url)
    slices = [ShardSlice(s.path, 0, s.rows) for s in manifest.shards]
    doc_ids, pidx, texts = read_passage_texts(index_url, slices)
    if prefix:
        doc_ids = [f"{name}::{d}" for d in doc_ids]
    return Source(name, index_url, doc_ids, pidx, texts, slices, manifest, load_codecs(index_url, manifest.codecs))


def check_compatible(urls: Mapping[str, str]) -> dict[str, Any]:
    """The common vector settings (model, tokenizer, compression) of the indexes; ValueError
    naming the first index whose vectors were made differently from the first one's."""
    first_name, first = None, None
    for name, url in urls.items():
        m = load_manifest(url)
        # dim: of the decoded pooled vectors (the pooled codec's output), what the pooled methods project
        settings = {"vectors": IndexConfig.of_index(m.config).vector_settings(), "model": m.model.get("fingerprint"), "dim": m.codecs["pooled"]["dim_out"]}
        if first is None:
            first_name, first = name, settings
        elif settings != first:
            raise ValueError(f"{name} ({url}) was indexed with other vector settings or another model than {first_name}: queries cannot be scored against both")
    return first or {}


# ---------------------------------------------------------------- scoring


def dense_scores(
    source: Source, modes: Sequence[str], queries: Sequence[EncodedQuery], projections: Mapping[str, Optional[Projection]]
) -> dict[str, np.ndarray]:
    """Exact scores {method: (n_queries, n_passages) float32} of every query against every
    passage of ``source``: the multi-vector ``modes`` (read shard by shard), and a pooled
    method per entry of ``projections`` (None: the full-dimension pooled vectors)."""
    out: dict[str, np.ndarray] = {}
    n = len(source)
    queries = source.queries(queries)
    if projections:
        pooled = cast(np.ndarray, source.vectors("pooled").take(np.arange(n)))  # pooled vectors are single: take returns a matrix
        for method, proj in projections.items():
            vectors = pooled if proj is None else project(pooled, proj)
            qs = queries if proj is None else _projected(queries, proj)
            out[method] = np.stack([score("pooled", q, vectors) for q in qs]) if n else np.zeros((len(queries), 0), np.float32)
    for mode in modes:
        parts = []
        for sl in tqdm(source.slices, desc=f"{source.name}: {mode} scores", unit="shard", leave=False):
            stored = source.vectors(MODE_VECTORS[mode], [sl])
            docs = stored.take(np.arange(len(stored)))
            parts.append(np.stack([score(mode, q, docs) for q in queries]))
        out[mode] = np.concatenate(parts, axis=1) if parts else np.zeros((len(queries), 0), np.float32)
    return out


def _projected(queries: Sequence[EncodedQuery], proj: Projection) -> list[EncodedQuery]:
    pooled = project(np.stack([q.pooled for q in queries]), proj)
    return [EncodedQuery(q.text, q.tokens, p) for q, p in zip(queries, pooled)]


@dataclass
class Growth:
    """An index growing in a fixed order: passage ``doc_ids``, ``passage_idx``, analysed
    ``terms`` (BM25) and dense ``scores`` {method: (n_queries, n)}, all in growth order; the
    first ``judged`` passages are the dataset's judged ones, random strings (if any) start at
    ``random_from``."""

    doc_ids: list[str]
    passage_idx: np.ndarray
    terms: list[list[str]]
    scores: dict[str, np.ndarray]
    judged: int
    random_from: Optional[int] = None

    def __len__(self) -> int:
        return len(self.doc_ids)


def take(source: Source, terms: list[list[str]], scores: dict[str, np.ndarray], rows: np.ndarray) -> Growth:
    """The passages ``rows`` of a source, in that order, as a Growth (no judged prefix)."""
    return Growth([source.doc_ids[r] for r in rows], source.passage_idx[rows], [terms[r] for r in rows], {m: s[:, rows] for m, s in scores.items()}, 0)


def concat(parts: Sequence[Growth], judged: int, random_from: Optional[int] = None) -> Growth:
    return Growth(
        [d for p in parts for d in p.doc_ids],
        np.concatenate([p.passage_idx for p in parts]).astype(np.int32),
        [t for p in parts for t in p.terms],
        {m: np.concatenate([p.scores[m] for p in parts], axis=1) for m in parts[0].scores},
        judged,
        random_from,
    )


def measure(
    name: str,
    growth: Growth,
    sizes: Sequence[int],
    composition: Sequence[dict[str, int]],
    methods: Sequence[str],
    qids: Sequence[str],
    query_terms: Sequence[Sequence[str]],
    collection: TestCollection,
    bm25_params: dict[str, Any],
) -> Experiment:
    """Every method at every size of ``growth`` (its first ``size`` passages): ir-measures
    figures over the judged queries and, with random strings, ``random_share`` (queries
    where a random string scores above every relevant passage) and ``random_top10`` (queries
    with a random string among their top 10 documents)."""
    exp = Experiment(name, list(sizes), list(composition), {m: [] for m in methods})
    relevant: dict[str, set[str]] = {}
    for j in collection.qrels:
        if j.relevance > 0:
            relevant.setdefault(j.query_id, set()).add(j.doc_id)
    # relevant passages lie among the judged ones: (n_queries, judged) mask
    rel_mask = np.array([[d in relevant.get(q, ()) for d in growth.doc_ids[: growth.judged]] for q in qids], dtype=bool).reshape(len(qids), growth.judged)
    random_ids = set(growth.doc_ids[growth.random_from :]) if growth.random_from is not None else set()
    bar = tqdm(total=len(sizes) * len(methods), desc=f"{name}: rank and measure", unit="run")
    for size in sizes:
        doc_ids, pidx = growth.doc_ids[:size], growth.passage_idx[:size]
        for method in methods:
            if method == "bm25":
                terms = growth.terms[:size]
                part = BM25Partition.build(terms, doc_ids, pidx, TermStats.of(terms), **bm25_params)
                s = np.stack([part.scores(t) for t in query_terms]) if qids else np.zeros((0, size), np.float32)
            else:
                s = growth.scores[method][:, :size]
            results = {
                q: SearchResult(collection.queries[q], method, rank(s[i], doc_ids, pidx, K, positive_only=method == "bm25"), "exact", size, 1, 1)
                for i, q in enumerate(qids)
            }
            figures: dict[str, float] = dict(quality(results, collection))
            if growth.random_from is not None:
                best_rel = np.where(rel_mask.any(axis=1), np.where(rel_mask, s[:, : growth.judged], -np.inf).max(axis=1, initial=-np.inf), np.nan)
                best_rnd = s[:, growth.random_from : size].max(axis=1, initial=-np.inf)
                figures["random_share"] = round(random_share(best_rnd, best_rel), 4)
                figures["random_top10"] = round(float(np.mean([any(d in random_ids for d in results[q].ranked.doc_ids[:10]) for q in qids])), 4)
            exp.methods[method].append(figures)
            bar.update(1)
    bar.close()
    return exp


# ---------------------------------------------------------------- the study


def scale_study(config: ScaleStudyConfig, log: Callable[[str], None] = print) -> ScaleStudyResult:
    """Run both experiments ``config`` describes (see the module docstring). The corpora
    ``config.indexes`` names are searched in those indexes; the others, and the random-string
    corpus, are indexed in ``config.workdir`` (reused when up to date)."""
    t0 = time.perf_counter()
    _check(config)
    collection = read_collection(config.dataset, config.split)
    queries = collection.judged_queries
    if not queries:
        raise ValueError(f"{config.dataset}: no judged queries in split {config.split!r}")
    qids = list(queries)

    urls, distractor_names, random_name = build_indexes(config, config.indexes, log)
    full_dim = int(check_compatible(urls)["dim"])
    t_index = time.perf_counter()
    ds_name = corpus_name(config.dataset)
    dataset = read_source(ds_name, urls[ds_name], prefix=False)
    distractors = [read_source(n, urls[n], prefix=True) for n in distractor_names]
    random_src = read_source(random_name, urls[random_name], prefix=True) if random_name else None
    sources = [dataset, *distractors] + ([random_src] if random_src else [])
    methods, projections = study_methods(config, dataset, full_dim)
    multi = [m for m in config.modes if m in DENSE_MULTI]
    log(f"methods: {', '.join(methods)}")

    # queries, BM25 terms, and the dense scores (once per source and method)
    encoded = load_query_encoder(load_manifest(urls[ds_name]).config)([queries[q] for q in qids])
    analyzer = Analyzer(config.bm25.stopwords, config.bm25.stemmer)
    query_terms = analyzer([queries[q] for q in qids])
    terms = {s.name: analyzer(s.texts) for s in sources}
    scores = {s.name: dense_scores(s, multi, encoded, projections) for s in tqdm(sources, desc="exact dense scores", unit="index")}
    everything = {s.name: take(s, terms[s.name], scores[s.name], np.arange(len(s))) for s in sources}
    t_score = time.perf_counter()

    # growth orders: judged passages first, then the rest
    judged_docs = {j.doc_id for j in collection.qrels}
    is_judged = np.array([d in judged_docs for d in dataset.doc_ids], dtype=bool)
    n_judged, n_ds = int(is_judged.sum()), len(dataset)
    if n_judged == 0:
        raise ValueError(f"none of {ds_name}'s passages is judged in split {config.split!r}")
    judged = take_growth(everything[ds_name], np.flatnonzero(is_judged))
    result = ScaleStudyResult(collection.name, len(qids), n_judged, n_ds, methods, urls)

    def run(name: str, growth: Growth, sizes: list[int], composition: list[dict[str, int]]) -> Experiment:
        return measure(name, growth, sizes, composition, list(methods), qids, query_terms, collection, config.bm25.params())

    if distractors:
        dis = concat([everything[n] for n in distractor_names], 0)
        dis = take_growth(dis, np.random.default_rng(config.seed).permutation(len(dis)))
        growth = concat([judged, take_growth(everything[ds_name], np.flatnonzero(~is_judged)), dis], n_judged)
        sizes = index_sizes(n_judged, len(growth), config.steps, anchor=n_ds)
        log(f"distractors: {n_judged} judged passages → {n_ds} ({ds_name}) → {len(growth)} with {', '.join(distractor_names)}; sizes {sizes}")
        comp = [{"judged": min(z, n_judged), f"{ds_name} unjudged": max(0, min(z, n_ds) - n_judged), "distractors": max(0, z - n_ds)} for z in sizes]
        result.experiments["distractors"] = run("distractors", growth, sizes, comp)
    if random_src is not None:
        growth = concat([judged, everything[random_src.name]], n_judged, random_from=n_judged)
        sizes = index_sizes(n_judged, len(growth), config.steps)
        log(f"random strings: {n_judged} judged passages → {len(growth)} with {len(random_src)} random strings; sizes {sizes}")
        comp = [{"judged": min(z, n_judged), "random strings": max(0, z - n_judged)} for z in sizes]
        result.experiments["random-strings"] = run("random-strings", growth, sizes, comp)
    t_end = time.perf_counter()
    result.seconds = {
        "index": round(t_index - t0, 1),
        "score": round(t_score - t_index, 1),
        "measure": round(t_end - t_score, 1),
        "total": round(t_end - t0, 1),
    }
    return result


def _check(config: ScaleStudyConfig) -> None:
    """ValueError for a study that cannot run."""
    if not config.dataset:
        raise ValueError("a dataset is required (a BEIR directory)")
    if not config.distractors and not config.random_strings:
        raise ValueError("nothing to grow the index with: give distractor corpora and/or a number of random strings")
    if _key(config.dataset) in {_key(d) for d in config.distractors}:
        raise ValueError(f"{config.dataset} is both the dataset and a distractor")
    if config.random_strings and not config.workdir:
        raise ValueError("random strings are written and indexed in the workdir: give --workdir")


def build_indexes(config: ScaleStudyConfig, prebuilt: Mapping[str, str], log: Callable[[str], None]) -> tuple[dict[str, str], list[str], Optional[str]]:
    """Index (or find) the dataset, the distractors and the random-string corpus (written to
    the workdir first): ({source name: index URL}, distractor names, random-strings name)."""
    urls = {corpus_name(config.dataset): resolve_index(config.dataset, config, prebuilt, log)}
    names = []
    for d in config.distractors:
        name = corpus_name(d)
        while name in urls:
            name += "+"
        names.append(name)
        urls[name] = resolve_index(d, config, prebuilt, log)
    random_name = None
    if config.random_strings:
        random_name = f"random-strings-n{config.random_strings}-seed{config.seed}"
        corpus = fs.join(config.workdir, f"{random_name}.jsonl")
        rows = ({"_id": f"random-{i:06d}", "title": "", "text": t} for i, t in enumerate(random_strings(config.random_strings, config.seed)))
        log(("wrote " if write_jsonl(corpus, rows) else "reusing ") + corpus)
        urls[random_name] = resolve_index(corpus, config, prebuilt, log)
    return urls, names, random_name


def study_methods(config: ScaleStudyConfig, dataset: Source, full_dim: int) -> tuple[dict[str, str], dict[str, Optional[Projection]]]:
    """The methods measured ({name: description}) and the pooled ones' projections ({name:
    PCA fitted on the dataset's pooled vectors, or None at the full dimension})."""
    methods: dict[str, str] = {}
    if "bm25" in config.modes:
        b = config.bm25
        methods["bm25"] = f"BM25 (bm25s {b.method}, stopwords={b.stopwords}, stemmer={b.stemmer}, k1={b.k1}, b={b.b}), rebuilt at each size"
    projections: dict[str, Optional[Projection]] = {}
    if "pooled" in config.modes:
        dims = sorted(set(config.dims or [full_dim]), reverse=True)
        bad = [d for d in dims if not 0 < d <= full_dim]
        if bad:
            raise ValueError(f"pooled dimensions must be within 1..{full_dim} (the index's), got {bad}")
        # pooled vectors are single: take returns a matrix
        pooled = cast(np.ndarray, dataset.vectors("pooled").take(np.arange(len(dataset)))) if min(dims) < full_dim else None
        for d in dims:
            if d == full_dim:
                projections[f"pooled-{d}"] = None
                methods[f"pooled-{d}"] = f"pooled single vector, {d} dimensions (unprojected)"
            else:
                assert pooled is not None  # read above: d < full_dim
                projections[f"pooled-{d}"] = fit_pca(pooled, d)
                methods[f"pooled-{d}"] = f"pooled single vector, PCA to {d} dimensions (fitted on {dataset.name}'s {len(pooled)} pooled vectors)"
    for m in config.modes:
        if m in DENSE_MULTI:
            methods[m] = f"{m}, {full_dim} dimensions"
    return methods, projections


def take_growth(growth: Growth, rows: np.ndarray) -> Growth:
    """``growth``'s passages reordered by ``rows``."""
    return Growth(
        [growth.doc_ids[r] for r in rows],
        growth.passage_idx[rows],
        [growth.terms[r] for r in rows],
        {m: s[:, rows] for m, s in growth.scores.items()},
        growth.judged,
        growth.random_from,
    )


# ---------------------------------------------------------------- plot


def plot_study(result: ScaleStudyResult) -> bytes:
    """PNG against index size (log x), one line per method: for each experiment the change of
    nDCG@10 from the judged-only index (the legend gives first → last), and for random
    strings the share of queries where one outranks every relevant passage (solid) or
    reaches the top 10 (dotted)."""
    plt = pyplot()

    panels = [("distractors", "nDCG@10"), ("random-strings", "nDCG@10"), ("random-strings", "random_share")]
    panels = [p for p in panels if p[0] in result.experiments]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.4), squeeze=False)
    styles = {"bm25": ("k", "o", "-")}
    pooled = [m for m in result.methods if m.startswith("pooled-")]
    for i, m in enumerate(pooled):
        styles[m] = (f"C{i}", "s", "-")
    for i, m in enumerate(m for m in result.methods if m not in styles):
        styles[m] = (f"C{len(pooled) + i}", "^", "--")
    for ax, (name, metric) in zip(axes[0], panels):
        exp = result.experiments[name]
        for method in exp.methods:
            color, marker, line = styles[method]
            if metric == "random_share":
                ax.plot(exp.sizes, [100 * v for v in exp.figure(method, metric)], marker=marker, linestyle="-", color=color, markersize=4, label=method)
                ax.plot(
                    exp.sizes,
                    [100 * v for v in exp.figure(method, "random_top10")],
                    marker=marker,
                    linestyle=":",
                    color=color,
                    markersize=3,
                    markerfacecolor="none",
                )
            else:
                y = exp.figure(method, metric)
                ax.plot(
                    exp.sizes, [v - y[0] for v in y], marker=marker, linestyle=line, color=color, markersize=4, label=f"{method} ({y[0]:.3f} → {y[-1]:.3f})"
                )
        ax.set_xscale("log")
        ax.set_xlabel("index size (passages)")
        if name == "distractors":
            ax.axvline(result.dataset_passages, color="grey", linestyle=":", linewidth=0.8)
            ax.set_title(f"{result.collection}: judged passages + unjudged + distractors", fontsize=9)
        else:
            ax.set_title(f"{result.collection}: judged passages + random strings", fontsize=9)
        if metric == "random_share":
            ax.set_title(f"{result.collection}: random strings, % of the {result.queries} queries", fontsize=9)
            ax.set_ylabel("% queries (solid: above all relevant; dotted: in top 10)")
            ax.set_ylim(bottom=-2)
        else:
            ax.set_ylabel("change of nDCG@10 from the judged-only index (exact)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)
