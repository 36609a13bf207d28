"""What the jobs give back: ``mvr.index``, ``mvr.build_ann``, ``mvr.add`` / ``delete`` /
``compact``, ``mvr.train`` and ``mvr.demo``'s results. Light on purpose (no Ray, no torch): the API's signatures name them
(``mvr/api.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mvr.storage.manifest import Manifest


@dataclass
class IndexResult:
    """``mvr.index``: the committed version, whether nothing was done (the index already
    matched corpus and config) and the job's seconds."""

    manifest: Manifest
    up_to_date: bool
    seconds: float

    @property
    def summary(self) -> str:
        c = self.manifest.counts
        return (
            f"indexed {c['indexed_documents']}, rejected {c['rejected']} (input rows {c['input_rows']}); {c['passages']} passages, {c['tokens']} token vectors"
        )


@dataclass
class AnnBuildResult:
    """``mvr.build_ann``: the committed version, each kind's manifest entry built, seconds."""

    manifest: Manifest
    built: dict[str, dict[str, Any]]
    seconds: float


@dataclass
class UpdateResult:
    """``mvr.add``, ``delete`` and ``compact``: the committed version, a one-line summary,
    the seconds, and whether nothing was done."""

    manifest: Manifest
    summary: str
    seconds: float
    up_to_date: bool = False


@dataclass
class TrainResult:
    """``mvr.train``: the checkpoint directory, its steps, pairs, last metrics and seconds."""

    out: str
    steps: int
    pairs: int
    metrics: dict[str, Any]
    seconds: float
    resumed_from: int


@dataclass
class DemoResult:
    """``mvr.demo``: where its corpus, index and service were, what was (re)built, and one
    ``POST /search`` body a query (with "query" added)."""

    workdir: str
    corpus_url: str
    index_url: str
    documents: int  # rows written to the corpus
    corpus_written: bool  # False: an identical corpus file was already there
    index: IndexResult
    ann_built: bool  # False: the partitions of an earlier run were reused
    url: str  # where the service answered
    answers: list[dict[str, Any]]
    seconds: float
