"""The ANN factory, above the backends: ``make_index`` (a new index of a backend, its
defaults sized to the data) and ``load_index`` (a saved index of any backend, dispatching on
its ``ann.json``). A backend is imported when first asked for, so a FAISS user need not load
ScaNN; the backends import only ``base`` and ``defaults``, never this module."""

from __future__ import annotations

from typing import Any

from mvr.operators.ann.base import AnnIndex, read_meta

BACKENDS = ("faiss-ivfpq", "scann", "codec-ivf")


def make_index(backend: str, dim: int, n_vectors: int, **params: Any) -> AnnIndex:
    """New untrained index for about ``n_vectors`` (dim)-dimensional vectors.

    ``params`` override the size-based defaults (see each backend's ``default_params``);
    an unknown parameter raises ValueError."""
    return backend_class(backend).create(dim, n_vectors, **params)


def load_index(directory: str) -> AnnIndex:
    """Open a saved index of any backend (dispatches on ``ann.json``)."""
    return backend_class(read_meta(directory)["backend"]).load(directory)


def backend_class(backend: str) -> type[AnnIndex]:
    """The class of ``backend`` (imported now); ValueError naming the backends otherwise."""
    if backend == "faiss-ivfpq":
        from mvr.operators.ann.ivfpq import FaissIVFPQIndex

        return FaissIVFPQIndex
    if backend == "scann":
        from mvr.operators.ann.scann_index import ScannIndex

        return ScannIndex
    if backend == "codec-ivf":
        from mvr.operators.ann.codec_ivf import CodecIVFIndex

        return CodecIVFIndex
    raise ValueError(f"unknown ANN backend {backend!r}; choose one of {list(BACKENDS)}")
