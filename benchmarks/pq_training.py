"""How FAISS trains the product quantizers mvr uses (``operators/codecs/quantizers.py PQ.fit``):
seconds and squared error of each way, side by side on one index's vectors (docs/codecs.md,
"pq-192 for pooled and centroids").

    python benchmarks/pq_training.py --index /tmp/f16/dbpedia-sample [--codecs pq-192,pq-96] [--samples 8192,65536]

The index must store both vector groups as float16 (``mvr index CORPUS INDEX --codec float16
--pooled-codec float16``). For each codec and sample size (token vectors drawn with seed 0),
four ways: FAISS's sequential k-means assignment below ``distance_compute_blas_threshold`` or
BLAS for every assignment (``blas_assignment``, what ``PQ.fit`` does), each on FAISS's 256
sample points a centroid or 64 (what ``PQ.fit`` uses at 2-dimension sub-vectors). Errors: the
mean squared error of 20,000 held-out token vectors and of the index's centroid vectors. Times
are wall-clock on whatever else the machine runs: run it alone."""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np

from mvr.operators.codecs.quantizers import blas_assignment
from mvr.storage.codec_file import load_codecs
from mvr.storage.manifest import load_manifest
from mvr.storage.partitions import exact_partition


def train(x: np.ndarray, m: int, blas: bool, points: int) -> tuple[faiss.ProductQuantizer, float]:
    """A seeded FAISS PQ of ``m`` sub-quantizers trained on ``x`` one way; (pq, seconds)."""
    pq = faiss.ProductQuantizer(x.shape[1], m, 8)
    pq.cp.seed, pq.cp.min_points_per_centroid, pq.cp.max_points_per_centroid = 0, 1, points
    t = time.perf_counter()
    if blas:
        with blas_assignment():
            pq.train(x)
    else:
        pq.train(x)
    return pq, time.perf_counter() - t


def mse(pq: faiss.ProductQuantizer, x: np.ndarray) -> float:
    return float(((pq.decode(pq.compute_codes(x)) - x) ** 2).sum(1).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", required=True, help="a float16 mvr index")
    p.add_argument("--codecs", default="pq-192,pq-96")
    p.add_argument("--samples", default="8192,65536")
    args = p.parse_args()
    manifest = load_manifest(args.index)
    codec_set = load_codecs(args.index, manifest.codecs)
    tokens = exact_partition(args.index, manifest, "tokens", codec_set).vectors
    centroids = exact_partition(args.index, manifest, "centroids", codec_set).vectors
    cvec = centroids.decode(np.arange(centroids.n_vectors))
    perm = np.random.default_rng(0).permutation(tokens.n_vectors)
    held = tokens.decode(np.sort(perm[-20_000:]))
    print("| codec | sample | assignment | points a centroid | train s | held-out token MSE | centroid MSE |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for name in args.codecs.split(","):
        m = int(name.split("-")[1])
        for n in (int(s) for s in args.samples.split(",")):
            x = tokens.decode(np.sort(perm[:n]))
            for blas in (False, True):
                for points in (256, 64):
                    pq, secs = train(x, m, blas, points)
                    way = "BLAS" if blas else "FAISS's default"
                    print(f"| {name} | {n:,} | {way} | {points} | {secs:.1f} | {mse(pq, held):.5f} | {mse(pq, cvec):.5f} |", flush=True)


if __name__ == "__main__":
    main()
