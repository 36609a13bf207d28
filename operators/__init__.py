"""Per-batch parts on numpy / torch / pyarrow (no Ray).

OpenMP threads sleep instead of spinning when idle (``OMP_WAIT_POLICY=PASSIVE``, unless the
environment says otherwise): torch, FAISS and BLAS each keep a thread pool, and in one
process (in-process search: encode, then ANN, then rescoring) each pool's spinning threads
took the cores from the next; a query's encoding went from ~20 ms to ~110 ms on 2 cores
(``benchmarks/serve_load.py`` measures the in-process path). Set before torch or faiss load.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
