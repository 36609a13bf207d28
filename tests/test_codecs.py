"""Token-vector codecs (operators/codecs/): error bounds derived from each codec's bit
budget, determinism, serialisation and its refusals, partial decodes, names and sizes.

Two samples: synthetic clustered unit vectors (64 dims) and real token vectors of 20
msmarco-sample passages from the packaged MiniLM (384 dims, L2-normalised as stored)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from mvr.operators import codecs
from mvr.operators.codecs import CodecFileError, Int8, Residual, serial
from mvr.operators.encode.compress import l2_normalize
from mvr.operators.packed import Packed
from mvr.storage.codec_file import read_codec

NAMES = ["float16", "int8", "residual-1", "residual-2", "residual-4", "pq-8", "pca-32+residual-2", "pca-32+pq-8"]
FAST = {"niter": 6}  # k-means iterations: the bounds below hold after any number of iterations


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((40, dim)).astype(np.float32)
    x = centers[rng.integers(0, 40, n)] + 0.4 * rng.standard_normal((n, dim)).astype(np.float32)
    return l2_normalize(x).astype(np.float32)


@pytest.fixture(scope="module")
def synthetic() -> np.ndarray:
    return _clustered(2000, 64, 0)


@pytest.fixture(scope="module")
def real(datasets) -> np.ndarray:
    """~1,600 token vectors of the first 20 msmarco-sample passages, unit length."""
    from mvr.operators.encode.encoder import TokenEncoder

    lines = (datasets / "msmarco-sample" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    rows = [json.loads(line) for line in lines]
    texts = [(r["title"] + " " + r["text"]).strip() for r in rows]
    enc = TokenEncoder("minilm", device="cpu", dtype="float32")
    ids = [np.asarray(i, dtype=np.int64) for i in enc.tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
    vectors = np.concatenate(enc.encode(ids, 20, enc.tokenizer.pad_token_id or 0))
    return l2_normalize(vectors).astype(np.float32)


_trained: dict[tuple[str, str], codecs.Codec] = {}


def _codec(name: str, sample_name: str, sample: np.ndarray) -> codecs.Codec:
    key = (name, sample_name)
    if key not in _trained:
        dim = sample.shape[1]
        _trained[key] = codecs.train(name.replace("pca-32", f"pca-{dim // 2}"), sample, seed=7, **FAST)
    return _trained[key]


@pytest.fixture(params=["synthetic", "real"])
def sample(request) -> tuple[str, np.ndarray]:
    return request.param, request.getfixturevalue(request.param)


# ---- sizes and names ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_bytes_per_vector_is_the_code_width(name, synthetic):
    c = _codec(name, "synthetic", synthetic)
    codes = c.encode(synthetic[:100])
    assert codes.dtype == np.uint8 and codes.shape == (100, c.bytes_per_vector)
    assert c.bytes_per_vector == codecs.bytes_per_vector(c.name, 64, n_vectors=len(synthetic))
    assert c.decode(codes).shape == (100, c.dim_out) and c.decode(codes).dtype == np.float32
    assert c.project(synthetic[:3]).shape == (3, c.dim_out)


def test_names_and_sizes_at_the_benchmark_settings():
    n = 403_138  # msmarco-sample's token vectors: ColBERTv2's codebook is 2^13, uint16 ids
    assert codecs.default_centroids(n) == 8192 and codecs.id_dtype(8192) == np.dtype("<u2")
    assert codecs.id_dtype(256) == np.dtype("u1") and codecs.id_dtype(257) == np.dtype("<u2") and codecs.id_dtype(70_000) == np.dtype("<u4")
    sizes = {
        "float16": 768,
        "int8": 388,
        "residual-1": 50,
        "residual-2": 98,
        "residual-4": 194,
        "pca-128+residual-2": 34,
        "pca-64+residual-2": 18,
        "pca-128+pq-16": 16,
        "pca-64+residual-1": 10,
        "pq-48": 48,
        "pq-96": 96,
    }
    assert {k: codecs.bytes_per_vector(k, 384, n_vectors=n) for k in sizes} == sizes


@pytest.mark.parametrize("bad", ["float32", "residual-3", "residual-x", "pq-0", "pca-128", "float16-2", "pca-64+pca-32+residual-2", "residual-2+pca-64", ""])
def test_unknown_names_are_refused(bad, synthetic):
    with pytest.raises(ValueError, match="unknown codec|bits a value"):
        codecs.train(bad, synthetic[:300])


def test_pq_needs_a_divisible_dimension(synthetic):
    with pytest.raises(ValueError, match="not divisible"):
        codecs.train("pq-5", synthetic)


# ---- a sample too small for the codec (codecs.choose) --------------------------------------


def test_auto_falls_back_to_no_pca_below_twice_its_dimensions():
    """``auto`` at MiniLM's 384 dims is pca-192+residual-1 from 2 × 192 sample vectors, and
    residual-1 at the full dimension below (a corpus of a few documents); nothing else moves."""
    for n in (1, 2, 77, 383):
        ch = codecs.choose("auto", 384, n)
        assert (ch.name, ch.asked, ch.resolved, ch.fell_back) == ("residual-1", "auto", "pca-192+residual-1", True)
        assert f"sample of {n:,} vectors" in ch.reason and "at least 384" in ch.reason
        assert ch.describe().startswith("residual-1 instead of auto (pca-192+residual-1): ")
    for n in (384, 65_536):
        ch = codecs.choose("auto", 384, n)
        assert (ch.name, ch.fell_back, ch.reason, ch.describe()) == ("pca-192+residual-1", False, "", "pca-192+residual-1")
    assert codecs.min_sample("pca-192+residual-1") == 2 * codecs.AUTO_PCA_DIM == 384
    # no PCA in auto at 192 dims or fewer: the same codec from one vector on
    assert [codecs.choose("auto", d, 1).name for d in (192, 160, 128, 96)] == ["residual-1", "residual-1", "residual-2", "residual-2"]
    assert not any(codecs.choose("auto", d, 1).fell_back for d in (192, 128))


def test_the_pooled_groups_auto_is_pq_of_two_dimension_sub_vectors_or_int8():
    """The pooled group (pooled, first-m, centroids): ``auto`` is pq-{dim/2} (docs/codecs.md,
    "--pooled-codec auto"), int8 at an odd dimension or below 256 sample vectors; any
    named codec the sample cannot train falls back to int8 too, never to a token codec."""
    assert [codecs.resolve_name("auto", d, "pooled") for d in (384, 128, 7)] == ["pq-192", "pq-64", "int8"]
    assert codecs.resolve_name("auto", 384) == "pca-192+residual-1"  # the tokens group is the default
    ch = codecs.choose("auto", 384, 255, "pooled")
    assert (ch.name, ch.asked, ch.resolved, ch.fell_back) == ("int8", "auto", "pq-192", True) and "at least 256" in ch.reason
    assert codecs.choose("auto", 384, 256, "pooled").name == "pq-192" and codecs.choose("pca-128+residual-2", 384, 255, "pooled").name == "int8"
    assert codecs.bytes_per_vector("pq-192", 384) == 192 and codecs.bytes_per_vector("int8", 384) == 388
    with pytest.raises(ValueError, match="codec group"):
        codecs.resolve_name("auto", 384, "centroids")


def test_the_first_m_groups_auto_is_a_refinement_of_the_token_codes():
    """The first_m group: ``auto`` is refine-{dim/4} (docs/codecs.md, "First-m as a refinement
    of the token codes"); below 256 sample vectors, or at a dimension 4 does not divide, first-m
    keeps a column in the pooled codec (``pooled``); any other name is refused."""
    assert [codecs.resolve_name("auto", d, "first_m") for d in (384, 128, 6)] == ["refine-96", "refine-32", "pooled"]
    ch = codecs.choose("auto", 384, 255, "first_m")
    assert (ch.name, ch.resolved, ch.fell_back) == ("pooled", "refine-96", True) and "at least 256" in ch.reason
    assert codecs.choose("auto", 384, 256, "first_m").name == "refine-96" and codecs.choose("pooled", 384, 9999, "first_m").name == "pooled"
    for bad, match in (("pq-96", "choose auto, pooled"), ("refine-x", "choose auto"), ("refine-5", "not divisible by 5")):
        with pytest.raises(ValueError, match=match):
            codecs.choose(bad, 384, 9999, "first_m")
    with pytest.raises(ValueError, match="unknown codec"):
        codecs.choose("refine-96", 384, 9999)  # a refinement is the first_m group's, not a token codec
    # first-m keeps a column in the pooled codec where it cannot be read from the token codes, and says why
    base = ("auto", 384, 9999, "pca-192+residual-1", "pq-192")
    assert codecs.choose_first_m(*base).name == "refine-96"
    for tokens, pooled, factor, why in (
        ("float16", "pq-192", 1, "leaves nothing to refine"),
        ("pca-192+residual-1", "pq-192", 2, "token pooling"),
        ("pca-192+residual-1", "pca-192+int8", 1, "in its own space"),
    ):
        ch = codecs.choose_first_m("auto", 384, 9999, tokens, pooled, factor)
        assert (ch.name, ch.resolved) == ("pooled", "refine-96") and why in ch.describe()


def test_a_refinement_recovers_what_the_token_codes_miss(real, tmp_path):
    """``Refined``: the token code then the refinement's; decoded (α·lift(token decode) + r̂),
    unit length, at the model's dimension. Against an independent computation from the two
    codecs' parts, and closer to held-out vectors than the token codes alone (measured on
    the 859 after the 1,100 trained on: mean cosine 0.86 against 0.56, the codebook of so small a
    sample fitting them badly); the refinement's file round-trips."""
    train, x = real[:1100], real[1100:]
    tokens = codecs.train("pca-192+residual-1", train, seed=7, **FAST)
    refinement = codecs.train_refinement("refine-96", train, tokens, seed=7)
    refined = codecs.Refined(tokens, refinement)
    assert (refined.dim_in, refined.dim_out, refined.bytes_per_vector) == (384, 384, tokens.bytes_per_vector + 96 + 2)
    codes, width = refined.encode(x), tokens.bytes_per_vector
    np.testing.assert_array_equal(codes[:, :width], tokens.encode(x))
    np.testing.assert_array_equal(codes[:, width:], refined.refine(x, tokens.encode(x)))
    anchor = refinement.alpha * (tokens.decode(codes[:, :width]) @ tokens.transform.matrix)
    expected = anchor + refinement.pq.decode(np.ascontiguousarray(codes[:, width : width + 96]))
    inverse = np.ascontiguousarray(codes[:, width + 96 :]).view("<f2")[:, 0].astype(np.float32)  # the code's 2 last bytes
    np.testing.assert_allclose(1 / inverse, np.linalg.norm(expected, axis=1), rtol=2**-11)  # float16's rounding
    decoded = refined.decode(codes)
    np.testing.assert_allclose(decoded, expected * inverse[:, None], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(decoded, axis=1), 1, atol=5e-4)
    # scored from the codes (no decoded matrix) as decoded then multiplied, for one query
    # vector (first-m's pooled query) and a few; a batch of queries decodes
    q = x[:30] + 0.1
    for m in (1, 7, 30):  # 30: more than MAX_QUERY_VECTORS, each part decoded at its own dimension
        np.testing.assert_allclose(refined.similarities(q[:m], codes), q[:m] @ decoded.T, atol=1e-4)
    token_only = tokens.decode(codes[:, :width]) @ tokens.transform.matrix
    token_only /= np.linalg.norm(token_only, axis=1, keepdims=True)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    cos_refined, cos_tokens = (decoded * x).sum(1).mean(), (token_only * x).sum(1).mean()
    assert cos_refined > cos_tokens + 0.15, (cos_refined, cos_tokens)
    path = tmp_path / "first_m.mvrc"
    path.write_bytes(codecs.to_bytes(refinement))
    loaded = read_codec(str(path))
    assert isinstance(loaded, codecs.Refinement) and loaded.alpha == refinement.alpha
    np.testing.assert_array_equal(codecs.Refined(tokens, loaded).decode(codes), decoded)
    with pytest.raises(ValueError, match="anchor"):
        codecs.Refinement.fit(96, train)


def test_named_codecs_fall_back_only_when_the_sample_cannot_train_them():
    assert [codecs.choose(n, 384, 1).name for n in ("float16", "int8", "residual-1", "residual-4")] == ["float16", "int8", "residual-1", "residual-4"]
    # a named PCA: its codec at the full dimension, said so
    ch = codecs.choose("pca-128+residual-2", 384, 255)
    assert (ch.name, ch.fell_back) == ("residual-2", True) and ch.describe().startswith("residual-2 instead of pca-128+residual-2: ")
    assert codecs.choose("pca-128+residual-2", 384, 256).name == "pca-128+residual-2"
    # pq-M: 256 centroids a sub-space; below that, auto's codec without a PCA
    assert codecs.min_sample("pq-48") == codecs.PQ_MIN_VECTORS == 256
    assert [codecs.choose("pq-48", 384, n).name for n in (255, 256)] == ["residual-1", "pq-48"]
    assert codecs.choose("pca-128+pq-16", 384, 255).name == "residual-1" and codecs.choose("pca-64+pq-16", 128, 200).name == "residual-2"
    assert codecs.choose("pca-96+pq-32", 384, 200).name == "residual-1" == codecs.choose("pca-96+pq-32", 384, 1).name
    # what no sample can mend is refused, whatever the sample's size
    for name, match in (
        ("pca-500+residual-1", "output dimension must be 1..384"),
        ("pq-5", "not divisible by 5"),
        ("pca-128+pq-5", "dimension 128 is not divisible"),
        ("float32", "unknown codec"),
    ):
        for n in (1, 100_000):
            with pytest.raises(ValueError, match=match):
                codecs.choose(name, 384, n)
    with pytest.raises(ValueError, match="no sample vector"):
        codecs.choose("auto", 384, 0)


def test_every_choice_trains_on_real_token_vectors(real):
    """On the first 1, 2, 77, 383 and 384 token vectors of real passages, each choice trains,
    and codes round-trip; a PCA FAISS cannot fit is refused in words, not by FAISS's assertion."""
    for n in (1, 2, 77, 383, 384):
        for asked in ("auto", "pca-128+residual-2", "pq-48", "residual-2"):
            ch = codecs.choose(asked, 384, n)
            c = codecs.train(ch.name, real[:n], seed=0, n_vectors=n)
            assert c.name == ch.name and c.dim_in == 384
            decoded = c.decode(c.encode(real[:n]))
            assert decoded.shape == (n, c.dim_out) and np.all(np.isfinite(decoded))
    with pytest.raises(ValueError, match=r"pca-192: a sample of 95 vectors is too small to fit it \(FAISS needs 96"):
        codecs.train("pca-192+residual-1", real[:95])
    assert codecs.train("pca-192+float16", real[:96]).dim_out == 192  # FAISS's limit; choose asks for 384


def test_residual_codebook_never_exceeds_the_sample():
    """ColBERTv2's codebook size exceeds the vectors below 128 (16 for one; 128 for a
    77-vector document): the k-means gets at most its training rows, and at least one centroid."""
    assert codecs.default_centroids(1) == 16 and codecs.default_centroids(77) == 128
    assert all(codecs.default_centroids(n) > n for n in range(1, 128))
    for n in range(1, 400):
        assert 1 <= codecs.residual_centroids(n) <= n
        assert codecs.residual_centroids(n, n_vectors=10**9) == n and codecs.residual_centroids(n, n_centroids=n + 5) == n
    assert codecs.residual_centroids(62_259, n_vectors=403_138) == 8192  # the measured collections: unchanged
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 20, 39):
        x = l2_normalize(rng.standard_normal((n, 16)).astype(np.float32)).astype(np.float32)
        train_rows, _ = Residual.split(n, 0)
        c = codecs.train("residual-2", x, seed=0, n_vectors=n)
        assert len(c.centroids) == codecs.residual_centroids(len(train_rows), n) <= max(1, len(train_rows))


# ---- error bounds -------------------------------------------------------------------------


def test_float16_bound(sample):
    _, x = sample
    c = codecs.train("float16", x)
    err = np.abs(c.decode(c.encode(x)) - x)
    # round to nearest with 11 significant bits: half an ulp, 2^-11 relative; subnormals 2^-25
    assert np.all(err <= np.maximum(np.abs(x) * 2.0**-11, 2.0**-25))


def test_int8_bound(sample):
    _, x = sample
    c = codecs.train("int8", x)
    codes = c.encode(x)
    s = Int8.scales(codes)
    np.testing.assert_allclose(s, np.abs(x).max(1) / 127, rtol=1e-6)
    err = np.abs(c.decode(codes) - x)
    assert np.all(err <= s[:, None] / 2 * (1 + 1e-5))  # |x - q·s| ≤ s/2, up to float32 rounding


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_residual_bound(nbits, sample):
    """Before the rescaling, a value's error is its residual's quantisation error, at most
    the width of its bucket (the weight is a mean of values in the bucket; the outer buckets
    end at the held-out sample's extremes lo / hi, beyond which the distance past them adds).
    The rescaling to unit length at most doubles a unit vector's L2 error."""
    sname, x = sample
    c = _codec(f"residual-{nbits}", sname, x)
    assert isinstance(c, Residual) and c.normalize
    fresh = _clustered(500, 64, 99) if sname == "synthetic" else x[::-1]
    for data in (x, fresh):
        codes = c.encode(data)
        r = data - c.centroids[c.ids_of(codes)]
        raw = c.decode_raw(codes)
        err = np.abs(raw - data)
        beyond = np.maximum(0, np.maximum(c.lo - r, r - c.hi))
        assert np.all(err <= c.max_bucket_width + beyond + 1e-6)
        # every value decodes to its own bucket's weight, and the bucket is the right one
        b = np.searchsorted(c.cutoffs, r, side="right")
        np.testing.assert_allclose(raw - c.centroids[c.ids_of(codes)], c.weights[b], atol=1e-6)
        dec = c.decode(codes)
        np.testing.assert_allclose(np.linalg.norm(dec, axis=1), 1, atol=1e-5)
        assert np.all(np.linalg.norm(dec - data, axis=1) <= 2 * np.linalg.norm(raw - data, axis=1) + 1e-6)
    # more bits, narrower buckets: the bound tightens with the bit budget
    widths = {b: _codec(f"residual-{b}", sname, x).max_bucket_width for b in (1, 2, 4)}
    assert widths[4] < widths[2] < widths[1]


def test_residual_decode_matches_a_per_value_reference(synthetic):
    """The byte lookup tables against unpacking bit by bit."""
    for nbits in (1, 2, 4):
        c = _codec(f"residual-{nbits}", "synthetic", synthetic)
        codes = c.encode(synthetic[:50])
        bits = np.unpackbits(codes[:, c.id_bytes :], axis=1).reshape(50, 64, nbits)
        buckets = (bits * (1 << np.arange(nbits - 1, -1, -1))).sum(-1)
        expected = c.centroids[c.ids_of(codes)] + c.weights[buckets]
        np.testing.assert_allclose(c.decode_raw(codes), expected, atol=1e-6)
        ids = codes[:, : c.id_bytes].copy().view(c.ids).ravel()
        np.testing.assert_array_equal(ids, c.nearest(synthetic[:50]))


@pytest.mark.parametrize("name", NAMES)
def test_similarities_equal_decode_then_score(name, sample, monkeypatch):
    """``Codec.similarities``, what exact scoring multiplies query vectors with: a residual or
    product codec computes it from the codes (a compiled kernel, no decoded matrix, split
    across threads above ``SPLIT_MIN_PAIRS``), the others decode and multiply. Each equals the
    query vectors projected into the codec's space times ``decode`` to 1e-4, the issue's
    bound, at the sample's norms (``normalize``) and without them; so does
    ``pair_similarities`` (each code scored by one query vector, the first stage's hits:
    the residual codec's kernel decodes nothing there either)."""
    from mvr.operators.codecs import residual_scoring

    sample_name, x = sample
    c = _codec(name, sample_name, x)
    codes = c.encode(x)
    # 9 query vectors (a short query's: from the codes) and more than MAX_QUERY_VECTORS (a batch's: decoded)
    for q in (c.project(x[::37][:9]), c.project(x[: residual_scoring.MAX_QUERY_VECTORS + 5])):
        want = q @ c.decode(codes).T
        for threads, split_from in ((1, residual_scoring.SPLIT_MIN_PAIRS), (3, 1)):  # one range; three uneven ones
            monkeypatch.setattr(residual_scoring, "threads", lambda threads=threads: threads)
            monkeypatch.setattr(residual_scoring, "SPLIT_MIN_PAIRS", split_from)
            got = c.similarities(q, codes)
            assert got.shape == (len(q), len(codes)) and got.dtype == np.float32
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
            np.testing.assert_allclose(c.similarities(q, codes[:2]), want[:, :2], atol=1e-4, rtol=0)  # fewer rows than threads
        assert c.similarities(q, codes[:0]).shape == (len(q), 0)
        # each code scored by one query vector (a first stage's hits): the same values
        index = np.arange(len(codes)) % len(q)
        pairs = c.pair_similarities(q, index, codes)
        assert pairs.shape == (len(codes),) and pairs.dtype == np.float32
        np.testing.assert_allclose(pairs, want[index, np.arange(len(codes))], atol=1e-4, rtol=0)
        np.testing.assert_allclose(c.pair_similarities(q[:1], np.zeros(len(codes), np.int64), codes), want[0], atol=1e-4, rtol=0)
    q = c.project(x[::37][:9])
    if isinstance(c, codecs.Residual):  # without the rescaling to unit length: centroid + residual as decode_raw gives them
        raw = codecs.Residual(c.nbits, c.centroids, c.cutoffs, c.weights, c.lo, c.hi, normalize=False)
        np.testing.assert_allclose(raw.similarities(q, codes), q @ raw.decode_raw(codes).T, atol=1e-4, rtol=0)
    if c.scores_codes:
        want = q @ c.decode(codes).T

        def no_decode(*_args, **_kwargs):
            raise AssertionError("a query's similarities decoded its codes")

        for name in ("decode", "decode_scaled", "_decode", "_decode_into"):  # a query's vectors: nothing decoded
            monkeypatch.setattr(codecs.Residual, name, no_decode)
            monkeypatch.setattr(codecs.PQ, name, no_decode)
        np.testing.assert_allclose(c.similarities(q, codes), want, atol=1e-4, rtol=0)
        np.testing.assert_allclose(c.pair_similarities(q[:1], np.zeros(len(codes), np.int64), codes), want[0], atol=1e-4, rtol=0)
        if isinstance(getattr(c, "inner", c), codecs.Residual):  # several query vectors' hits: from the codes too
            index = np.arange(len(codes)) % len(q)
            np.testing.assert_allclose(c.pair_similarities(q, index, codes), want[index, np.arange(len(codes))], atol=1e-4, rtol=0)
            with pytest.raises(ValueError, match="query vector numbers"):
                c.pair_similarities(q, index + len(q), codes)
        with pytest.raises(ValueError, match="query vectors"):
            c.similarities(np.ones((2, c.dim_out + 1), np.float32), codes)


def test_pq_bound(sample):
    """Mean squared error per vector (before rescaling) against the sample's total variance
    (the sum of the per-dimension variances): one centroid per sub-space, at its mean,
    already reaches exactly the variance, and 256 centroids per sub-space, each at the mean
    of its cell, split every cell of a coarser codebook further, so trained PQ sits far below
    it (measured: 0.08 of it for pq-8 on the synthetic sample). Half the variance is the
    bound asserted: loose enough for any seed, and it fails a PQ that is no better than a
    couple of centroids per sub-space."""
    sname, x = sample
    m = 8 if x.shape[1] == 64 else 48
    c = codecs.train(f"pq-{m}", x, seed=3, normalize=False, **FAST)
    mse = ((c.decode(c.encode(x)) - x) ** 2).sum(1).mean()
    variance = x.var(0).sum()
    assert mse < 0.5 * variance
    normed = codecs.train(f"pq-{m}", x, seed=3, **FAST)
    assert normed.normalize
    np.testing.assert_allclose(np.linalg.norm(normed.decode(normed.encode(x[:50])), axis=1), 1, atol=1e-5)


def test_pca_projection_keeps_scores(sample):
    """pca-D+C: decodes and projected queries live in D dims, unit length; query · decoded
    token ≈ query · token (PCA to half the dimensions keeps most of the energy)."""
    sname, x = sample
    c = _codec("pca-32+residual-2", sname, x)
    assert c.dim_in == x.shape[1] and c.dim_out == x.shape[1] // 2
    q = c.project(x[:20])
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
    d = c.decode(c.encode(x))
    exact, approx = x[:20] @ x.T, q @ d.T
    assert np.corrcoef(exact.ravel(), approx.ravel())[0, 1] > 0.9


# ---- determinism --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["residual-2", "pq-8", "pca-32+residual-2"])
def test_same_sample_and_seed_give_identical_codec_files(name, synthetic):
    a = codecs.to_bytes(codecs.train(name, synthetic, seed=11, **FAST))
    b = codecs.to_bytes(codecs.train(name, synthetic, seed=11, **FAST))
    assert a == b
    assert codecs.to_bytes(codecs.train(name, synthetic, seed=12, **FAST)) != a


@pytest.mark.parametrize("name", NAMES)
def test_encoding_is_repeatable_and_batch_independent(name, synthetic):
    c = _codec(name, "synthetic", synthetic)
    codes = c.encode(synthetic)
    np.testing.assert_array_equal(codes, c.encode(synthetic))
    np.testing.assert_array_equal(codes, c.encode(synthetic, block=300))


# ---- serialisation ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_serialisation_round_trip(name, synthetic, tmp_path):
    c = _codec(name, "synthetic", synthetic)
    codes = c.encode(synthetic[:200])
    path = tmp_path / "codec.mvrc"
    path.write_bytes(codecs.to_bytes(c))  # a codec file as the index writes it (storage/codec_file.py)
    loaded = read_codec(str(path))
    assert (loaded.name, loaded.dim_in, loaded.dim_out, loaded.bytes_per_vector) == (c.name, c.dim_in, c.dim_out, c.bytes_per_vector)
    np.testing.assert_array_equal(loaded.decode(codes), c.decode(codes))
    np.testing.assert_array_equal(loaded.encode(synthetic[:200]), codes)
    np.testing.assert_array_equal(loaded.project(synthetic[:5]), c.project(synthetic[:5]))
    assert codecs.to_bytes(loaded) == codecs.to_bytes(c)


def test_damaged_codec_files_are_refused(synthetic, tmp_path):
    data = codecs.to_bytes(_codec("pca-32+residual-2", "synthetic", synthetic))
    cases = {
        "truncated": data[: len(data) // 2],
        "truncated-header": data[:30],
        "empty": b"",
        "bit-flip-payload": data[:-100] + bytes([data[-100] ^ 1]) + data[-99:],
        "bit-flip-header": data[:40] + bytes([data[40] ^ 4]) + data[41:],
        "not-a-codec": b"PAR1" + data[4:],
        "extra-bytes": data + b"\0",
    }
    for what, blob in cases.items():
        path = tmp_path / f"{what}.mvrc"
        path.write_bytes(blob)
        with pytest.raises(CodecFileError, match=f"codec file {path}") as e:
            read_codec(str(path))
        assert isinstance(e.value, ValueError)
    with pytest.raises(CodecFileError, match="truncated"):
        read_codec(str(tmp_path / "truncated.mvrc"))
    with pytest.raises(CodecFileError, match="corrupted"):
        read_codec(str(tmp_path / "bit-flip-payload.mvrc"))
    with pytest.raises(CodecFileError, match="cannot be read"):
        read_codec(str(tmp_path / "missing.mvrc"))


def test_a_sealed_codec_file_with_stages_out_of_order_is_refused(synthetic, tmp_path):
    """A file whose checksum holds but whose stages are not a codec, or a transform then a
    codec (a transform alone, or the two swapped), is refused as inconsistent."""
    data = codecs.to_bytes(_codec("pca-32+residual-2", "synthetic", synthetic))
    _, version, hlen = serial._PREFIX.unpack_from(data)
    header = json.loads(data[serial._PREFIX.size : serial._PREFIX.size + hlen])
    payload = data[serial._PREFIX.size + hlen : -32]

    def sealed(stages: list, arrays: list) -> bytes:
        blobs, at, metas = [], 0, []
        for a in arrays:
            blobs.append(payload[a["offset"] : a["offset"] + a["nbytes"]])
            metas.append({**a, "offset": at})
            at += a["nbytes"]
        hb = json.dumps({**header, "stages": stages, "arrays": metas}, sort_keys=True, separators=(",", ":")).encode()
        body = serial._PREFIX.pack(serial.MAGIC, version, len(hb)) + hb + b"".join(blobs)
        return body + hashlib.sha256(body).digest()

    first = [a for a in header["arrays"] if a["name"].startswith("0.")]
    second = [a for a in header["arrays"] if a["name"].startswith("1.")]
    swap = {"0": "1", "1": "0"}
    cases = {
        "transform-alone": sealed(header["stages"][:1], first),
        "swapped": sealed(header["stages"][::-1], [{**a, "name": swap[a["name"][0]] + a["name"][1:]} for a in second + first]),
    }
    for what, blob in cases.items():
        path = tmp_path / f"{what}.mvrc"
        path.write_bytes(blob)
        with pytest.raises(CodecFileError, match="inconsistent content"):
            read_codec(str(path))


# ---- partial decodes ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["int8", "residual-2", "pca-32+pq-8"])
def test_decode_selected_rows_and_passages(name, synthetic):
    c = _codec(name, "synthetic", synthetic)
    codes = c.encode(synthetic)
    full = c.decode(codes)
    rows = np.array([1999, 5, 5, 700, 0])
    np.testing.assert_array_equal(c.decode(codes, rows), full[rows])
    out = np.empty((len(rows), c.dim_out), np.float32)
    assert c.decode(codes, rows, out=out, block=2) is out
    np.testing.assert_array_equal(out, full[rows])
    out[:] = 0
    assert c.decode_into(codes, rows, out) is out
    np.testing.assert_array_equal(out, full[rows])
    lengths = np.random.default_rng(0).integers(1, 40, 90)
    lengths[-1] += len(codes) - lengths.sum()
    packed = Packed(codes, np.r_[0, np.cumsum(lengths)])
    got = c.decode_passages(packed, np.array([3, 0, 89]))
    want = Packed(full, packed.offsets).take(np.array([3, 0, 89]))
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.vectors, want.vectors)
    with pytest.raises(ValueError, match="uint8 codes"):
        c.decode(codes[:, :-1])
    with pytest.raises(ValueError, match="expected"):
        c.encode(synthetic[:, :10])
