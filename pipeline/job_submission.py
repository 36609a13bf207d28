"""Running the ``jobs/`` entry points on a Ray cluster through Ray's job submission API.

The same thing as ``ray job submit --address http://HEAD:8265 --working-dir . -- python -m
mvr.jobs.index_corpus CORPUS INDEX …``, from Python: ``runtime_env()`` builds the runtime
environment (the repository as ``working_dir``, heavy or irrelevant paths excluded, the
offline switches for Hugging Face), and ``JobRunner`` wraps
``ray.job_submission.JobSubmissionClient`` (submit, wait with a timeout, logs, stop).

Under ``ray job submit`` Ray sets ``RAY_ADDRESS`` for the driver, so
``pipeline.ray_runtime.init_ray`` joins the cluster; the driver runs on the head node and
its tasks and actors anywhere in the cluster. The project is expected to be installed on
every node (``pip install -e .``, as ``ray_cluster.yaml`` does); ``working_dir`` ships the
submitter's checkout so the driver and every worker run the same code."""

from __future__ import annotations

import os
import shlex
import time
from typing import Mapping, Optional, Sequence

from ray.job_submission import JobStatus, JobSubmissionClient

# Relative to the working dir, gitignore syntax (Ray also skips what .gitignore lists).
EXCLUDES = [".git", "**/__pycache__", "*.egg-info", ".pytest_cache", "docs/*.png", "benchmarks/results", "runs"]

# Nothing is fetched from a hub at run time (the default model ships in a package).
ENV_VARS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


def runtime_env(working_dir: str = ".", env_vars: Optional[Mapping[str, str]] = None, excludes: Sequence[str] = (), **extra) -> dict:
    """The runtime env of an mvr job: ``working_dir`` (uploaded by the client), the default
    ``EXCLUDES`` plus ``excludes``, ``ENV_VARS`` updated with ``env_vars``; any other
    runtime-env field (``pip``, ``py_modules``, …) passes through ``extra``."""
    return {
        "working_dir": os.fspath(working_dir),
        "excludes": list(dict.fromkeys([*EXCLUDES, *excludes])),
        "env_vars": {**ENV_VARS, **(env_vars or {})},
        **extra,
    }


def entrypoint(job: str, args: Sequence[str] = ()) -> str:
    """``python -m mvr.jobs.{job} ARGS…``, shell-quoted (``job``: index_corpus, build_ann,
    evaluate, verify, …)."""
    return shlex.join(["python", "-m", f"mvr.jobs.{job}", *map(str, args)])


class JobFailed(RuntimeError):
    """A job ended in another state than SUCCEEDED."""

    def __init__(self, job_id: str, status: JobStatus, message: str, logs: str) -> None:
        self.job_id, self.status, self.logs = job_id, status, logs
        super().__init__(f"job {job_id} {status.value}: {message}\n{logs[-4000:]}")


class JobRunner:
    """Submit mvr jobs to the cluster whose dashboard is at ``address``
    (``http://HEAD:8265``; default ``$RAY_API_SERVER_ADDRESS`` / ``$RAY_ADDRESS``).
    ``token``: Ray's auth token when the cluster has token authentication and it is not in
    ``$RAY_AUTH_TOKEN`` / ``~/.ray/auth_token``."""

    def __init__(self, address: Optional[str] = None, token: Optional[str] = None, headers: Optional[dict] = None) -> None:
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.client = JobSubmissionClient(address, headers=headers or None)

    def submit(
        self, job: str, args: Sequence[str] = (), working_dir: str = ".", env: Optional[dict] = None, submission_id: Optional[str] = None, **kwargs
    ) -> str:
        """Submit ``python -m mvr.jobs.{job} ARGS`` with ``runtime_env(working_dir)`` (or ``env``).
        Returns the submission id. ``kwargs`` go to ``JobSubmissionClient.submit_job``
        (``entrypoint_num_cpus``, ``metadata``, …)."""
        return self.client.submit_job(
            entrypoint=entrypoint(job, args), runtime_env=env if env is not None else runtime_env(working_dir), submission_id=submission_id, **kwargs
        )

    def status(self, job_id: str) -> JobStatus:
        return self.client.get_job_status(job_id)

    def info(self, job_id: str):
        """``JobDetails``: status, message, driver node, Ray job id, times."""
        return self.client.get_job_info(job_id)

    def logs(self, job_id: str) -> str:
        return self.client.get_job_logs(job_id)

    def wait(self, job_id: str, timeout: float, poll: float = 0.5, until: Optional[set] = None) -> JobStatus:
        """Wait until the job reaches a status in ``until`` (default: a terminal one).
        ``TimeoutError`` after ``timeout`` seconds (the job is left running)."""
        until = until or TERMINAL
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(job_id)
            if status in until:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {status.value} after {timeout:.0f} s")
            time.sleep(poll)

    def run(self, job: str, args: Sequence[str] = (), timeout: float = 600, **kwargs) -> str:
        """Submit, wait, and return the job's logs; ``JobFailed`` unless it SUCCEEDED."""
        job_id = self.submit(job, args, **kwargs)
        status = self.wait(job_id, timeout)
        logs = self.logs(job_id)
        if status != JobStatus.SUCCEEDED:
            raise JobFailed(job_id, status, self.info(job_id).message or "", logs)
        return logs

    def stop(self, job_id: str, timeout: float = 60) -> JobStatus:
        """Stop the job (SIGTERM to the driver, SIGKILL after Ray's grace period) and wait
        until it has ended."""
        self.client.stop_job(job_id)
        return self.wait(job_id, timeout)
