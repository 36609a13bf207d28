"""The indexing graph: corpus → tokenize → encode → compress → Parquet shards, and the jobs that change a committed index (ANN and BM25 builds, adds, deletes, compaction)."""
