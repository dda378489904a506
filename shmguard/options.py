"""The job options as commands take them: the click commands and the standard-library `check` declare them
from the one table, shmguard.job.OPTIONS (a row per option: its type, flag, SHMGUARD_* variable,
shmguard.io/* annotation, click and argparse declarations, the DataLoader attribute the API reads).

Each option also reads its SHMGUARD_* variable, so a launcher can hand the job to the container. `JobOptions` holds the parsed values and builds
them into a Job (`job`, through shmguard.declared); with --dataset it measures real
batches first (that path needs torch).
Standard library only: `pip install shmguard` without extras runs `check`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

from shmguard.errors import UsageError
from shmguard.job import NAMES
from shmguard.record import Record

if TYPE_CHECKING:
    from shmguard.job import Job

DATASET_HELP = ("Measure the sample size from real batches of this dataset factory (needs torch) "
                "instead of --sample-shape/--sample-bytes.")
COLLATE_HELP = "With --dataset: the DataLoader's collate_fn (default: default_collate)."
JOB_KEYS = NAMES  # the job options' names (shmguard.job.OPTIONS, the one table); --dataset and --collate-fn are measuring's


class JobOptions(Record):
    """The job as it was given (options or SHMGUARD_* variables): raw text, None where not given.

    Made once, right after the command line is parsed, and never rewritten: a step that
    completes it (`run --tune`'s recommendation, Slurm's GPUs) returns a new one. `job`
    builds it into the Job `check`, `run` and `render` size; `defaults` gives the values
    that `patch`, `explain` and the webhook complete from a pod's annotations.
    """

    workers: str | None = None
    batch_size: str | None = None
    sample_shape: str | None = None
    dtype: str | None = None
    sample_bytes: str | None = None
    prefetch_factor: str | None = None
    procs_per_node: str | None = None
    gpus: str | None = None
    sharing_strategy: str | None = None
    collate: str | None = None
    tensors_per_sample: str | None = None
    batch_segments: str | None = None
    nccl_transport: str | None = None
    nccl_version: str | None = None
    pin_memory: str | bool | None = None
    dataset: str | None = None  # MODULE:CALLABLE whose batches are measured (needs torch)
    collate_fn: str | None = None  # with dataset: the DataLoader's collate_fn

    @classmethod
    def take(cls, values: dict) -> JobOptions:
        """The job options popped from a mapping of parsed options (the rest stays: the command's own)."""
        return cls(**{name: values.pop(name, None) for name in (*JOB_KEYS, "dataset", "collate_fn")})

    def given(self) -> dict[str, Any]:
        """The job values that were given, keyed by option name."""
        return {name: getattr(self, name) for name in JOB_KEYS if getattr(self, name) is not None}

    def job(self, command=(), environ=None, note: Callable[[str], None] | None = None,
            devices=None) -> tuple[Job, list[str]]:
        """The one JobOptions -> Job builder, of `check`, `run` and `render`: these options over the SHMGUARD_*
        variables of the environment the training processes see (this one for `check`, the -e values for `run`
        and `render`), whose NCCL_* variables change NCCL's own /dev/shm; the processes per node, unless given,
        inferred from the command, that environment and the GPUs (--gpus, else devices: the accelerators `check`
        sees in its container, a pod.Accelerators). It is shmguard.declared.declared_job, the reader
        every part of shmguard calls, with these options as the layer given. With --dataset, its batches are
        measured first. Returns the Job and the lines to show once it is valid (where the processes per node
        came from, where sources disagree)."""
        from shmguard.declared import declared_job
        from shmguard.job import make_job

        values = self.values(note)
        declared = declared_job(env=environ or {}, command=command, devices=devices, given=values)
        if declared.job is None:
            make_job(**values)  # raises: the one message that names what is missing
        assert declared.job is not None
        return declared.job, declared.lines()

    def defaults(self, note: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Job values for commands that complete them per pod or container from its annotations and variables
        (patch, explain): the given ones, with --dataset the measured sample and segments too; validated when
        they describe a job, so that a bad value is one error, not one per template."""
        raw = self.values(note)
        if "workers" in raw or "batch_size" in raw:
            from shmguard.job import make_job

            make_job(**raw)
        return raw

    def values(self, note: Callable[[str], None] | None = None) -> dict[str, Any]:
        """The given values, with --dataset the measured sample size and segments too (not validated: a
        container's own variables may complete them)."""
        raw = self.given()
        if self.dataset:
            raw.update(self._measured(note))
        elif self.collate_fn:
            raise UsageError("--collate-fn goes with --dataset")
        return raw

    def _measured(self, note) -> dict[str, Any]:
        """The sample size and segments of the dataset's largest batch, measured (needs torch)."""
        from shmguard.job import parse_count

        if self.sample_shape is not None or self.sample_bytes is not None:
            raise UsageError("give the sample size once: --dataset, --sample-shape or --sample-bytes")
        if self.batch_size is None:
            raise UsageError("--dataset needs --batch-size: the batches are built with it")
        if self.batch_segments is not None:
            raise UsageError("give the batch once: --dataset (measured) or --batch-segments")
        from shmguard.measuring import measure

        measured = measure(str(self.dataset), parse_count("batch_size", self.batch_size, 1), collate_spec=self.collate_fn,
                           sharing_strategy=self.sharing_strategy or "file_descriptor")
        (note or (lambda text: print(text, file=sys.stderr)))(
            f"shmguard: measured {self.dataset}: largest batch {measured.max_batch_bytes:,} bytes in "
            f"{measured.segment_count} shared-memory segments, {measured.max_batch_shm:,} bytes of /dev/shm")
        from shmguard.segments import encode

        return {"sample_bytes": str(measured.sample_bytes), "batch_segments": encode(measured.segment_sizes)}
