"""Index-version switches of a running service: how long ``deploy`` takes to move the service
to a new version (an ``mvr delete`` of one document a round, then ``deploy``, as ``mvr serve``
again, ``--poll`` or ``POST /admin/reload`` do), and the whole machine's busy core-seconds
while it does, with the encoder in the ingress (the default) and as its own deployment.

    python benchmarks/version_switch.py [--dataset ../shared/datasets/msmarco-sample] [--docs 200] [--rounds 4]

The index (the first ``--docs`` passages, default settings, FAISS IVFPQ partitions P = 2 of
tokens) is built first and served once each way (not timed). A switch to a version whose
ingress is unchanged is made in place by the running replicas (``pipeline/serving/
switchboard.py``); the tree before that rolled the ingress over to new replicas at every switch
(run this script there with ``PYTHONPATH=<checkout>`` to compare). Run it alone: every figure
is a time on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from job_overhead import busy_core_s  # this folder is the script's path


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=str(root.parent / "shared" / "datasets" / "msmarco-sample"))
    p.add_argument("--docs", type=int, default=200)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--port", type=int, default=8711)
    args = p.parse_args()

    from mvr.pipeline.config import AnnBuildConfig, IndexConfig, ServeConfig
    from mvr.pipeline.indexing.ann_build import build_ann
    from mvr.pipeline.indexing.corpus_job import index_corpus
    from mvr.pipeline.indexing.updates import delete_documents
    from mvr.pipeline.ray_runtime import init_ray
    from mvr.pipeline.serving.app import deploy, shutdown
    from mvr.pipeline.serving.client import SearchClient

    init_ray(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="mvr-switch-"))
    index = str(work / "index")
    index_corpus(args.dataset, index, IndexConfig.from_yaml(None, limit=args.docs), log=lambda _: None)
    build_ann(index, AnnBuildConfig(backend="faiss-ivfpq", partitions=2, vectors=["tokens"], bm25=None), log=lambda _: None)
    ids = [json.loads(line)["_id"] for _, line in zip(range(args.rounds * 2), open(Path(args.dataset) / "corpus.jsonl"))]
    rows = []
    for placement in ("ingress", "deployment"):
        config = ServeConfig.model_validate({"port": args.port, "app_name": f"switch-{placement}", "modes": ["maxsim"], "encoder": {"placement": placement}})
        deploy(index, config, log=lambda _: None)
        client = SearchClient(f"http://127.0.0.1:{args.port}")
        took, cores = [], []
        for _ in range(args.rounds):
            delete_documents(index, [ids.pop(0)], log=lambda _: None)
            c0, t0 = busy_core_s(), time.perf_counter()
            d = deploy(index, config, log=lambda _: None)
            took.append(time.perf_counter() - t0)
            cores.append(busy_core_s() - c0)
            assert client.search("what is the manhattan project", 10, "maxsim")["version"] == d.version
        shutdown(config)
        rows.append((placement, took, cores))
    print(f"{args.rounds} switches each, {args.docs}-passage index, FAISS P = 2")
    print(f"{'encoder placement':<18} {'switch s p50':>12} {'each':>28} {'core-s p50':>10}")
    for placement, took, cores in rows:
        print(f"{placement:<18} {statistics.median(took):>12.2f} {' '.join(f'{t:.1f}' for t in took):>28} {statistics.median(cores):>10.1f}")


if __name__ == "__main__":
    main()
