"""Codec names → classes: parse a name, train a codec, size one without training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from mvr.operators.codecs.base import Codec, Transform
from mvr.operators.codecs.quantizers import PCA, PQ, Composed
from mvr.operators.codecs.refinement import Refinement
from mvr.operators.codecs.residual import Residual
from mvr.operators.codecs.scalar import Float16, Int8

# A codec or transform family is one entry here: its class names it (``family``) and says
# whether its name takes a parameter, with the one examples show (``example_arg``).
FAMILIES: dict[str, type[Codec]] = {c.family: c for c in (Float16, Int8, Residual, PQ)}
TRANSFORMS: dict[str, type[Transform]] = {PCA.family: PCA}
# codecs of what another codec's codes miss, trained given it (the first_m group's)
REFINEMENTS: dict[str, type[Codec]] = {Refinement.family: Refinement}


def _example(cls: type[Codec] | type[Transform]) -> str:
    return cls.family if cls.example_arg is None else f"{cls.family}-{cls.example_arg}"


EXAMPLES = (*map(_example, FAMILIES.values()), f"{_example(PCA)}+{_example(Residual)}")


def parse_name(name: str) -> list[tuple[str, Optional[int]]]:
    """``"pca-128+residual-2"`` → [("pca", 128), ("residual", 2)]: at most one transform,
    then exactly one codec. ValueError naming what is wrong otherwise."""
    parts = [p.strip() for p in str(name).split("+")]
    out: list[tuple[str, Optional[int]]] = []
    for i, part in enumerate(parts):
        family, _, arg = part.partition("-")
        known = TRANSFORMS if i < len(parts) - 1 else FAMILIES
        if family not in known:
            what = "a transform (" + ", ".join(TRANSFORMS) + ")" if known is TRANSFORMS else "a codec (" + ", ".join(FAMILIES) + ")"
            raise ValueError(f"unknown codec {name!r}: {part!r} is not {what}; e.g. {', '.join(EXAMPLES)}")
        if known[family].example_arg is not None:
            if not arg.isdigit() or int(arg) < 1:
                raise ValueError(f"unknown codec {name!r}: {family} takes a positive integer, e.g. {_example(known[family])}")
            if family == "residual" and int(arg) not in Residual.NBITS:
                raise ValueError(f"unknown codec {name!r}: residual-N takes N bits a value, one of {', '.join(map(str, Residual.NBITS))}")
            out.append((family, int(arg)))
        else:
            if arg:
                raise ValueError(f"unknown codec {name!r}: {family} takes no parameter")
            out.append((family, None))
    if len(out) > 2:
        raise ValueError(f"unknown codec {name!r}: at most one transform before the codec")
    return out


def train(name: str, sample: np.ndarray, seed: int = 0, **options: Any) -> Codec:
    """Train codec ``name`` on ``sample`` ((n, d) float vectors). ``options``:
    ``n_vectors`` (collection size: the residual codebook's default size), ``n_centroids``,
    ``niter`` (k-means iterations; residual 4, ColBERTv2's; PQ FAISS's 25), ``gpu`` (None: when FAISS sees GPUs),
    ``normalize`` (None: when the sample is unit vectors), ``center`` (PCA, False),
    ``centroids`` (a residual codebook to reuse, in the codec's input space)."""
    stages = parse_name(name)
    x = np.ascontiguousarray(sample, dtype=np.float32)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"train {name}: the sample must be a non-empty (n, d) matrix, got shape {x.shape}")
    transform = None
    if len(stages) == 2:
        (tf, targ), stages = stages[0], stages[1:]
        transform = TRANSFORMS[tf].fit(targ, x, seed=seed, **options)
        x = transform.apply(x)
    family, arg = stages[0]
    codec = FAMILIES[family].fit(arg, x, seed=seed, **options)
    return Composed(transform, codec) if transform is not None else codec


def train_refinement(name: str, sample: np.ndarray, anchor: Codec, seed: int = 0) -> Codec:
    """Train the first_m group's ``refine-M`` on ``sample`` (the token codec's own sample,
    (n, d) unit vectors) given the trained token codec ``anchor`` (``Refinement.fit``)."""
    m = parse_first_m(name)
    if m is None:
        raise ValueError(f"first-m codec {name!r} trains nothing: first-m vectors are then coded by the pooled group's codec")
    return Refinement.fit(m, sample, seed=seed, anchor=anchor)


def bytes_per_vector(name: str, dim: int, n_vectors: Optional[int] = None, n_centroids: Optional[int] = None) -> int:
    """Bytes a vector of ``dim`` dims takes under codec ``name`` without training it (a
    residual codec's id width follows from ``n_centroids`` or ``default_centroids(n_vectors)``)."""
    stages = parse_name(name)
    if len(stages) == 2:
        dim = int(stages[0][1])  # type: ignore[arg-type]
    family, arg = stages[-1]
    return int(FAMILIES[family].spec_bytes(arg, dim, n_vectors=n_vectors, n_centroids=n_centroids))


AUTO = "auto"
UNTRAINED = ("float16", "int8")  # codecs that learn nothing from a sample (only its dimension)


def resolve_name(name: str, dim: int, group: str = "tokens") -> str:
    """The codec ``name`` stands for at ``dim`` dimensions in codec ``group`` (``GROUPS``:
    ``storage/codec_file.py``'s tokens or pooled); for the pooled group ``auto`` is
    ``pooled_default(dim)``. For tokens ``auto`` is chosen by quality first,
    bytes second (docs/codecs.md, "The default"): exact MaxSim from the codes within 0.01
    nDCG@10 of float vectors on msmarco-sample, dbpedia-sample and cranfield over three
    training seeds. The loss is the PCA's dimension, not the residual bits: PCA alone to 64
    dims lost 0.022 on cranfield, to 128 dims 0.010, to 192 dims nothing measurable; 1-bit
    residuals after it cost little. So:

    - above ``AUTO_PCA_DIM`` (192) dimensions: ``pca-192+residual-1`` (26 B a vector);
    - above 128 up to 192: ``residual-1`` at the full dimension (2 + dim/8 B);
    - at 128 or fewer: ColBERTv2's ``residual-2`` (2 + dim/4 B; a ColBERT checkpoint's 128
      dims: 34 B).

    Any other name is itself. ``choose`` then checks that the training sample can train it."""
    if group not in GROUPS:
        raise ValueError(f"codec group {group!r}: choose one of {', '.join(GROUPS)}")
    if group == "first_m":
        return first_m_default(dim) if name == AUTO else name
    if name != AUTO:
        return name
    if group == "pooled":
        return pooled_default(dim)
    if dim > AUTO_PCA_DIM:
        return f"pca-{AUTO_PCA_DIM}+residual-1"
    return full_dimension_default(dim)


def full_dimension_default(dim: int) -> str:
    """``auto``'s codec without a PCA at ``dim`` dimensions: ``residual-1`` above 128,
    ``residual-2`` at 128 or fewer. It trains on a sample of any size (the codebook is at most
    the sample's k-means rows: ``residual_centroids``)."""
    return "residual-1" if dim > 128 else "residual-2"


AUTO_PCA_DIM = 192  # the PCA dimension of ``auto`` for wider models (docs/codecs.md)
# codec groups (storage/codec_file.py): the token vectors; pooled, centroids (and first-m
# without a refinement); the first-m refinement of the token codes
GROUPS = ("tokens", "pooled", "first_m")
POOLED_FALLBACK = "int8"  # the pooled group's codec when its sample cannot train ``auto``'s (untrained)
# the first_m group's "no refinement": first-m vectors in a column of their own, in the pooled
# group's codec (every index before the refinement)
FIRST_M_IN_POOLED = "pooled"


def first_m_default(dim: int) -> str:
    """``auto`` for the first_m group at ``dim`` dimensions: ``refine-{dim/4}``, a product code
    of 4-dimension sub-vectors of what the token codes miss (96 B at MiniLM's 384 dims;
    docs/codecs.md, "First-m as a refinement of the token codes": the smallest whose mean over
    three seeds stays within 0.004 nDCG@10 of float16 on the three shared collections);
    ``FIRST_M_IN_POOLED`` at a dimension 4 does not divide."""
    return f"refine-{dim // 4}" if dim >= 4 and dim % 4 == 0 else FIRST_M_IN_POOLED


def parse_first_m(name: str) -> Optional[int]:
    """The first_m group's setting ``name`` → M of ``refine-M``, or None for
    ``FIRST_M_IN_POOLED`` (``auto`` is resolved before). ValueError naming the choices otherwise."""
    if name == FIRST_M_IN_POOLED:
        return None
    family, _, arg = str(name).partition("-")
    if family != Refinement.family or not arg.isdigit() or int(arg) < 1:
        raise ValueError(f"first-m codec {name!r}: choose {AUTO}, {FIRST_M_IN_POOLED} (a column in the pooled group's codec) or refine-M (e.g. refine-96)")
    return int(arg)


def pooled_default(dim: int) -> str:
    """``auto`` for the pooled group (pooled and centroid vectors, and first-m without a
    refinement, each scored against the pooled query vector) at ``dim`` dimensions:
    ``pq-{dim/2}``, a FAISS product quantizer of 2-dimension sub-vectors (dim / 2 B a vector,
    half of ``int8``'s dim + 4), for an even ``dim``; ``int8`` otherwise. The default since
    2026-12-01 (``int8`` before). Measured as the token codec was (docs/codecs.md,
    "pq-192 for pooled and centroids"): exact softmax-centroid and pooled nDCG@10 on the three shared
    collections over three training seeds, and the pipeline's own indexes exact and ANN. On
    cranfield and msmarco-sample it stays within 0.004 of ``int8`` on every seed and kind,
    where ``residual-4`` and ``pq-128`` do not; dbpedia-sample's 40 queries resolve 0.005
    no better than their paired standard error (docs/codecs.md has the figures)."""
    return f"pq-{dim // 2}" if dim >= 2 and dim % 2 == 0 else POOLED_FALLBACK


# A PCA to D dimensions is trained on at least PCA_MIN_VECTORS_PER_DIM × D sample vectors. A
# sample of n vectors spans at most n dimensions: below D the PCA's last directions are
# arbitrary (FAISS fails below D / 2: ``PCA.fit`` says so), and near D they are the sample's
# noise; twice D leaves a margin. It is not a measured knee (docs/codecs.md, "A sample
# too small", benchmarks/small_sample_codecs.py): on msmarco-sample pca-192 alone kept 0.81 of
# exact MaxSim's top 10 over 300 documents outside a sample of 201-333 vectors, 0.84 of 413,
# 0.87 of 1,959, 0.90 of 5,339 and more; the fallback, residual-1 at the full dimension, was
# ahead of pca-192+residual-1 at every size (by 0.03-0.12), so it costs bytes, not quality.
PCA_MIN_VECTORS_PER_DIM = 2
PQ_MIN_VECTORS = PQ.MIN_VECTORS  # pq-M


def min_sample(name: str) -> int:
    """Training-sample vectors a codec ``name`` (resolved, not ``auto``) needs: ``pca-D``
    ``PCA_MIN_VECTORS_PER_DIM``·D, ``pq-M`` ``PQ_MIN_VECTORS``, the larger of the two for a
    composition; 1 for float16, int8 and residual-N (whose codebook shrinks to the sample)."""
    need = 1
    for family, arg in parse_name(name):
        if family == "pca":
            need = max(need, PCA_MIN_VECTORS_PER_DIM * int(arg))  # type: ignore[arg-type]
        elif family == "pq":
            need = max(need, PQ_MIN_VECTORS)
    return need


@dataclass(frozen=True)
class CodecChoice:
    """The codec an index trains for a configured name: ``name`` (what is trained and recorded
    in the manifest), ``asked`` (the configured name, e.g. ``auto``), ``resolved``
    (``resolve_name(asked, dim)``: what ``asked`` stands for with a large enough sample) and
    ``reason`` ('' when ``name`` is ``resolved``; else why the sample could not train it)."""

    name: str
    asked: str
    resolved: str
    reason: str = ""

    @property
    def fell_back(self) -> bool:
        """Whether the sample was too small for ``resolved``."""
        return self.name != self.resolved

    def describe(self) -> str:
        """``name``, and when it is a fallback, what was asked and why: a log line's part."""
        if not self.fell_back:
            return self.name
        asked = self.asked if self.asked == self.resolved else f"{self.asked} ({self.resolved})"
        return f"{self.name} instead of {asked}: {self.reason}"


def choose(name: str, dim: int, n_sample: int, group: str = "tokens") -> CodecChoice:
    """The codec a sample of ``n_sample`` vectors of ``dim`` dimensions trains for the
    configured ``name`` in codec ``group`` (docs/codecs.md, "A sample too small"):
    ``resolve_name(name, dim, group)`` when the sample is large enough for it
    (``min_sample``), else a fallback it can train. In the pooled group the fallback is
    ``POOLED_FALLBACK`` (int8); in the tokens group:

    - ``pca-D+C`` (``auto``'s ``pca-192+residual-1`` included): C at the full dimension, no
      PCA. Not a narrower PCA: measured on msmarco-sample (benchmarks/small_sample_codecs.py),
      residual-1 at 384 dimensions kept more of exact MaxSim's top 10 than pca-D+residual-1
      for D = 16, 32, 64, 128 and 192 and samples of 77 to 16,028 vectors (the first 1 to 200
      documents), ranking 300 documents outside the sample (what ``mvr add`` codes with the
      same codec files); on cranfield's whole collection it is as good as
      ``pca-192+residual-1`` (+0.0035 against +0.0032 nDCG@10). It costs more bytes (49
      against 26 a vector), a few kilobytes for a corpus this small.
    - ``pq-M`` (or a C the sample cannot train either): ``full_dimension_default(dim)``.

    ValueError for a name ``parse_name`` refuses, one that cannot apply at ``dim`` whatever
    the sample (a PCA to more than ``dim`` dimensions, ``pq-M`` with M not dividing its input
    dimension), or an empty sample."""
    resolved = resolve_name(name, dim, group)
    if group == "first_m":
        return _choose_first_m(name, resolved, dim, n_sample)
    need = min_sample(resolved)
    inner_dim = dim
    for family, arg in parse_name(resolved):
        if family == "pca":
            if not 1 <= int(arg) <= dim:  # type: ignore[arg-type]
                raise ValueError(f"codec {name}: pca-{arg}: output dimension must be 1..{dim}")
            inner_dim = int(arg)  # type: ignore[arg-type]
        elif family == "pq" and inner_dim % int(arg):  # type: ignore[arg-type]
            raise ValueError(f"codec {name}: pq-{arg}: the dimension {inner_dim} is not divisible by {arg}")
    if n_sample < 1:
        raise ValueError(f"codec {name}: no sample vector to train it on")
    if n_sample >= need:
        return CodecChoice(resolved, name, resolved)
    reason = f"the training sample of {n_sample:,} vectors is too small for it (at least {need:,})"
    if group == "pooled":
        return CodecChoice(POOLED_FALLBACK, name, resolved, reason)
    fallback = resolved.split("+", 1)[1] if len(parse_name(resolved)) == 2 else full_dimension_default(dim)
    family, arg = parse_name(fallback)[0]
    if n_sample < min_sample(fallback) or (family == "pq" and dim % int(arg)):  # type: ignore[arg-type]
        fallback = full_dimension_default(dim)
    return CodecChoice(fallback, name, resolved, reason)


def choose_first_m(name: str, dim: int, n_sample: int, tokens: str, pooled: str, pool_factor: int = 1) -> CodecChoice:
    """The first_m group's codec for the setting ``name`` (docs/codecs.md, "First-m as a
    refinement of the token codes"): ``choose(name, dim, n_sample, "first_m")``, except where
    first-m cannot be read from the token codes and keeps a column in the pooled group's codec
    (``FIRST_M_IN_POOLED``, with the reason): a token codec (``tokens``, the chosen name) that
    learns nothing (float16, int8: nothing to refine), token pooling (``pool_factor`` > 1: the
    stored vectors are not the first m) or a ``pooled`` codec with a transform (the pooled
    query vector, which first-m is scored against, is then in another space). The one rule
    ``mvr index`` and ``mvr plan`` follow."""
    choice = choose(name, dim, n_sample, "first_m")
    reason = ""
    if tokens in UNTRAINED:
        reason = f"the token codec {tokens} leaves nothing to refine"
    elif pool_factor > 1:
        reason = f"token pooling (pool_factor {pool_factor}) stores no first m token vectors"
    elif len(parse_name(pooled)) > 1:
        reason = f"the pooled codec {pooled} scores first-m in its own space"
    if reason and choice.name != FIRST_M_IN_POOLED:
        return CodecChoice(FIRST_M_IN_POOLED, name, choice.resolved, reason)
    return choice


def _choose_first_m(name: str, resolved: str, dim: int, n_sample: int) -> CodecChoice:
    """``choose`` for the first_m group: ``refine-M`` when M divides ``dim`` and the sample
    has ``PQ_MIN_VECTORS``, else ``FIRST_M_IN_POOLED``."""
    m = parse_first_m(resolved)
    if m is None:
        return CodecChoice(resolved, name, resolved)
    if dim % m:
        raise ValueError(f"first-m codec {name}: refine-{m}: the dimension {dim} is not divisible by {m}")
    if n_sample >= PQ_MIN_VECTORS:
        return CodecChoice(resolved, name, resolved)
    reason = f"the training sample of {n_sample:,} vectors is too small for it (at least {PQ_MIN_VECTORS:,})"
    return CodecChoice(FIRST_M_IN_POOLED, name, resolved, reason)
