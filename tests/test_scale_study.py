"""``mvr scale-study`` on msmarco-sample (dataset) with dbpedia-sample as distractors and 200
random strings: at the size of the whole msmarco-sample corpus the study reproduces the exact
reference figures of pooled, maxsim and BM25; dense quality never rises as distractors are
added (fixed exact scores: new passages can only push judged ones down); BM25 never ranks a
random string above every relevant passage; table, JSON and PNG are written. The study's
pure parts (sizes, PCA, random strings, share) are checked on small inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import REFERENCE_NDCG10
from mvr.jobs import scale_study as job
from mvr.pipeline.studies.scale_study import fit_pca, index_sizes, project, random_share, random_strings

RANDOM_STRINGS = 200


def test_index_sizes_are_geometric_and_include_the_anchor():
    assert index_sizes(4102, 10000, 5, anchor=5000) == [4102, 5000, 6405, 8003, 10000]
    assert index_sizes(100, 400, 3) == [100, 200, 400]
    assert index_sizes(100, 400, 2, anchor=150) == [100, 150, 400]
    assert index_sizes(100, 400, 4, anchor=400) == [100, 159, 252, 400]
    assert index_sizes(7, 7, 5, anchor=7) == [7]


def test_pca_random_strings_and_share():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 12)) * np.array([8.0, 4.0, 2.0] + [0.2] * 9) + rng.normal(size=12)  # three wide axes, off-centre
    p = fit_pca(x, 3)
    assert np.allclose(p.components.T @ p.components, np.eye(3), atol=1e-8)
    assert np.allclose(p.mean, x.mean(axis=0))
    _, eigvecs = np.linalg.eigh(np.cov(x, rowvar=False))
    top = eigvecs[:, -3:]  # the covariance's three largest eigenvectors span the same subspace
    assert np.allclose(p.components @ p.components.T, top @ top.T, atol=1e-6)
    assert np.allclose(np.abs(p.components), np.eye(12)[:, :3], atol=0.1)  # ... the three wide axes
    y = project(x, p)
    assert y.shape == (500, 3) and y.dtype == np.float32 and np.allclose(np.linalg.norm(y, axis=1), 1, atol=1e-5)
    with pytest.raises(ValueError):
        fit_pca(x, 13)
    a, b = random_strings(50, seed=3), random_strings(50, seed=3)
    assert a == b and a != random_strings(50, seed=4)
    assert all(s.replace(" ", "").isalpha() and s == s.lower() and 10 <= len(s.split()) <= 60 for s in a)
    share = random_share(np.array([2.0, 0.1, 5.0, -np.inf]), np.array([1.0, 0.5, np.nan, 0.3]))
    assert share == pytest.approx(1 / 3)


@pytest.mark.ray
def test_scale_study_msmarco_with_dbpedia_distractors(msmarco_index, dbpedia_index, datasets, tmp_path, capsys):
    ms, db = str(datasets / "msmarco-sample"), str(datasets / "dbpedia-sample")
    out = tmp_path / "study.json"
    argv = [
        "--dataset", ms, "--distractors", db, "--index", f"{ms}={msmarco_index}", "--index", f"{db}={dbpedia_index}",
        "--random-strings", str(RANDOM_STRINGS), "--workdir", str(tmp_path / "work"),
        "--steps", "3", "--dims", "384,64", "--modes", "bm25,pooled,maxsim", "--json", str(out),
    ]  # fmt: skip
    assert job.main(argv) == 0
    printed = capsys.readouterr().out
    assert "distractors" in printed and "random-strings" in printed and "pooled-64" in printed
    assert (tmp_path / "study.png").stat().st_size > 10_000
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"bm25", "pooled-384", "pooled-64", "maxsim"}

    dis = result["experiments"]["distractors"]
    n_ds = result["dataset_passages"]
    assert n_ds == 5000 and dis["sizes"][0] == result["judged_passages"] < n_ds < dis["sizes"][-1] and n_ds in dis["sizes"]
    assert dis["composition"][-1]["distractors"] == dis["sizes"][-1] - n_ds > 4000
    at = dis["sizes"].index(n_ds)
    reference = REFERENCE_NDCG10["msmarco-sample"]
    for method, ref in (("pooled-384", reference["pooled"]), ("maxsim", reference["maxsim"]), ("bm25", reference["bm25"])):
        assert abs(dis["methods"][method][at]["nDCG@10"] - ref) <= 0.01, (method, dis["methods"][method][at])
    for method in ("pooled-384", "pooled-64", "maxsim"):
        ndcg = [f["nDCG@10"] for f in dis["methods"][method]]
        print(f"\ndistractors {method}: {ndcg}")
        assert all(b <= a + 1e-9 for a, b in zip(ndcg, ndcg[1:])), (method, ndcg)

    rnd = result["experiments"]["random-strings"]
    assert rnd["sizes"] == [result["judged_passages"], rnd["sizes"][1], result["judged_passages"] + RANDOM_STRINGS]
    assert all(f["random_share"] == 0 for f in rnd["methods"]["bm25"])
    assert all(f["random_share"] == 0 for m in rnd["methods"].values() for f in m[:1])  # judged passages only
    for method, figures in rnd["methods"].items():
        print(f"random strings {method}: share {[f['random_share'] for f in figures]}, nDCG@10 {[f['nDCG@10'] for f in figures]}")
        ndcg = [f["nDCG@10"] for f in figures]
        if method != "bm25":
            assert all(b <= a + 1e-9 for a, b in zip(ndcg, ndcg[1:])), (method, ndcg)
