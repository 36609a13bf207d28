"""The indexing graph on Ray Data: corpus → validate → tokenize → encode → compress → shards,
then rejects, catalog, the codec files and the manifest (committed last).

Three passes over the input: a cheap validation scan (ids and reasons, so duplicate ids can be
resolved across blocks with DuckDB: first one wins); a sample pass that encodes a seeded
sample of passages from every block and trains the index's codecs in one Ray task; then the
main pass, whose encode actors compress every batch with them. When the sample is the whole
corpus (ColBERT's rule samples every passage of a corpus under ~30k passages) the sample pass
keeps every encoded batch in staging and the main pass only compresses them, so no passage is
encoded twice (``runtime.encode_once``). All are resumable: a block's scan, the trained codecs
and each written shard are recorded in staging, and a rerun skips them (and reuses the codecs
its shards were written with).

A small job (at most ``runtime.small_job_rows`` valid rows, no GPU) runs the same graph in the
driver process (``in_driver.py``): no Ray worker starts, and the model stays loaded for the
driver's next small job. An input of one block is validated there too."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import numpy as np
import ray
from tqdm import tqdm

from mvr.operators import codecs
from mvr.operators.encode.checkpoint import ModelRecord, resolve_model
from mvr.pipeline.config import IndexConfig
from mvr.pipeline.indexing.encode_stage import EncodeCompress, EncodeSample, compress_encoded
from mvr.pipeline.indexing.in_driver import DriverDataset
from mvr.pipeline.indexing.stages import read_tokenize, sample_vectors, scan_block, select_sample, train_codecs, write_shards
from mvr.pipeline.ray_runtime import EncodePlan, init_ray, plan_encode, task_result
from mvr.pipeline.results import IndexResult
from mvr.storage import catalog, codec_file, fs, index_dir, staging
from mvr.storage.corpus import CorpusError, InputBlock, plan_blocks
from mvr.storage.manifest import Manifest, ShardEntry, commit_guard, commit_manifest, read_manifest
from mvr.storage.shards import committed_records


class IndexExistsError(RuntimeError):
    """The target already holds a different committed index (or an unfinished job of one)."""


def _scan(index_url: str, blocks: list[InputBlock], placement: EncodePlan) -> None:
    """Run ``scan_block`` for every block as Ray I/O tasks (``placement.io_args()``), at most
    ``placement.io_tasks`` at once, with a progress bar; a single block in the driver, when its
    node takes work (``placement.driver_threads``): a small input then starts no worker."""
    if not blocks:
        return
    if len(blocks) == 1 and placement.driver_threads:
        scan_block(blocks[0].to_dict(), index_url)
        return
    task = ray.remote(max_retries=3, **placement.io_args())(scan_block)
    todo = iter(blocks)
    pending = [task.remote(b.to_dict(), index_url) for b in itertools.islice(todo, placement.io_tasks)]
    with tqdm(total=len(blocks), desc="validate", unit="block") as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=1.0)
            ray.get(done)  # raises if a block failed after its retries
            bar.update(len(done))
            pending += [task.remote(b.to_dict(), index_url) for b in itertools.islice(todo, len(done))]


def _apply_limit(index_url: str, blocks: list[InputBlock], limit: Optional[int]) -> list[InputBlock]:
    """Keep the first ``limit`` rows of the input (in input order) after the scan."""
    if limit is None:
        return blocks
    kept, remaining = [], limit
    for b in blocks:
        if remaining <= 0:
            break
        n = staging.scan_rows(index_url, b.block_id)
        if n >= remaining:  # the last block kept (a rerun finds it truncated already)
            staging.truncate_scan(index_url, b.block_id, remaining)
            b = InputBlock(**{**b.to_dict(), "max_rows": remaining})
        kept.append(b)
        remaining -= min(n, remaining)
    return kept


@dataclass
class _Prepared:
    """What ``_prepare`` decided: the blocks to index (or the committed, up-to-date manifest),
    the plan key, whether an existing index is to be replaced once the new corpus has been
    validated (``--overwrite``), whether INDEX did not exist before this run, and how its
    commits are kept from racing (``commit_guard``; {} when up to date)."""

    blocks: list[InputBlock] | Manifest
    key: dict
    replace: bool
    created: bool
    guard: dict = field(default_factory=dict)


def _prepare(corpus_url: str, index_url: str, config: IndexConfig, overwrite: bool, log: Callable[[str], None]) -> _Prepared:
    """Check the target and resolve rerun semantics, on the driver before any Ray work: the
    corpus must not overlap INDEX, INDEX must be a writable directory, and one that exists
    must hold an index (or only files an index writes) unless ``overwrite``."""
    for url in (corpus_url, index_url):
        if str(url).startswith("memory://"):
            raise ValueError(
                f"{url}: memory:// exists only inside one process and Ray workers cannot see it; use a local path or a shared filesystem / object store URL"
            )
    index_dir.check_target(corpus_url, index_url)
    blocks, input_fp = plan_blocks(corpus_url, config.runtime.block_bytes, config.runtime.parquet_rows_per_block)
    key = {"corpus": corpus_url, "input": input_fp, "settings": config.vector_settings(), "limit": config.limit}
    created = not fs.exists(index_url)
    existing = read_manifest(index_url)
    staged = staging.load_plan(index_url)
    if existing is None and staged is None and not overwrite:
        foreign = index_dir.foreign_entries(index_url)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise index_dir.IndexTargetError(
                f"{index_url} exists and is not an mvr index (it holds {shown}): give a new or empty directory, "
                "or pass --overwrite to index into it (files an index did not write are kept)"
            )
    index_dir.check_writable(index_url)
    replace = False
    if overwrite and existing is not None:
        # the committed index stays whole until the new corpus has passed validation
        log(f"--overwrite: the index at {index_url} is replaced once the new corpus has been validated")
        staging.clear(index_url)
        existing = staged = None
        replace = True
    elif overwrite and index_dir.clear(index_url):
        log(f"--overwrite: removed the unfinished index files at {index_url}")
        staged = None
    if existing is not None:
        if existing.input.get("key") == key:
            return _Prepared(existing, key, False, created)
        raise IndexExistsError(f"{index_url} already holds an index of another corpus or configuration (pass --overwrite to replace it)")
    if staged is not None and staged["key"] != key:
        raise IndexExistsError(f"{index_url} holds an unfinished indexing job of another corpus or configuration (pass --overwrite to discard it)")
    guard = commit_guard(index_url, config.storage.single_writer)  # before any work: a store that would lose commits is refused
    if staged is not None:
        log(f"resuming the unfinished job in {index_url}")
        return _Prepared([InputBlock.from_dict(b) for b in staged["blocks"]], key, False, created, guard)
    staging.save_plan(index_url, {"key": key, "blocks": [b.to_dict() for b in blocks]})
    return _Prepared(blocks, key, replace, created, guard)


def _refuse_empty(corpus_url: str, index_url: str, blocks: list[InputBlock], created: bool) -> int:
    """The number of rows of the (validated) input to index (valid, duplicates aside), or
    CorpusError when there is none: an index without a passage is not committed. The rejects
    are written to INDEX/rejects.parquet unless INDEX holds a committed index (``--overwrite``
    of an index leaves it untouched); the staging state is removed, and so is INDEX when this
    run created it and it is empty."""
    scan = catalog.scan_counts(index_url, blocks)
    if scan["valid_rows"] - scan["duplicates"] > 0:
        return scan["valid_rows"] - scan["duplicates"]
    rows = scan["input_rows"]
    if rows == 0:
        detail = f"{corpus_url} has no rows"
    else:
        reasons = ", ".join(f"{n} {reason}" for reason, n in staging.reject_reasons(index_url, blocks)[:5])
        detail = f"{rows} input row(s), all rejected ({reasons})"
        if read_manifest(index_url) is None:
            catalog.write_rejects(index_url, blocks)
            detail += f"; every reject is listed in {fs.join(index_url, catalog.REJECTS_FILE)}"
    staging.clear(index_url)
    if created:
        index_dir.remove_if_empty(index_url)
    raise CorpusError(f"no passage to index: {detail}; nothing was committed")


def index_corpus(
    corpus_url: str,
    index_url: str,
    config: IndexConfig,
    overwrite: bool = False,
    log: Callable[[str], None] = print,
    codecs_given: Optional[dict[str, bytes]] = None,
) -> IndexResult:
    """Index ``corpus_url`` into ``index_url``. Resumable and idempotent: rerunning after a
    crash finishes the job; rerunning after success changes nothing. ``codecs_given``: the
    codec files to compress with ({group: bytes}, as another index stores them) instead of
    training new ones (``mvr add``: the documents join an index with its own codecs)."""
    t0 = time.time()
    prepared = _prepare(corpus_url, index_url, config, overwrite, log)
    key = prepared.key
    if isinstance(prepared.blocks, Manifest):
        log(f"{index_url} is up to date (manifest version {prepared.blocks.version})")
        return IndexResult(prepared.blocks, True, time.time() - t0)
    blocks: list[InputBlock] = prepared.blocks
    model = resolve_model(config.model.name)  # once: checked, loadable, its format, fingerprint and dimension
    init_ray()
    placement = plan_encode(config.runtime)
    log(f"{len(blocks)} input blocks; encode: {placement}")

    # Pass 1: validate every row, once per block (Ray tasks; a rerun skips scanned blocks).
    _scan(index_url, [b for b in blocks if not staging.scanned(index_url, b.block_id)], placement)
    blocks = _apply_limit(index_url, blocks, config.limit)
    duplicates = catalog.find_duplicates(index_url, blocks)
    rows = _refuse_empty(corpus_url, index_url, blocks, prepared.created)
    placement = placement.for_job(rows, config.runtime.small_job_rows)
    encode = _encode_record(placement, config)
    log(f"encoding on {encode['device']} ({encode['dtype']}), batches of {config.runtime.encode_batch_size}")
    if placement.in_driver:
        log(f"a small job ({rows} rows ≤ runtime.small_job_rows {config.runtime.small_job_rows}): every stage in this process, no Ray worker")
    if prepared.replace:
        removed = index_dir.clear(index_url, keep=(staging.STAGING_DIR,))
        log(f"--overwrite: removed the previous index at {index_url} ({', '.join(removed)})")
    log(f"validated {len(blocks)} blocks in {time.time() - t0:.1f} s; {duplicates} duplicate ids (first occurrence kept)")
    kept: list[str] = []
    if codecs_given is not None:
        if codec_file.read_staged(index_url) is None:
            codec_file.stage(index_url, codecs_given)
        codec_files = dict(codecs_given)
    else:
        codec_files, kept = _codecs(index_url, blocks, config, model, placement, log)
    t1 = time.time()

    # Pass 2: passages → token ids → vectors → codes → shards (or the sample pass's kept
    # vectors → codes → shards).
    if kept:
        ds = _compressed(kept, codec_files, config, placement)
    else:
        ds = _encoded(_tokenized(index_url, blocks, config, placement), EncodeCompress, config, placement, codec_files=codec_files)
    ds = ds.map_batches(
        write_shards,  # type: ignore[arg-type]  # Ray annotates fn as taking the batch alone; fn_kwargs supplies the rest
        batch_size=config.runtime.write_rows_per_shard,
        batch_format="pyarrow",
        fn_kwargs={"index_url": index_url},
        compute=placement.io_compute(len(kept) if kept else len(blocks)),  # at least a batch a block (or kept file)
        **placement.io_args(),
    )
    ds.materialize()
    staging.clear_encoded(index_url)
    log(f"{'compressed the kept vectors' if kept else 'encoded'} and wrote passages in {time.time() - t1:.1f} s")
    manifest = _commit(corpus_url, index_url, config, model, blocks, key, codec_files, log, encode, prepared.guard)
    return IndexResult(manifest, False, time.time() - t0)


def _encode_record(placement: EncodePlan, config: IndexConfig) -> dict:
    """Where and how this job encodes, for its log and its manifest (``model.encode``): the
    resolved device and dtype (``model.device`` / ``model.dtype`` "auto" resolved as the
    encode stage resolves them), the actors (or tasks) and the GPUs each reserves."""
    import torch

    from mvr.operators.encode.encoder import pick_dtype

    device = placement.device(config.model.device)
    dtype = str(pick_dtype(config.model.dtype, torch.device(device))).removeprefix("torch.")
    return {"device": device, "dtype": dtype, "actors": placement.actors, "in_driver": placement.in_driver, "gpus_per_actor": placement.gpus}


JobDataset = Union["ray.data.Dataset", DriverDataset]  # a job's data: on Ray, or in the driver (``placement.in_driver``)


def _data(placement: EncodePlan) -> Any:
    """Where a job's datasets come from: Ray Data, or for a job in the driver ``DriverDataset``."""
    return DriverDataset if placement.in_driver else ray.data


def _tokenized(index_url: str, blocks: list[InputBlock], config: IndexConfig, placement) -> JobDataset:
    """The blocks' passages with token ids, a block a task (``read_tokenize``)."""
    ds = _data(placement).from_items([b.to_dict() for b in blocks], override_num_blocks=len(blocks))
    return ds.map_batches(
        read_tokenize,
        batch_size=1,
        batch_format="pyarrow",
        fn_kwargs={"index_url": index_url, "model_name": config.model.name, "tokenizer_settings": config.tokenizer.model_dump()},
        compute=placement.io_compute(len(blocks)),
        **placement.io_args(),
    )


def _encoded(ds: JobDataset, actor: type, config: IndexConfig, placement: EncodePlan, **kwargs) -> JobDataset:
    """``ds`` through the encode stage ``actor`` (``EncodeSample`` or ``EncodeCompress``;
    ``kwargs``: its own constructor arguments), sized by ``placement``: a pool of actors, or
    for a small job (``placement.in_driver``) one instance in the driver."""
    init = {
        "model": {**config.model.model_dump(), "device": placement.device(config.model.device)},
        "tokenizer_settings": config.tokenizer.model_dump(),
        "compress": config.compress.model_dump(),
        "batch_size": config.runtime.encode_batch_size,
        "torch_threads": placement.threads,
        **kwargs,
    }
    common: dict[str, Any] = {
        "batch_size": config.runtime.encode_actor_batch,
        "batch_format": "pyarrow",
        "num_cpus": placement.cpus,
        "num_gpus": placement.gpus,
    }
    compute = None if placement.in_driver else ray.data.ActorPoolStrategy(size=placement.actors)
    return ds.map_batches(actor, fn_constructor_kwargs=init, compute=compute, **common)


def _compressed(kept: list[str], codec_files: dict[str, bytes], config: IndexConfig, placement) -> JobDataset:
    """The sample pass's kept batches (``kept``: their files) through
    ``compress_encoded`` tasks (the compress stage without the model), as many at once as
    there are encode actors and each reserving what one reserves. Tasks, not an actor pool:
    they run in the job's pooled workers, which have imported torch already (an actor would
    start a process of its own: ~2.5 s on this project's 2-core machine, measured); in the
    driver for a small job."""
    dim = codecs.from_bytes(codec_files["tokens"]).dim_in
    ds = _data(placement).from_items([{"url": u} for u in kept], override_num_blocks=len(kept))
    return ds.map_batches(
        compress_encoded,
        batch_size=1,
        batch_format="pyarrow",
        fn_kwargs={"compress": config.compress.model_dump(), "codec_files": codec_files, "dim": dim, "threads": placement.threads},
        compute=None if placement.in_driver else ray.data.TaskPoolStrategy(size=min(placement.actors, len(kept))),
        num_cpus=placement.cpus,
    )


# Tokens a passage is assumed to have when the sample fractions are chosen (before anything
# is tokenized).
SAMPLE_TOKENS_PER_DOCUMENT = 64
# Vectors the encode actors return for the driver to choose codec_sample_vectors from, as a
# multiple of it (the per-vector draw is random, and passages are longer or shorter than 64).
SAMPLE_OVERDRAW = 2


def sample_passages(documents: int) -> int:
    """Passages the codec's training sample is drawn from: ColBERT's (PLAID's) rule,
    16·√(120·n) (``CollectionIndexer._sample_pids``), at most all of them. A sample from few
    passages trains a worse codebook: on dbpedia-sample, pca-64+residual-2 trained on 65,536
    vectors of ~1,000 whole passages lost 0.010–0.024 nDCG@10 to float16 (3 seeds), the same
    count drawn from every passage −0.001 to +0.003 (docs/codecs.md)."""
    return min(documents, 1 + int(16 * math.sqrt(120 * documents)))


def _codecs(
    index_url: str, blocks: list[InputBlock], config: IndexConfig, model: ModelRecord, placement, log: Callable[[str], None]
) -> tuple[dict[str, bytes], list[str]]:
    """(the index's codec files ({group: bytes}, ``storage/codec_file.py``), the files of the
    encoded batches the sample pass kept, or [] when pass 2 must encode). The codecs are those an
    interrupted run of this job trained and staged (its shards were written with them), else
    trained now: a seeded sample of passages drawn from every block (Ray Data: read,
    tokenize, select, encode on the encode actors), at most ``codec_sample_vectors`` of their
    token vectors kept on the driver, the codecs trained in one Ray task (on a GPU when the
    cluster has one), then staged; a small job (``placement.in_driver``) does all of it in
    the driver. Codecs that learn nothing (``codecs.UNTRAINED``) need
    only the encoder's dimension: when both are such, there is no sample pass. A sample pass
    that draws every passage keeps them all encoded (``runtime.encode_once``), and they are
    used when they are exactly the passages pass 2 would encode."""
    staging.clear_encoded(index_url)  # an interrupted run's: pass 2 then encodes what is left
    staged = codec_file.read_staged(index_url)
    if staged is not None:
        reused = ", ".join(f"{g} {codecs.from_bytes(d).name}" for g, d in staged.items())
        log(f"reusing the codecs the interrupted run trained ({reused})")
        return staged, []
    c = config.compress
    t0 = time.time()
    wanted = {"tokens": c.codec, "pooled": c.pooled_codec}
    if all(n in codecs.UNTRAINED for n in wanted.values()):
        dim = c.projection_dim or model.dim
        files = {g: codecs.to_bytes(codecs.train(n, np.full((1, dim), dim**-0.5, np.float32))) for g, n in wanted.items()}
        codec_file.stage(index_url, files)
        log(f"codecs {', '.join(f'{g} {n}' for g, n in wanted.items())}: no training needed ({dim} dimensions)")
        return files, []
    docs = max(1, catalog.scan_counts(index_url, blocks)["valid_rows"])
    per_doc = SAMPLE_TOKENS_PER_DOCUMENT / c.pool_factor  # stored (pooled) vectors a passage
    # passages: ColBERT's rule, and enough for the sample; their vectors: a seeded share, so
    # the driver holds about SAMPLE_OVERDRAW × codec_sample_vectors, drawn from all of them
    fraction = min(1.0, max(c.codec_sample_vectors / (docs * per_doc), sample_passages(docs) / docs))
    vector_fraction = min(1.0, SAMPLE_OVERDRAW * c.codec_sample_vectors / (docs * fraction * per_doc))
    ds = _tokenized(index_url, blocks, config, placement)
    ds = ds.map_batches(
        select_sample,  # type: ignore[arg-type]  # Ray annotates fn as taking the batch alone; fn_kwargs supplies the rest
        batch_format="pyarrow",
        fn_kwargs={"fraction": fraction, "seed": c.codec_seed},
        compute=placement.io_compute(len(blocks)),
        **placement.io_args(),
    )
    keep = fraction >= 1 and config.runtime.encode_once
    ds = _encoded(ds, EncodeSample, config, placement, vector_fraction=vector_fraction, seed=c.codec_seed, keep_url=index_url if keep else None)
    seen = {"vectors": 0}

    def counted(batches):  # the vectors the actors kept, before the driver's cap
        for b in batches:
            seen["vectors"] += len(b["tokens"].combine_chunks().flatten()) if b.num_rows else 0
            yield b

    sample, passages = sample_vectors(counted(ds.iter_batches(batch_format="pyarrow", batch_size=None)), c.codec_sample_vectors, c.codec_seed)
    if not len(sample):
        raise CorpusError("no token vector to train the codec on: every sampled passage is empty")
    # the configured names at the sample's dimension, each one the sample can train: a corpus of
    # a few documents has too few token vectors for auto's PCA (docs/codecs.md)
    chosen = {g: codecs.choose(n, sample.shape[1], len(sample), g) for g, n in wanted.items()}
    chosen["first_m"] = codecs.choose_first_m(c.first_m_codec, sample.shape[1], len(sample), chosen["tokens"].name, chosen["pooled"].name, c.pool_factor)
    names = {g: ch.name for g, ch in chosen.items() if ch.name != codecs.FIRST_M_IN_POOLED}
    drawn = fraction * vector_fraction
    n_vectors = int(seen["vectors"] / drawn) if drawn < 1 else seen["vectors"]  # the collection's stored vectors, estimated
    if placement.in_driver:
        files = train_codecs(names, sample, c.codec_seed, n_vectors, placement.threads)
    else:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        train = ray.remote(num_cpus=placement.cpus, num_gpus=gpus, max_retries=1)(train_codecs)
        files = task_result(train.remote(names, sample, c.codec_seed, n_vectors, placement.threads))
    codec_file.stage(index_url, files)
    log(
        f"trained codecs {', '.join(f'{g} {ch.describe()}' for g, ch in chosen.items())} on {len(sample):,} token vectors of {passages:,} sampled passages in {time.time() - t0:.1f} s"
    )
    return files, (_kept_batches(index_url, passages, log) if keep else [])


def _kept_batches(index_url: str, passages: int, log: Callable[[str], None]) -> list[str]:
    """The sample pass's kept batch files when they hold each of its ``passages`` passages
    exactly once (a retried actor batch could have been kept twice under another batching),
    else [] (they are dropped, and pass 2 encodes)."""
    files = staging.encoded_files(index_url)
    keys = staging.encoded_keys(files)
    distinct = keys.group_by(["block_id", "seq"]).aggregate([]).num_rows
    if keys.num_rows == passages == distinct:
        log(f"the sample pass encoded every passage: compressing its {passages:,} kept passages (no second encoding)")
        return files
    log(f"the sample pass kept {keys.num_rows:,} rows ({distinct:,} distinct) of {passages:,} passages: encoding again")
    staging.clear_encoded(index_url)
    return []


def _commit(
    corpus_url: str,
    index_url: str,
    config: IndexConfig,
    model: ModelRecord,
    blocks: list[InputBlock],
    key: dict,
    codec_files: dict[str, bytes],
    log,
    encode: Optional[dict] = None,
    guard: Optional[dict] = None,
) -> Manifest:
    """Rejects, catalog, reconciliation, then the manifest (the commit point); ``encode``:
    where the passages were encoded (``_encode_record``), kept as ``model.encode``; ``guard``:
    how its commits are kept from racing (``commit_guard``), kept as ``storage``."""
    records = committed_records(index_url, [b.block_id for b in blocks])
    rejected = catalog.write_rejects(index_url, blocks)
    scan = catalog.scan_counts(index_url, blocks)
    counts = catalog.build_catalog(index_url, [r["path"] for r in records])
    indexed = scan["valid_rows"] - scan["duplicates"]
    problems = []
    if counts["distinct_passage_keys"] != counts["passages"]:
        problems.append(f"{counts['passages'] - counts['distinct_passage_keys']} passages written twice")
    if counts["distinct_document_keys"] != indexed:
        problems.append(f"{counts['distinct_document_keys']} documents in the shards, {indexed} valid input rows")
    if indexed + rejected != scan["input_rows"]:
        problems.append(f"indexed {indexed} + rejected {rejected} != input rows {scan['input_rows']}")
    if problems:
        raise RuntimeError("index does not reconcile with its input, not committing: " + "; ".join(problems))
    codec_entries = codec_file.commit(index_url, codec_files, config.compress.codec_sample_vectors, config.compress.codec_seed)
    manifest = Manifest(
        config=config.model_dump(mode="json"),
        model=model.record(**({"encode": encode} if encode else {})),
        input={"url": corpus_url, "fingerprint": key["input"], "blocks": len(blocks), "key": key},
        counts={
            "input_rows": scan["input_rows"],
            "indexed_documents": indexed,
            "rejected": rejected,
            "duplicates": scan["duplicates"],
            "passages": counts["passages"],
            "tokens": counts["tokens"],
        },
        dim=codec_entries["tokens"]["dim_out"],
        codecs=codec_entries,
        shards=[ShardEntry(**{k: v for k, v in r.items() if k != "seq_ranges"}) for r in records],
        storage=guard or {},
    )
    index_dir.remove_orphan_shards(index_url, {r["path"] for r in records})
    commit_manifest(index_url, manifest)
    staging.clear(index_url)
    log(f"committed {index_url} (manifest version {manifest.version})")
    return manifest
