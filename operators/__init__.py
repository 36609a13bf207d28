"""Per-batch parts on numpy / torch / pyarrow (no Ray), by stage, in the words of ``pipeline/``:

- ``encode/``: text → vectors (validation, tokenizer, checkpoint, encoder, token pooling,
  compression of a passage's vectors, query encoding);
- ``codecs/``: compressed codes for stored vectors;
- ``ann/``: the ANN first stage (interface, light defaults, FAISS IVFPQ, ScaNN, factory);
- ``retrieval/``: per-partition search (scoring, stored vectors, partition, candidates,
  ranking, fusion, BM25, the filter language);
- ``planning/``: the capacity plan (``mvr plan``);
- ``packed``: ragged arrays (one flat array and offsets), used by every stage.

OpenMP threads sleep instead of spinning when idle (``OMP_WAIT_POLICY=PASSIVE``, unless the
environment says otherwise): torch, FAISS and BLAS each keep a thread pool, and in one
process (in-process search: encode, then ANN, then rescoring) each pool's spinning threads
took the cores from the next; a query's encoding went from ~20 ms to ~110 ms on 2 cores
(``benchmarks/serve_load.py`` measures the in-process path). Set before torch or faiss load.

FAISS's bundled OpenBLAS runs the kernels of this CPU's instruction set
(``OPENBLAS_CORETYPE``, unless the environment says otherwise; ``openblas.py``): on a CPU newer
than that OpenBLAS it otherwise falls back to SSE3 kernels, several times slower. Set before
faiss loads (every FAISS import in mvr is under ``mvr.operators``).
"""

import os

from mvr.operators.openblas import choose_core_type

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
choose_core_type()
