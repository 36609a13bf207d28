"""The query plan's calls to its hosts are typed (``pipeline/retrieval/trips.py``): the
``Host`` interface the plan calls is what ``PartitionHost`` implements, method by method and
signature by signature, and a call names a host method or is refused."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from mvr.pipeline.retrieval.host import PartitionHost
from mvr.pipeline.retrieval.trips import TRIP_METHODS, Host, call


def test_partition_host_implements_every_trip_the_plan_calls():
    assert TRIP_METHODS == {"hits", "first_trip", "rank", "rank_batch", "bm25_rank", "hybrid"}
    for name in TRIP_METHODS:
        assert inspect.signature(getattr(PartitionHost, name)) == inspect.signature(getattr(Host, name)), name


def test_a_call_travels_as_its_method_name_and_positional_arguments():
    rows = np.arange(3)
    c = call(Host.rank, "maxsim", "tokens", None, rows, 10)
    assert c.method == "rank" and c.args == ("maxsim", "tokens", None, rows, 10)
    with pytest.raises(TypeError, match="positional"):
        call(Host.bm25_rank, ["term"], 10, allowed=None)
    with pytest.raises(ValueError, match="many is not a partition trip"):
        call(PartitionHost.many, [])  # type: ignore[arg-type]  # a host method, not a trip
