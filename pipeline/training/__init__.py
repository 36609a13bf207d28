"""`mvr train` on Ray Train: pairs from a corpus or labelled data (Ray Data), hard negatives from an mvr index, the training loop (TorchTrainer), and the checkpoint it writes."""
