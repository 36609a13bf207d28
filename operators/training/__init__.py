"""Training examples and the loss: (query, positive, negatives) pairs from labelled data or any corpus, and the contrastive loss over a search mode's differentiable scores."""
