"""Tokenizer conventions: passages, windows over long documents, ColBERT markers and [MASK]."""

import numpy as np
import pytest

from mvr.operators.encode.tokenizer import PassageTokenizer


def test_short_document_matches_plain_truncated_tokenization(minilm_tokenizer):
    t = PassageTokenizer(minilm_tokenizer)
    [p] = t.split(["d"], ["Title"], ["A short passage, with punctuation."])
    expected = minilm_tokenizer("Title A short passage, with punctuation.", max_length=256, truncation=True)["input_ids"]
    assert p.input_ids.tolist() == expected
    assert p.text == "Title A short passage, with punctuation."
    assert t.split([], [], []) == []


def test_long_document_becomes_overlapping_windows(minilm_tokenizer):
    text = " ".join(f"word{i}" for i in range(400))
    t = PassageTokenizer(minilm_tokenizer, passage_tokens=64, stride_tokens=48)
    passages = t.split(["long"], [""], [text])
    content = minilm_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(passages) > 3
    assert [p.passage_idx for p in passages] == list(range(len(passages)))
    covered = []
    for p in passages:
        assert len(p.input_ids) <= 64 and p.input_ids[0] == minilm_tokenizer.cls_token_id
        assert p.text in text and p.text == text[p.char_start : p.char_end]
        covered.append(p.input_ids[1:-1].tolist())
    # windows start every 48 tokens, the last one ends exactly at the end
    assert covered[0] == content[:62] and covered[1] == content[48:110]
    assert covered[-1] == content[-62:]
    assert set(sum(covered, [])) == set(content)
    truncated = PassageTokenizer(minilm_tokenizer, passage_tokens=64, split_long_documents=False).split(["long"], [""], [text])
    assert len(truncated) == 1 and truncated[0].input_ids.tolist() == minilm_tokenizer(text, max_length=64, truncation=True)["input_ids"]


def test_colbert_markers_augmentation_and_skiplist(minilm_tokenizer):
    t = PassageTokenizer(minilm_tokenizer, query_marker="[unused0]", document_marker="[unused1]", query_augmentation=True, skip_punctuation=True)
    [q] = t.queries(["what is a thermometer?"])
    ids = minilm_tokenizer.convert_ids_to_tokens(q.tolist())
    assert len(q) == 32 and ids[:2] == ["[CLS]", "[unused0]"]
    assert ids[-1] == "[MASK]" and ids.count("[SEP]") == 1
    [p] = t.split(["d"], [""], ["Hello, world."])
    toks = minilm_tokenizer.convert_ids_to_tokens(p.input_ids.tolist())
    assert toks[:2] == ["[CLS]", "[unused1]"]
    keep = t.keep_mask(p.input_ids)
    assert [tok for tok, k in zip(toks, keep) if not k] == [",", "."]
    with pytest.raises(ValueError, match="not in the tokenizer"):
        PassageTokenizer(minilm_tokenizer, query_marker="[NOT-A-TOKEN]")
    assert np.all(PassageTokenizer(minilm_tokenizer).keep_mask(p.input_ids))


def test_text_prefixes_skiplist_and_expansion_attention(minilm_tokenizer):
    """PyLate's conventions: a prompt before queries and passages, a skiplist of tokens, and
    [MASK] padding that is (or is not) attended to."""
    t = PassageTokenizer(
        minilm_tokenizer,
        passage_tokens=16,
        stride_tokens=8,
        query_tokens=12,
        query_marker="[unused0]",
        document_marker="[unused1]",
        query_text_prefix="search: ",
        document_text_prefix="passage: ",
        query_augmentation=True,
        skiplist=["the", ","],
    )
    [q], [att] = t.query_inputs(["what is the answer"])
    toks = minilm_tokenizer.convert_ids_to_tokens(q.tolist())
    assert toks == ["[CLS]", "[unused0]", "search", ":", "what", "is", "the", "answer", "[SEP]", "[MASK]", "[MASK]", "[MASK]"]
    assert att.tolist() == [1] * 9 + [0] * 3 and t.queries(["what is the answer"])[0].tolist() == q.tolist()
    attended = PassageTokenizer(minilm_tokenizer, query_tokens=12, query_augmentation=True, attend_to_expansion_tokens=True)
    assert attended.query_inputs(["what is the answer"])[1][0].tolist() == [1] * 12
    [long_q], _ = t.query_inputs([" ".join(["word"] * 40)])
    assert len(long_q) == 12 and minilm_tokenizer.convert_ids_to_tokens(long_q.tolist())[-1] == "[SEP]"
    text = "The cat, the dog and the bird sat on the mat while the sun was shining over the quiet town"
    passages = t.split(["d"], [""], [text])
    assert len(passages) > 1
    for p in passages:
        toks = minilm_tokenizer.convert_ids_to_tokens(p.input_ids.tolist())
        assert toks[:4] == ["[CLS]", "[unused1]", "passage", ":"] and len(toks) <= 16
        assert p.text == text[p.char_start : p.char_end] and not p.text.startswith("passage")
        dropped = [tok for tok, k in zip(toks, t.keep_mask(p.input_ids)) if not k]
        assert set(dropped) <= {"the", ","} and dropped.count("the") == toks.count("the")
    with pytest.raises(ValueError, match="no room"):
        PassageTokenizer(minilm_tokenizer, query_tokens=4, query_marker="[unused0]", query_text_prefix="search: ").queries(["x"])


def test_added_marker_token_as_pylate_saves_it():
    """PyLate's "[Q] " / "[D] " prefixes are tokens it adds to the vocabulary; a tokenizer
    saved with them resolves the marker to the added id."""
    from mvr.operators.encode.checkpoint import load_tokenizer

    tok = load_tokenizer("minilm")
    tok.add_tokens(["[Q] ", "[D] "])
    t = PassageTokenizer(tok, query_marker="[Q] ", document_marker="[D] ")
    assert t.queries(["hello"])[0].tolist()[:2] == [tok.cls_token_id, tok.convert_tokens_to_ids("[Q] ")]
    assert t.split(["d"], [""], ["hello"])[0].input_ids.tolist()[1] == tok.convert_tokens_to_ids("[D] ") >= tok.vocab_size
