"""`shmguard measure`: the bytes a real batch of the user's dataset puts through shared memory, printed.

The measuring is shmguard.measuring's (below the job options, which measure a --dataset
too); this module words what it found, as text or as the JSON object `--json` prints.
"""

from __future__ import annotations

from shmguard import segments
from shmguard.measuring import Measurement
from shmguard.units import format_size


def report_text(m: Measurement) -> str:
    lines = [f"shmguard measure: {m.dataset}, {m.samples} samples in {m.batches} batches of {m.batch_size}",
             f"  largest batch through shared memory: {format_size(m.max_batch_bytes)} ({m.max_batch_bytes:,} bytes)"
             + (f"; mean {format_size(m.mean_batch_bytes)}" if m.mean_batch_bytes != m.max_batch_bytes else "")]
    shown = m.tensors if len(m.tensors) <= 12 else m.tensors[:10]
    for t in shown:
        lines.append(f"    {t.path}: {t.dtype} {list(t.shape)} = {format_size(t.bytes)}")
    if len(shown) < len(m.tensors):
        lines.append(f"    … and {len(m.tensors) - len(shown)} more tensors")
    lines.append(f"  in /dev/shm: {m.segment_count} segments (one per tensor, each rounded up to {segments.PAGE}-byte "
                 f"pages; {m.sharing_strategy}): {format_size(m.max_batch_shm)} ({m.max_batch_shm:,} bytes) per batch")
    for kind, count, size in m.pipe_leaves:
        lines.append(f"  through the worker's pipe, not /dev/shm: {count} {kind}{'s' if count != 1 else ''}"
                     + (f" ({format_size(size)})" if size else ""))
    lines.append(f"  per sample: {format_size(m.sample_bytes)}; use {m.options()}")
    lines.append(f"  e.g. shmguard check --workers N {m.options()}")
    return "\n".join(lines)


def report_json(m: Measurement) -> dict:
    return {"dataset": m.dataset, "batch_size": m.batch_size, "samples": m.samples, "batches": m.batches,
            "max_batch_bytes": m.max_batch_bytes, "mean_batch_bytes": m.mean_batch_bytes,
            "sample_bytes": m.sample_bytes, "options": m.options(),
            "sharing_strategy": m.sharing_strategy, "segment_count": m.segment_count,
            "batch_shm_bytes": m.max_batch_shm, "batch_segments": segments.encode(m.segment_sizes),
            "pipe": [{"kind": kind, "count": count, "bytes": size} for kind, count, size in m.pipe_leaves],
            "tensors": [{"path": t.path, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.bytes} for t in m.tensors]}


def measure_command(dataset: str, batch_size: str, collate_fn: str | None, samples: int, seed: int,
                    sharing_strategy: str, as_json: bool, show_progress: bool | None) -> str:
    """`shmguard measure` as the command line gives it: the text (or the JSON object) to print."""
    import json

    from shmguard.job import parse_count
    from shmguard.jsonout import stamp
    from shmguard.measuring import measure
    from shmguard.progress import Reporter, wanted

    reading = Reporter("shmguard measure", wanted(show_progress, as_json), every=0.5)
    result = measure(dataset, parse_count("batch_size", batch_size, 1), samples=samples, seed=seed,
                     collate_spec=collate_fn, sharing_strategy=sharing_strategy,
                     progress=lambda done, total, what: reading(done, total, what))
    return json.dumps(stamp(report_json(result)), indent=2) if as_json else report_text(result)


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.job import ENV_VARS, SHARING_STRATEGIES

    @click.command("measure")
    @click.option("--dataset", required=True, metavar="MODULE:CALLABLE", help="A callable returning your Dataset or IterableDataset.")
    @click.option("--batch-size", required=True, envvar=ENV_VARS["batch_size"], metavar="B", help="Samples per batch.")
    @click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help="Your DataLoader's collate_fn (default: default_collate).")
    @click.option("--samples", type=click.IntRange(min=1, max=100_000), default=32, show_default=True, help="Samples to read (random, seeded).")
    @click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=0, show_default=True, help="Seed for the sample order.")
    @click.option("--sharing-strategy", "sharing_strategy", type=click.Choice(SHARING_STRATEGIES),
                  default=SHARING_STRATEGIES[0], show_default=True, envvar=ENV_VARS["sharing_strategy"],
                  help="torch.multiprocessing sharing strategy (file_system adds a 64-byte header to every segment).")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    @click.option("--progress/--no-progress", "show_progress", default=None,
                  help="Samples read so far on stderr (default: when stderr is a terminal and not --json).")
    def measure_cli(dataset, batch_size, collate_fn, samples, seed, sharing_strategy, as_json, show_progress) -> int:
        """Measure the bytes a real batch of your dataset puts through shared memory.

        Builds batches with the DataLoader's collate and lists every tensor in them: in a
        worker each becomes its own segment in /dev/shm, rounded up to pages (the batch
        taking the most counts when samples vary). Numpy arrays, strings and other
        objects go through the worker's pipe and are listed apart. Prints the options
        that describe the job to check, run, render and patch.
        Needs torch. Exit 2 when the module cannot be imported or your code raises
        (its traceback is shown).
        """
        click.echo(measure_command(dataset, batch_size, collate_fn, samples, seed, sharing_strategy, as_json,
                                   show_progress))
        return 0

    return measure_cli
