"""Text to vectors: corpus validation, tokenizer, checkpoint loading, the encoder, token pooling, compression of a passage's vectors, and query encoding."""
