"""Codec names → classes: parse a name, train a codec, size one without training."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from mvr.operators.codecs.base import Codec
from mvr.operators.codecs.quantizers import PCA, PQ, Composed
from mvr.operators.codecs.residual import Residual
from mvr.operators.codecs.scalar import Float16, Int8


FAMILIES: dict[str, type] = {c.family: c for c in (Float16, Int8, Residual, PQ)}
TRANSFORMS: dict[str, type] = {PCA.family: PCA}
_TAKES_ARG = {"float16": False, "int8": False, "residual": True, "pq": True, "pca": True}
EXAMPLES = ("float16", "int8", "residual-2", "pq-48", "pca-128+residual-2")


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
        if _TAKES_ARG[family]:
            if not arg.isdigit() or int(arg) < 1:
                raise ValueError(f"unknown codec {name!r}: {family} takes a positive integer, e.g. {family}-{ {'residual': 2, 'pq': 48, 'pca': 128}[family] }")
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


def resolve_name(name: str, dim: int) -> str:
    """The codec ``name`` stands for at ``dim`` dimensions; ``auto`` is chosen by quality first,
    bytes second (docs/codecs.md, "The default"): exact MaxSim from the codes within 0.01
    nDCG@10 of float vectors on msmarco-sample, dbpedia-sample and cranfield over three
    training seeds. The loss is the PCA's dimension, not the residual bits: PCA alone to 64
    dims lost 0.022 on cranfield, to 128 dims 0.010, to 192 dims nothing measurable; 1-bit
    residuals after it cost little. So:

    - above ``AUTO_PCA_DIM`` (192) dimensions: ``pca-192+residual-1`` (26 B a vector);
    - above 128 up to 192: ``residual-1`` at the full dimension (2 + dim/8 B);
    - at 128 or fewer: ColBERTv2's ``residual-2`` (2 + dim/4 B; a ColBERT checkpoint's 128
      dims: 34 B).

    Any other name is itself."""
    if name != AUTO:
        return name
    if dim > AUTO_PCA_DIM:
        return f"pca-{AUTO_PCA_DIM}+residual-1"
    return "residual-1" if dim > 128 else "residual-2"


AUTO_PCA_DIM = 192  # the PCA dimension of ``auto`` for wider models (docs/codecs.md)
