"""The job options, defined once: the click commands and the standard-library `check` are built from this table.

Each option also reads a SHMGUARD_* variable (shmguard.job.ENV_VARS), so a launcher
can hand the job to the container. `job_from_options` turns the parsed values into
a Job; with --dataset it measures real batches first (that path needs torch).
Standard library only: `pip install shmguard` without extras runs `check`.
"""

from __future__ import annotations

import sys

from shmguard.units import SIZE_RULE

# (flag, option name, help); values are strings, validated by shmguard.job.make_job.
JOB_OPTIONS = (
    ("--workers", "workers", "DataLoader num_workers."),
    ("--batch-size", "batch_size", "Samples per batch."),
    ("--sample-shape", "sample_shape", "Shape of one sample, e.g. 3,224,224 (the largest, if they vary)."),
    ("--dtype", "dtype", "Element type of the sample (default float32)."),
    ("--sample-bytes", "sample_bytes", f"Size of one sample instead of a shape: {SIZE_RULE}."),
    ("--prefetch-factor", "prefetch_factor", "Batches each worker loads ahead (default 2, as PyTorch)."),
    ("--procs-per-node", "procs_per_node", "Training processes in the container, each with its own DataLoader (default 1)."),
    ("--gpus", "gpus", "GPUs the job needs (default 0; `run` also takes all)."),
    ("--sharing-strategy", "sharing_strategy", "torch.multiprocessing sharing strategy: file_descriptor (default) or file_system."),
    ("--collate", "collate", "What the collate_fn makes of a batch: default (torch's default_collate stacks samples) "
                             "or list (per-sample tensors kept in lists, e.g. lambda b: tuple(zip(*b)); each tensor "
                             "is then its own page-rounded segment in /dev/shm)."),
    ("--tensors-per-sample", "tensors_per_sample", "Tensors in one sample (e.g. 3 for image, boxes, labels; "
                                                   "default 1); numbers, strings and numpy arrays do not count."),
    ("--batch-segments", "batch_segments", "The tensor sizes of one batch as `shmguard measure` prints them "
                                           "(SIZE[xCOUNT],...): replaces the estimate from --collate."),
    ("--nccl-transport", "nccl_transport", "How the job's GPUs talk, for NCCL's own /dev/shm: shm (default: through host "
                                           "memory, the most /dev/shm) or p2p (NVLink/PCIe peer-to-peer: none)."),
    ("--nccl-version", "nccl_version", "The NCCL version the job's torch uses, e.g. 2.21.5 (python -c 'import torch; "
                                       "print(torch.cuda.nccl.version())'): NCCL's own /dev/shm depends on it. Default: "
                                       "found in the container (check, health), else sized for the version that needs most."),
)
PIN_MEMORY_HELP = "The DataLoader pins memory."
DATASET_HELP = ("Measure the sample size from real batches of this dataset factory (needs torch) "
                "instead of --sample-shape/--sample-bytes.")
COLLATE_HELP = "With --dataset: the DataLoader's collate_fn (default: default_collate)."
JOB_KEYS = tuple(name for _flag, name, _help in JOB_OPTIONS) + ("pin_memory",)


def job_from_options(values: dict, note=None, nccl_env=None):
    """The Job from the job options (popped from values); with --dataset, the sample size is measured.

    nccl_env: the environment the training processes will see (this one for `check`, the -e values
    for `run` and `render`), whose NCCL_* variables change NCCL's /dev/shm (shmguard.nccl)."""
    from shmguard.errors import UsageError
    from shmguard.job import make_job, parse_count

    raw = {key: values.pop(key, None) for key in JOB_KEYS}
    dataset, collate_fn = values.pop("dataset", None), values.pop("collate_fn", None)
    if dataset:
        if raw["sample_shape"] is not None or raw["sample_bytes"] is not None:
            raise UsageError("give the sample size once: --dataset, --sample-shape or --sample-bytes")
        if raw["batch_size"] is None:
            raise UsageError("--dataset needs --batch-size: the batches are built with it")
        if raw["batch_segments"] is not None:
            raise UsageError("give the batch once: --dataset (measured) or --batch-segments")
        from shmguard.commands.measure import measure

        measured = measure(dataset, parse_count("batch_size", raw["batch_size"], 1), collate_spec=collate_fn,
                           sharing_strategy=raw["sharing_strategy"] or "file_descriptor")
        (note or (lambda text: print(text, file=sys.stderr)))(
            f"shmguard: measured {dataset}: largest batch {measured.max_batch_bytes:,} bytes in "
            f"{measured.segment_count} shared-memory segments, {measured.max_batch_shm:,} bytes of /dev/shm")
        raw["sample_bytes"] = str(measured.sample_bytes)
        raw["batch_segments"] = measured.segment_sizes
        raw["dtype"] = None
    elif collate_fn:
        raise UsageError("--collate-fn goes with --dataset")
    from shmguard.nccl import env_of

    return make_job(**raw, nccl_env=env_of(nccl_env))


def infer_procs(options: dict, command, environ, gpus: int | None) -> list[str]:
    """Fill the job's processes per node from the command, the environment and the GPUs (shmguard.sizing), unless
    given; return the lines that say where it came from and where the sources disagree (to show once the job
    is known to be valid, so that a bad option stays one line)."""
    from shmguard import sizing

    inferred = sizing.procs_per_node(options.get("procs_per_node"), command, environ, gpus)
    lines = inferred.messages(given=options.get("procs_per_node") is not None)
    if options.get("procs_per_node") is None and inferred.source != "default":
        options["procs_per_node"] = str(inferred.value)
    return lines


def gpu_option(options: dict) -> int | None:
    """The job's --gpus as a count, when it is one (the job's own parser judges it later)."""
    text = str(options.get("gpus") or "").strip()
    return int(text) if text.isdigit() else None
