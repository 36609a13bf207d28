# vulture's whitelist (tests/test_lint.py: vulture --min-confidence 80): names only a caller
# outside mvr's code passes by name, so vulture cannot see them used. Read by vulture, never run.
conventions_source  # PassageTokenizer(**TokenizerConfig.model_dump()): a keyword the configuration records (operators/encode/tokenizer.py)
conventions_from_checkpoint  # the same
leave_progress  # bm25s.BM25.build_index_from_tokens's signature, which the override keeps (operators/retrieval/bm25.py)
show_progress  # the same
