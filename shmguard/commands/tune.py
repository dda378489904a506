"""`shmguard tune`: sweep num_workers (and prefetch factors) on the user's DataLoader and recommend the knee.

For each step, the user's dataset runs through a real DataLoader for a fixed number
of batches; shmguard measures batches per second (after the first batch, so worker
start-up is not counted), the peak of /dev/shm used and the peak memory of the
container's cgroup. The batches prefetched while the workers start are drained before the clock starts. A step whose predicted shm (the footprint model on the measured
batch size) does not fit in the free /dev/shm is skipped and reported, not run into
a Bus error. The recommendation: the smallest num_workers within 5% of the best
throughput, with the shm it needs. torch is imported here only.
"""

from __future__ import annotations

import os
import struct
import time
import warnings
import zlib

from shmguard import model, segments, sizing
from shmguard.engine.peak import PeakSampler, ProcessPeakSampler
from shmguard.errors import UsageError
from shmguard.job import make_job
from shmguard.measuring import Measurement, UserCodeError, load_dataset, measure_dataset, user_traceback
from shmguard.probe import Root
from shmguard.record import Record
from shmguard.units import docker_size, format_size

KNEE_TOLERANCE = 0.05


class Step(Record):
    workers: int
    prefetch_factor: int
    predicted_shm: int
    batches_per_second: float | None = None
    peak_shm: int | None = None
    peak_memory: int | None = None
    skipped: str | None = None


class TuneResult(Record):
    measurement: Measurement
    steps: tuple[Step, ...]
    recommended: Step | None


def default_sweep(effective_cpus: float | None) -> list[int]:
    """0, 1, 2, 4, … up to the effective CPUs (and the CPU count itself)."""
    top = max(1, int(effective_cpus or os.cpu_count() or 1))
    sweep = [0]
    n = 1
    while n <= top:
        sweep.append(n)
        n *= 2
    if sweep[-1] != top:
        sweep.append(top)
    return sweep


def parse_list(text: str, option: str, minimum: int) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{option} takes comma-separated whole numbers like 0,2,4,8, not {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise UsageError(f"{option} takes numbers of at least {minimum}, not {text!r}")
    return sorted(set(values))


def recommend(steps: list[Step]) -> Step | None:
    """The smallest num_workers whose throughput is within 5% of the best step's."""
    ran = [s for s in steps if s.batches_per_second]
    if not ran:
        return None
    best = max(rate(s) for s in ran)
    good = [s for s in ran if rate(s) >= (1 - KNEE_TOLERANCE) * best]
    return min(good, key=lambda s: (s.workers, s.prefetch_factor, -rate(s)))


def rate(step: Step) -> float:
    """A step's batches/s; 0 for one that was skipped."""
    return step.batches_per_second or 0.0


def resource_sampler(root: Root, memory_file: str | None) -> PeakSampler:
    """Peak of the cgroup's memory ("memory"), every 2 ms, in a thread."""

    def memory() -> int | None:
        if not memory_file:
            return None
        try:
            with open(memory_file) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    return PeakSampler({"memory": memory}, interval=0.002)


def shm_used(root: Root) -> int | None:
    from shmguard.probe.tmpfs import read_tmpfs

    try:
        return read_tmpfs("/dev/shm", root).used
    except OSError:
        return None


def shm_sampler(root: Root) -> ProcessPeakSampler:
    """Peak of /dev/shm's used bytes, sampled by a separate process every 0.2 ms (as `run` does): a thread here
    would share the GIL with the DataLoader being timed and miss short peaks."""
    return ProcessPeakSampler(root.join("/dev/shm"), interval=0.0002)


def memory_file(root: Root) -> str | None:
    """The memory usage file of this process's cgroup (v2 memory.current or v1 usage_in_bytes), if found."""
    from shmguard.probe import cgroup
    from shmguard.probe.mountinfo import read_mountinfo

    mounts, _ = read_mountinfo(root)
    entries, _ = cgroup.read_proc_cgroup(root)
    levels, _ = cgroup.controller_dirs(root, mounts, entries, "memory")
    if not levels:
        return None
    name = "memory.current" if levels[0].version == "v2" else "memory.usage_in_bytes"
    path = root.join(os.path.join(levels[0].path, name))
    return path if os.path.exists(path) else None


def run_step(dataset, collate, batch_size: int, workers: int, prefetch: int, batches: int, root: Root,
             mem_file: str | None) -> tuple[float, int, int]:
    from torch.utils.data import DataLoader

    base = shm_used(root) or 0
    with resource_sampler(root, mem_file) as sampler, shm_sampler(root) as shm, warnings.catch_warnings():
        # Going past the CPUs is the point of the sweep; torch's "excessive worker creation" warning is noise here.
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=collate,
                            prefetch_factor=prefetch if workers else None, timeout=120 if workers else 0,
                            persistent_workers=False)
        iterator = iter(loader)
        try:
            # Worker start-up, and the batches prefetched meanwhile, are not throughput: drain them first.
            for _ in range(prefetch * workers + 1):
                next(iterator)
            started = time.perf_counter()
            done = 0
            for _ in range(batches):
                try:
                    next(iterator)
                except StopIteration:
                    break
                done += 1
            elapsed = time.perf_counter() - started
        except StopIteration:
            raise UsageError(f"the dataset is too small to time num_workers={workers}: it needs more than "
                             f"{prefetch * workers + 1 + batches} batches of {batch_size}") from None
        except Exception as exc:
            raise UserCodeError(f"the DataLoader with num_workers={workers} raised:\n{user_traceback(exc)}") from None
        finally:
            del iterator
    if done == 0:
        raise UsageError(f"the dataset has too few samples for {batches} batches of {batch_size}")
    return done / elapsed, max(0, (shm.peaks["shm"] or 0) - base), sampler.peaks["memory"] or 0


def best(steps) -> Step | None:
    """The fastest step so far (for progress), or None."""
    return max((s for s in steps if s.batches_per_second), key=lambda s: s.batches_per_second, default=None)


def tune(dataset_spec: str, batch_size: int, workers: list[int] | None = None, prefetch_factors: list[int] | None = None,
         batches: int = 20, collate_spec: str | None = None, root: Root | None = None, progress=None,
         measure_progress=None) -> TuneResult:
    from shmguard.probe.snapshot import take_snapshot

    root = root or Root()
    dataset, collate = load_dataset(dataset_spec, collate_spec)
    measurement = measure_dataset(dataset, collate, dataset_spec, batch_size, progress=measure_progress)
    snapshot = take_snapshot(root, use_nvml=False)
    sweep = workers if workers is not None else default_sweep(snapshot.cpu.effective)
    factors = prefetch_factors or [2]
    free = snapshot.shm.free
    mem_file = memory_file(root)
    steps: list[Step] = []
    total = len(factors) * len(sweep)
    for prefetch in factors:
        for n in sweep:
            job = make_job(workers=n, batch_size=batch_size, sample_bytes=str(measurement.sample_bytes),
                           prefetch_factor=prefetch, batch_segments=measurement.segment_sizes)
            predicted = model.shm_bytes(job)
            if free is not None and predicted > free:
                steps.append(Step(n, prefetch, predicted, skipped=f"needs {format_size(predicted)} of /dev/shm, "
                                                                  f"{format_size(free)} is free"))
                if progress:
                    progress(steps[-1], len(steps), total, best(steps))
                continue
            rate, peak_shm, peak_memory = run_step(dataset, collate, batch_size, n, prefetch, batches, root, mem_file)
            steps.append(Step(n, prefetch, predicted, rate, peak_shm, peak_memory or None))
            if progress:
                progress(steps[-1], len(steps), total, best(steps))
    return TuneResult(measurement, tuple(steps), recommend(steps))


def table(result: TuneResult) -> str:
    best = max((rate(s) for s in result.steps), default=0.0)
    lines = [f"{'workers':>7} {'prefetch':>8} {'batches/s':>10} {'peak shm':>10} {'model shm':>10} {'peak mem':>10}  "]
    for s in result.steps:
        if s.skipped:
            lines.append(f"{s.workers:>7} {s.prefetch_factor:>8} {'skipped':>10}  {s.skipped}")
            continue
        bar = "#" * int(round(30 * rate(s) / best)) if best else ""
        mem = format_size(s.peak_memory) if s.peak_memory else "-"
        shm = format_size(s.peak_shm) if s.peak_shm is not None else "-"
        lines.append(f"{s.workers:>7} {s.prefetch_factor:>8} {s.batches_per_second:>10.1f} {shm:>10} "
                     f"{format_size(s.predicted_shm):>10} {mem:>10}  {bar}")
    rec = result.recommended
    if rec:
        lines.append(f"recommended: num_workers={rec.workers} (prefetch_factor={rec.prefetch_factor}), "
                     f"{rec.batches_per_second:.1f} batches/s, within {KNEE_TOLERANCE:.0%} of the best; "
                     f"it needs /dev/shm {format_size(rec.predicted_shm)} (--shm-size={docker_size(sizing.shm_size_for(rec.predicted_shm))})")
    else:
        lines.append("no step could run: give the container more /dev/shm (shmguard check says how much)")
    return "\n".join(lines)


def as_json(result: TuneResult) -> dict:
    def step(s: Step) -> dict:
        return {"workers": s.workers, "prefetch_factor": s.prefetch_factor, "batches_per_second": s.batches_per_second,
                "peak_shm_bytes": s.peak_shm, "predicted_shm_bytes": s.predicted_shm, "peak_memory_bytes": s.peak_memory,
                "skipped": s.skipped}

    return {"dataset": result.measurement.dataset, "batch_size": result.measurement.batch_size,
            "batch_bytes": result.measurement.max_batch_bytes,
            "batch_segments": segments.encode(result.measurement.segment_sizes),
            "steps": [step(s) for s in result.steps],
            "recommended": step(result.recommended) if result.recommended else None}


def write_png(path: str, result: TuneResult, width: int = 480, height: int = 240) -> None:
    """A bar chart of batches/s per step as a PNG (no plotting library needed); the recommended bar is green."""
    from shmguard.files import write_atomic_bytes

    ran = [s for s in result.steps if s.batches_per_second]
    best = max((rate(s) for s in ran), default=1.0)
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    slot = width // max(1, len(result.steps))
    for i, s in enumerate(result.steps):
        if not s.batches_per_second:
            color, bar_height = (200, 200, 200), 4
        else:
            color = (40, 160, 60) if s == result.recommended else (60, 90, 200)
            bar_height = max(2, int((height - 20) * rate(s) / best))
        for y in range(height - bar_height, height):
            for x in range(i * slot + slot // 6, (i + 1) * slot - slot // 6):
                pixels[y][x] = color
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    write_atomic_bytes(path, png)


def tune_command(dataset: str, batch_size: str, collate_fn: str | None, workers: str | None,
                 prefetch_factors: str | None, batches: int, plot: str | None, print_json: bool,
                 show_progress: bool | None) -> tuple[str, int]:
    """`shmguard tune` as the command line gives it: a line per step on stderr (when wanted), the table (or the JSON
    object) to print, and the exit code (1 when no step could be recommended)."""
    import json

    from shmguard.job import parse_count
    from shmguard.jsonout import stamp
    from shmguard.progress import Reporter, wanted

    sweep = parse_list(workers, "--workers", 0) if workers else None
    factors = parse_list(prefetch_factors, "--prefetch-factors", 1) if prefetch_factors else None
    report = Reporter("shmguard tune", wanted(show_progress, print_json))
    reading = Reporter("shmguard tune", report.enabled, every=0.5)

    def progress(step, done, total, best) -> None:
        what = step.skipped or f"{step.batches_per_second:.1f} batches/s"
        lead = f"; best so far num_workers={best.workers} ({best.batches_per_second:.1f} batches/s)" if best else ""
        report(done, total, f"num_workers={step.workers} prefetch_factor={step.prefetch_factor}: {what}{lead}",
               force=True)

    result = tune(dataset, parse_count("batch_size", batch_size, 1), sweep, factors, batches, collate_fn,
                  progress=progress, measure_progress=lambda done, total, what: reading(done, total, what))
    if plot:
        write_png(plot, result)
    text = json.dumps(stamp(as_json(result)), indent=2) if print_json else table(result)
    return text, 0 if result.recommended else 1


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.job import ENV_VARS

    @click.command("tune")
    @click.option("--dataset", required=True, metavar="MODULE:CALLABLE", help="A callable returning your Dataset.")
    @click.option("--batch-size", required=True, envvar=ENV_VARS["batch_size"], metavar="B", help="Samples per batch.")
    @click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help="Your DataLoader's collate_fn.")
    @click.option("--workers", "workers", metavar="LIST", help="num_workers to try, e.g. 0,2,4,8 (default: 0, 1, 2, 4, … up to the CPUs).")
    @click.option("--prefetch-factors", metavar="LIST", help="prefetch factors to try (default: 2).")
    @click.option("--batches", type=click.IntRange(min=1, max=100_000), default=20, show_default=True, help="Batches timed per step.")
    @click.option("--plot", "plot", metavar="FILE.png", help="Also write a bar chart of the throughput as a PNG.")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    @click.option("--progress/--no-progress", "show_progress", default=None,
                  help="A line per step on stderr (default: when stderr is a terminal and not --json).")
    def tune_cli(dataset, batch_size, collate_fn, workers, prefetch_factors, batches, plot, as_json, show_progress) -> int:
        """Sweep num_workers on your DataLoader and recommend the smallest within 5% of the best throughput.

        Each step runs real batches and reports batches/s, the peak /dev/shm and memory;
        steps that would not fit in the free /dev/shm are skipped. Needs torch.
        """
        text, code = tune_command(dataset, batch_size, collate_fn, workers, prefetch_factors, batches, plot, as_json,
                                  show_progress)
        click.echo(text)
        return code

    return tune_cli
