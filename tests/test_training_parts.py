"""The parts of ``mvr train`` that need no Ray and no model: the pairs a corpus gives (Inverse
Cloze Task, title → text) on real text, the evaluation-overlap rule, hard-negative draws, the
batches of a step (a resumed run sees the lost run's batches, and its metrics file the lost
run's lines up to the checkpoint), the contrastive loss against a
direct computation, the conventions a checkpoint is written with (read back by the same
reader ``mvr index`` uses), and the refusals of a run directory."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
import torch

from helpers import read_jsonl
from mvr.operators.encode.checkpoint import load_tokenizer, pylate_config, pylate_conventions
from mvr.operators.training.loss import contrastive_loss, preservation_loss
from mvr.operators.training.order import BatchOrder, pair_lengths
from mvr.operators.training.pairs import MIN_WORDS, ict_pair, overlap, pick_negatives, query_key, sentences, title_pair, unsupervised_pairs
from mvr.pipeline.config import TokenizerConfig, TrainConfig
from mvr.pipeline.training.data import TrainingDataError, check_overlap, jsonl_pairs
from mvr.pipeline.training.loop import keep_metrics_to, pair_token_lengths, total_steps
from mvr.pipeline.training.trainer import prepare_run
from mvr.storage.training_files import read_pairs


@pytest.fixture(scope="module")
def dbpedia_docs(datasets):
    return [(d["_id"], d.get("title", ""), d["text"]) for d in read_jsonl(datasets / "dbpedia-sample" / "corpus.jsonl")[:300]]


def test_ict_pairs_on_real_text(dbpedia_docs):
    pairs = [p for p in unsupervised_pairs(dbpedia_docs, seed=0, kinds=["ict"])]
    assert len(pairs) > 100
    texts = {doc_id: (title, text) for doc_id, title, text in dbpedia_docs}
    for p in pairs:
        title, text = texts[p.positive_id]
        assert p.query in sentences(text) and len(p.query.split()) >= MIN_WORDS
        assert p.query not in p.positive  # the sentence is removed from its passage
        assert p.positive.startswith(title)
        rest = p.positive[len(title) :].split()
        assert len(rest) == len(text.split()) - len(p.query.split())  # and nothing else is
    again = unsupervised_pairs(dbpedia_docs, seed=0, kinds=["ict"])
    assert again == pairs  # a function of the document and the seed
    other = unsupervised_pairs(dbpedia_docs, seed=1, kinds=["ict"])
    assert sum(a.query != b.query for a, b in zip(pairs, other)) > len(pairs) // 4


def test_title_pairs_and_refusals():
    assert title_pair("d", "Keith Urban", "Keith Urban is a country music singer.").query == "Keith Urban"
    assert title_pair("d", "", "a text of enough words here") is None
    assert title_pair("d", "T", "too short") is None
    assert ict_pair("d", "", "One sentence only, with several words.", 0) is None
    assert ict_pair("d", "", "Tiny. Also tiny.", 0) is None


def test_overlap_with_evaluation_queries_is_refused_or_dropped(datasets):
    rows = [
        {"query": " keith  URBAN ", "positive": "x", "positive_id": "a", "source": "title", "negatives": []},
        {"query": "something else entirely", "positive": "y", "positive_id": "b", "source": "ict", "negatives": []},
    ]
    assert overlap([r["query"] for r in rows], ["Keith Urban"]) == [" keith  URBAN "]
    config = TrainConfig.model_validate({"data": {"eval_datasets": [str(datasets / "dbpedia-sample")]}})
    assert "keith urban" in {query_key(q) for q in read_jsonl_queries(datasets / "dbpedia-sample")}
    with pytest.raises(TrainingDataError, match="1 training queries are queries of .*dbpedia-sample.*never train on a test query"):
        check_overlap(rows, config, print)
    config.data.on_overlap = "drop"
    said = []
    assert [r["positive_id"] for r in check_overlap(rows, config, said.append)] == ["b"]
    assert "their 1 pairs left out" in said[0]


def read_jsonl_queries(path) -> list[str]:
    return [q["text"] for q in read_jsonl(path / "queries.jsonl")]


def test_negatives_never_the_positive():
    rng = np.random.default_rng(0)
    ranked = [f"d{i}" for i in range(30)]
    for _ in range(50):
        got = pick_negatives(ranked, "d5", 3, rng, skip=2)
        assert len(got) == 3 and "d5" not in got and not {"d0", "d1"} & set(got)
    assert pick_negatives(["p", "a"], "p", 3, rng) == ["a"]


@pytest.mark.parametrize("grouped", [False, True])
def test_a_resumed_run_sees_the_same_batches(grouped):
    n, batch, workers = 37, 4, 2
    lengths = np.random.default_rng(1).integers(10, 1000, n) if grouped else None
    order = BatchOrder(n, batch, workers, seed=3, lengths=lengths, window=3)
    seen = [order.indices(s, r) for s in range(12) for r in range(workers)]
    again = BatchOrder(n, batch, workers, seed=3, lengths=lengths, window=3)  # a fresh process: nothing cached
    assert all((a == again.indices(s, r)).all() for (s, r), a in zip([(s, r) for s in range(12) for r in range(workers)], seen))
    flat = np.concatenate(seen)
    assert sorted(flat[:n].tolist()) == list(range(n))  # every pair once a pass, workers together
    assert sorted(flat[n : 2 * n].tolist()) == list(range(n))
    assert not (BatchOrder(n, batch, workers, seed=4, lengths=lengths, window=3).indices(0, 0) == seen[0]).all()
    assert total_steps(100, TrainConfig.model_validate({"train": {"batch_size": 10}})) == 10
    if grouped:  # within a window (the first 3 × 4 positions a pass), longest first
        assert (np.diff(lengths[flat[:12]]) <= 0).all()


def test_a_resumed_run_keeps_the_metrics_lines_up_to_its_checkpoint(tmp_path):
    f = tmp_path / "metrics.jsonl"
    keep_metrics_to(f, 0)  # a new run: an empty file
    assert f.read_text() == ""
    f.write_text("".join(json.dumps({"step": s, "loss": 1 / s}) + "\n" for s in range(1, 6)) + '{"step": 6, "lo')  # killed mid-line
    keep_metrics_to(f, 4)  # resumed from step 4's checkpoint: steps 5 and 6 run again
    assert [json.loads(line)["step"] for line in f.read_text().splitlines()] == [1, 2, 3, 4]
    keep_metrics_to(f, 0)  # restarted before its first checkpoint
    assert f.read_text() == ""


def test_length_grouping_cuts_the_padding_of_real_pairs(datasets):
    """On dbpedia-sample's passages (a third with a title as a negative), the padded size of a
    batch (its longest passage × batch size) over the real characters: grouped batches pad
    far less."""
    rows = read_jsonl(datasets / "dbpedia-sample" / "corpus.jsonl")[:1600]
    table = pa.table({"positive": [r["text"] for r in rows], "negatives": [[r["title"]] if i % 3 == 0 else [] for i, r in enumerate(rows)]})
    lengths = pair_lengths(table)
    assert lengths[1] == len(rows[1]["text"]) and lengths[0] == max(len(rows[0]["text"]), len(rows[0]["title"]))
    words = pair_lengths(table, lambda texts: [len(t.split()) for t in texts], chunk=100)
    assert words[1] == len(rows[1]["text"].split()) and len(words) == len(rows)

    def padding(order: BatchOrder) -> float:
        batches = [lengths[order.indices(s, 0)] for s in range(len(rows) // 16)]
        return sum(b.max() * len(b) for b in batches) / sum(b.sum() for b in batches)

    plain, grouped = padding(BatchOrder(len(rows), 16, 1, 0)), padding(BatchOrder(len(rows), 16, 1, 0, lengths))
    assert plain > 1.5 and grouped < 1.1, (plain, grouped)


def test_the_pairs_file_holds_each_pair_s_token_count(tmp_path, datasets):
    """Counted once, when a length-grouped run writes its pairs: the longest of a pair's
    positive and negatives in the base's tokens, as its tokenizer counts one text at a time;
    a pairs file without the counts (grouping off, or written before them) is counted by the
    worker alike."""
    rows = read_jsonl(datasets / "dbpedia-sample" / "corpus.jsonl")[:40]
    data = tmp_path / "pairs.jsonl"
    data.write_text(
        "".join(json.dumps({"query": f"q{i}", "positive": r["text"], "negatives": [rows[i - 1]["text"]] if i % 2 else []}) + "\n" for i, r in enumerate(rows))
    )
    config = TrainConfig.model_validate({"train": {"group_by_length": True}})
    table = read_pairs(str(prepare_run(str(data), str(tmp_path / "grouped"), config, False, print) / "pairs.parquet"))
    tokenizer = load_tokenizer(config.base)

    def count(text: str) -> int:
        return len(tokenizer(text, truncation=True, max_length=config.tokenizer.passage_tokens)["input_ids"])

    expected = [max([count(p), *map(count, negatives)]) for p, negatives in zip(table["positive"].to_pylist(), table["negatives"].to_pylist())]
    assert table["tokens"].to_pylist() == expected and len(set(expected)) > 10
    plain = config.model_copy(update={"train": config.train.model_copy(update={"group_by_length": False})})
    uncounted = read_pairs(str(prepare_run(str(data), str(tmp_path / "plain"), plain, False, print) / "pairs.parquet"))
    assert uncounted["tokens"].null_count == uncounted.num_rows
    assert pair_token_lengths(uncounted, tokenizer, config).tolist() == expected


def test_contrastive_loss_against_a_direct_computation():
    scores = torch.tensor([[3.0, 1.0, 0.5], [0.2, 2.0, 2.5]])
    loss, parts = contrastive_loss(scores, temperature=0.5)
    z = scores / 0.5
    ce = -(z[0, 0] - torch.logsumexp(z[0], 0) + z[1, 1] - torch.logsumexp(z[1], 0)) / 2
    assert math.isclose(float(loss), float(ce), rel_tol=1e-6) and parts["accuracy"] == 0.5 and parts["kl"] == 0.0
    teacher = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.8, 0.3]])
    loss2, parts2 = contrastive_loss(scores, 0.5, teacher, teacher_temperature=0.05, distill=0.5)
    p = torch.softmax(teacher / 0.05, -1)
    kl = (p * (p.log() - torch.log_softmax(z, -1))).sum(-1).mean()
    assert math.isclose(parts2["kl"], float(kl), rel_tol=1e-5)
    assert math.isclose(float(loss2), float(ce + 0.5 * kl), rel_tol=1e-5)


def test_preservation_loss_against_a_direct_computation():
    """Zero when every mode's scores equal the teacher's; else the mean over modes of
    KL(teacher ‖ student) at each mode's temperature."""
    a = torch.tensor([[3.0, 1.0, 0.5], [0.2, 2.0, 1.0]])
    b = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.8, 0.3]])
    assert float(preservation_loss([(a, a, 1.0), (b, b, 0.05)])) == pytest.approx(0.0, abs=1e-7)

    def kl(s, t, temperature):
        p = torch.softmax(t / temperature, -1)
        return float((p * (p.log() - torch.log_softmax(s / temperature, -1))).sum(-1).mean())

    expected = (kl(a, b, 1.0) + kl(b, a, 0.05)) / 2
    assert float(preservation_loss([(a, b, 1.0), (b, a, 0.05)])) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("markers", [(None, None), ("[unused0]", "[unused1]")])
def test_checkpoint_conventions_read_back_as_trained(markers):
    """With and without marker tokens (none is PyLate's empty prefix, not a missing one,
    which PyLate would read as its "[Q] " / "[D] ")."""
    config = TrainConfig(tokenizer=TokenizerConfig(query_marker=markers[0], document_marker=markers[1]))
    written = pylate_config(config.tokenizer.model_dump())
    assert (written["query_prefix"], written["document_prefix"]) == tuple(m or "" for m in markers)
    read = pylate_conventions(json.loads(json.dumps(written)))
    trained_with = config.tokenizer.model_dump()
    for key, value in read.items():
        assert trained_with[key] == value, key


def test_jsonl_pairs_and_their_errors(tmp_path):
    good = tmp_path / "pairs.jsonl"
    good.write_text(json.dumps({"query": "q", "positive": "p", "negatives": ["n1"]}) + "\n\n" + json.dumps({"query": "q2", "positive": "p2"}) + "\n")
    rows = jsonl_pairs(str(good))
    assert [(r["query"], r["negatives"]) for r in rows] == [("q", ["n1"]), ("q2", [])]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "q", "positive": "p"}) + "\n" + json.dumps({"query": 3, "positive": "p"}) + "\n")
    with pytest.raises(TrainingDataError, match="bad.jsonl line 2: not a pair object"):
        jsonl_pairs(str(bad))


def test_run_directory_refusals(tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "something").write_text("x")
    with pytest.raises(TrainingDataError, match="holds no mvr train run"):
        prepare_run("corpus.jsonl", str(occupied), TrainConfig(), False, print)
    run = tmp_path / "out" / ".mvr-train"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"data": "other.jsonl", "config": {}}))
    with pytest.raises(TrainingDataError, match="holds a run of another DATA or configuration"):
        prepare_run("corpus.jsonl", str(tmp_path / "out"), TrainConfig(), False, print)


def test_train_yaml_is_the_defaults():
    from pathlib import Path

    configs = Path(__file__).resolve().parents[1] / "configs"
    assert TrainConfig.from_yaml(configs / "train.yaml") == TrainConfig()
    gpu = TrainConfig.from_yaml(configs / "train-gpu.yaml")  # the cluster starting point docs/training.md names
    assert (gpu.train.batch_size, gpu.data.negatives, gpu.train.group_by_length, gpu.runtime.cpus_per_worker) == (64, 4, True, 8)
