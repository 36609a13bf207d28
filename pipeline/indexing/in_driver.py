"""A small job's indexing graph run in the driver process (``runtime.small_job_rows``,
``EncodePlan.for_job``): the few Ray Data calls ``corpus_job.py`` makes (``from_items``,
``map_batches``, ``iter_batches``, ``materialize``) carried out here on pyarrow tables, with
the same stage callables (``stages.py``, ``encode_stage.py``).

Why: each Ray worker a job starts imports mvr and torch and, for the encode stage, loads the
model; a job of a few hundred passages spent most of its time there (docs/indexing.md
measures both ways). In the driver the model is loaded once a process
(``encode_stage.token_encoder``), so the driver's next small job (live updates from one
Python process) loads nothing. A job in the driver is resumed as any other: its scan, its
codecs and each shard it wrote are recorded in staging as it goes, and a rerun skips them.

Like Ray Data's, the stages stream: a batch goes through every stage (tokenized, encoded,
written and recorded as a shard) before the next is read, so a job killed part-way keeps the
shards it wrote. Batching follows Ray Data's: ``batch_size`` rows a call (the last batch
shorter), batches cut across the blocks that feed them; ``None``: a call a block;
``"default"``: Ray Data's default of 1024 rows (``select_sample`` is given no size)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Union

import pyarrow as pa

RAY_DATA_DEFAULT_BATCH = 1024  # Ray Data's map_batches batch_size="default"


class DriverDataset:
    """Blocks (pyarrow tables) made on demand by ``source``, each stage applied as they pass."""

    def __init__(self, source: Callable[[], Iterator[pa.Table]]) -> None:
        self._source = source

    @classmethod
    def from_items(cls, items: list[dict[str, Any]], override_num_blocks: Optional[int] = None) -> "DriverDataset":
        """One block an item: what ``ray.data.from_items(items, override_num_blocks=len(items))``
        makes, the only split the indexing graph asks for (another is refused)."""
        if override_num_blocks not in (None, len(items)):
            raise ValueError(f"the driver's dataset makes a block an item ({len(items)}), not {override_num_blocks}")
        return cls(lambda: (pa.Table.from_pylist([item]) for item in items))

    def _batches(self, batch_size: Union[int, str, None]) -> Iterator[pa.Table]:
        blocks = (b for b in self._source() if b.num_rows)
        if batch_size is None:
            yield from blocks
            return
        size = RAY_DATA_DEFAULT_BATCH if batch_size == "default" else int(batch_size)
        pending: list[pa.Table] = []
        held = 0
        for block in blocks:
            pending.append(block)
            held += block.num_rows
            while held >= size:
                rows = pa.concat_tables(pending)
                yield rows.slice(0, size)
                rest = rows.slice(size)
                pending, held = ([rest] if rest.num_rows else []), rest.num_rows
        if held:
            yield pa.concat_tables(pending)

    def map_batches(
        self,
        fn: Union[Callable[..., pa.Table], type],
        *,
        batch_size: Union[int, str, None] = "default",
        batch_format: str = "pyarrow",
        fn_kwargs: Optional[dict[str, Any]] = None,
        fn_constructor_kwargs: Optional[dict[str, Any]] = None,
        **resources: Any,
    ) -> "DriverDataset":
        """``fn`` on every batch: a function with ``fn_kwargs``, or a stage class built once (when
        the first batch comes) with ``fn_constructor_kwargs`` (Ray Data's actor form).
        ``resources`` (``compute``, ``num_cpus``, …) place Ray's tasks and mean nothing here."""
        if batch_format != "pyarrow":
            raise ValueError(f"the driver's dataset runs pyarrow batches, not {batch_format}")
        kwargs = fn_kwargs or {}

        def source() -> Iterator[pa.Table]:
            call = None
            for batch in self._batches(batch_size):
                if call is None:
                    call = fn(**(fn_constructor_kwargs or {})) if isinstance(fn, type) else fn
                yield call(batch, **kwargs)

        return DriverDataset(source)

    def iter_batches(self, *, batch_format: str = "pyarrow", batch_size: Union[int, str, None] = None) -> Iterator[pa.Table]:
        """The batches (``batch_size=None``: the blocks), in order, each made as it is asked for."""
        return self._batches(batch_size)

    def materialize(self) -> "DriverDataset":
        """Run every stage over every batch; the output blocks, held."""
        blocks = list(self._source())
        return DriverDataset(lambda: iter(blocks))
