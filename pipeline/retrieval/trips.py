"""The calls a query plan makes to its partition hosts, typed.

``Host`` is the interface the plan (``pipeline/retrieval/plan.py``) sees: the six trips a
partition host answers. ``PartitionHost`` (``host.py``) implements it, in process and inside
each Serve ``Partition{i}`` deployment. The plan names a trip's method by the method itself,
``call(Host.rank, mode, kind, query, rows, k, allowed)``, so a type checker follows a query
from the plan to the host's signature and to the type of each host's answer
(``Trip[Hits]``…). On the wire a call is its method's name and its positional arguments
(``Call.method``, ``Call.args``): what ``run_many`` and the Serve handles dispatch. A call
also says how much work it carries (``Call.work``, in default queries' worth), which the
service's timeouts allow for (``pipeline/serving/fanout.py``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Concatenate, Generic, Optional, ParamSpec, Protocol, Sequence, TypeVar

import numpy as np

from mvr.operators.retrieval.fusion import ScoredPassages
from mvr.operators.retrieval.partition import Hits, PartitionResult, Scored
from mvr.operators.retrieval.scoring import QueryVectors

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Host(Protocol):
    """A partition host's trips (``PartitionHost`` documents each)."""

    def hits(self, kind: str, query_vectors: np.ndarray, k_prime: int, knobs: dict[str, Any], allowed: Optional[np.ndarray] = None) -> Hits: ...

    def first_trip(
        self, mode: str, kind: str, query: QueryVectors, k_prime: int, knobs: dict[str, Any], share: tuple[int, int], allowed: Optional[np.ndarray] = None
    ) -> tuple[Hits, Scored]: ...

    def rank(self, mode: str, kind: str, query: QueryVectors, rows: Optional[np.ndarray], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult: ...

    def rank_batch(self, mode: str, kind: str, queries: Sequence[QueryVectors], k: int, allowed: Optional[np.ndarray] = None) -> list[PartitionResult]: ...

    def bm25_rank(self, terms: list[str], k: int, allowed: Optional[np.ndarray] = None) -> PartitionResult: ...

    def hybrid(
        self,
        mode: str,
        kind: str,
        queries: Sequence[QueryVectors],
        terms: Sequence[list[str]],
        rows: Sequence[Optional[np.ndarray]],
        n_best: int,
        allowed: Optional[np.ndarray] = None,
    ) -> list[ScoredPassages]: ...


# the methods a trip may name (a host refuses any other: its ``many`` and the Serve handles
# dispatch by name)
TRIP_METHODS = frozenset(name for name, value in vars(Host).items() if callable(value) and not name.startswith("_"))


@dataclass(frozen=True)
class Call(Generic[R_co]):
    """One host's part of a trip: ``Host.<method>(*args)``, answering an ``R_co``. ``work``:
    what it asks of the host in default queries' worth (≥ 1: a query at its mode's default
    k′ and candidate cap is 1; a batch of n such queries, or one query asking for n times the
    candidates, is n)."""

    method: str
    args: tuple[Any, ...]
    work: float = 1.0

    def weighing(self, work: float) -> "Call[R_co]":
        """This call carrying ``work`` (at least 1)."""
        return replace(self, work=max(1.0, float(work)))


def call(method: Callable[Concatenate[Host, P], R], *args: P.args, **kwargs: P.kwargs) -> Call[R]:
    """The call of ``method`` (a ``Host`` method) with these arguments, positional only (they
    travel as a tuple)."""
    if kwargs:
        raise TypeError(f"a trip's call takes positional arguments only, got {sorted(kwargs)}")
    if method.__name__ not in TRIP_METHODS:
        raise ValueError(f"{method.__name__} is not a partition trip")
    return Call(method.__name__, args)
