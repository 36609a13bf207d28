"""Token-vector codecs: compressed codes for stored vectors, trained on a sample, chosen by name.

A codec maps (n, dim_in) float vectors to (n, bytes_per_vector) uint8 codes and back to
(n, dim_out) float32 vectors, a whole batch at a time (no Python loop per vector). It is
trained once on a sample (``train(name, sample, seed=…)``), serialised to bytes
(``to_bytes(codec)`` / ``from_bytes``, module ``serial``; files: ``storage/codec_file.py``)
and then encodes and
decodes any number of batches. Names (the registry, ``FAMILIES``):

| name | bytes / vector | what it stores |
| --- | --- | --- |
| ``float16`` | 2·d | IEEE half floats (the reference; schema v1 shards store this) |
| ``int8`` | d + 4 | per vector a float32 scale s = max|x|/127 and round(x/s) as int8 |
| ``residual-N`` (N = 1, 2, 4, 8) | id + d·N/8 | ColBERTv2: nearest centroid id (uint8/16/32) and the residual, N bits a value |
| ``pq-M`` | M | FAISS product quantizer codes, M sub-quantizers of 8 bits (d divisible by M) |
| ``pca-D+C`` | those of C at d = D | dimension reduction fitted on the sample (``faiss.PCAMatrix``), then codec C |
| ``refine-M`` | M | first-m only: a product code of what the token codes miss (``refinement``), read with them |

The decoded vectors live in the codec's output space (dimension ``dim_out``): score a query
against them after ``project(query_vectors)`` (the PCA when there is one; a float32 copy
otherwise). When the training sample is unit vectors (as stored token vectors are), the
codec records ``normalize`` and PCA outputs and residual / PQ decodes are rescaled to unit
length, as ColBERT does; ``project`` does the same to queries, so MaxSim stays a sum of
cosines.

Determinism: training is seeded (k-means, PQ, the held-out split); the same sample and seed
give byte-identical ``to_bytes``, and encoding the same batch twice gives identical codes.
Encoding in blocks of any size gives the same codes. Nearest-centroid search uses FAISS
(BLAS), so a vector equidistant (to rounding) from two centroids may get either id on
another machine or BLAS build; FAISS's GPU k-means is not bit-identical to its CPU one.

File format (``to_bytes(codec)``): ``MVRCODEC`` magic, uint32 format version, uint64 header length,
a JSON header (sorted keys: name, dimensions, bytes per vector, per stage its family and
parameters, and each array's dtype, shape, offset and size), the arrays' little-endian bytes
back to back, and a sha256 of everything before it (32 bytes). A truncated or corrupted file
is refused with a ``CodecFileError`` (a ValueError) naming the file.

Modules: ``base`` (the ``Codec`` / ``Transform`` interface), ``scalar`` (float16, int8),
``residual``, ``quantizers`` (PQ, PCA, composition), ``refinement`` (first-m's refinement
of the token codes), ``registry`` (names, ``train``; ``choose``:
the codec a training sample too small for the name asked for falls back to),
``serial`` (the file format). ``docs/codecs.md`` has the measured quality of each.
"""

from __future__ import annotations

from mvr.operators.codecs.base import (
    BLOCK,
    HELDOUT_FRACTION,
    UNIT_TOLERANCE,
    Codec,
    CodecFileError,
    Transform,
    default_centroids,
    id_dtype,
    is_unit,
    residual_centroids,
)
from mvr.operators.codecs.quantizers import PCA, PQ, Composed
from mvr.operators.codecs.refinement import Refined, Refinement
from mvr.operators.codecs.registry import (
    AUTO,
    AUTO_PCA_DIM,
    EXAMPLES,
    FAMILIES,
    FIRST_M_IN_POOLED,
    GROUPS,
    PCA_MIN_VECTORS_PER_DIM,
    POOLED_FALLBACK,
    PQ_MIN_VECTORS,
    REFINEMENTS,
    TRANSFORMS,
    UNTRAINED,
    CodecChoice,
    bytes_per_vector,
    choose,
    choose_first_m,
    first_m_default,
    full_dimension_default,
    min_sample,
    parse_first_m,
    parse_name,
    pooled_default,
    resolve_name,
    train,
    train_refinement,
)
from mvr.operators.codecs.residual import Residual
from mvr.operators.codecs.scalar import Float16, Int8
from mvr.operators.codecs.serial import FORMAT_VERSION, MAGIC, from_bytes, to_bytes

__all__ = [
    "AUTO",
    "AUTO_PCA_DIM",
    "BLOCK",
    "EXAMPLES",
    "FAMILIES",
    "FIRST_M_IN_POOLED",
    "FORMAT_VERSION",
    "GROUPS",
    "HELDOUT_FRACTION",
    "MAGIC",
    "PCA_MIN_VECTORS_PER_DIM",
    "POOLED_FALLBACK",
    "PQ_MIN_VECTORS",
    "REFINEMENTS",
    "TRANSFORMS",
    "UNIT_TOLERANCE",
    "UNTRAINED",
    "Codec",
    "CodecChoice",
    "CodecFileError",
    "Composed",
    "Float16",
    "Int8",
    "PCA",
    "PQ",
    "Refined",
    "Refinement",
    "Residual",
    "Transform",
    "bytes_per_vector",
    "choose",
    "choose_first_m",
    "default_centroids",
    "first_m_default",
    "from_bytes",
    "full_dimension_default",
    "id_dtype",
    "is_unit",
    "min_sample",
    "parse_first_m",
    "parse_name",
    "pooled_default",
    "residual_centroids",
    "resolve_name",
    "to_bytes",
    "train",
    "train_refinement",
]
