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
