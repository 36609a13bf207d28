"""Per-partition search: scoring (MaxSim, first-m, softmax-centroid), stored vectors, the partition, candidates, ranking, fusion, BM25 and the filter language."""
