"""The signatures: each a rule with its pattern, its verdict, its fix and the public log it came from.

RULES is one ordered table. Its order is the diagnosis's priority: the first rule
that fires gives the answer, so messages that can only mean a full /dev/shm come
first, then the facts (an OOM kill), then the look-alikes, then the symptoms that are
typical of shared memory but prove nothing. The same order classifies each log line:
a line is the kind of the first rule whose pattern matches it.

A new signature is one entry here and one log under tests/data/explain/public/ (its
`case`), which tests/unit/diagnosis/test_rules_public.py scores. An entry with a fixed verdict
needs no code: `summary` is formatted with the pattern's named groups, `fix` is a text
or one of the advice functions. Only verdicts that depend on the facts (a /dev/shm
peak, the OOM flag, what NCCL said of the failure) have a `decide` function below.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from shmguard import sizing
from shmguard.diagnosis import advice
from shmguard.diagnosis.advice import (
    memory_advice,
    nofile_advice,
    peak_full,
    peak_low,
    peak_of,
    shm_advice,
)
from shmguard.diagnosis.records import (
    LIKELY,
    NO_FAILURE,
    NOT_SHARED_MEMORY,
    SHARED_MEMORY,
    SIGBUS_EXIT,
    SIGKILL_EXIT,
    UNDETERMINED,
    Diagnosis,
    Evidence,
    Signal,
)
from shmguard.fixes import Want, shm_fixes
from shmguard.record import Record
from shmguard.terminal import printable, strip_sequences
from shmguard.units import GIB, format_size, parse_size, slurm_size


class Context(Record):
    """One diagnosis under way: the evidence (with what the log adds), the log's signals, the platforms."""

    ev: Evidence
    signals: tuple[Signal, ...]
    platforms: tuple[str | None, ...]
    base: tuple[str, ...]  # the facts, as phrases
    seen: tuple[str, ...] = ()  # the facts the log itself gave: "exit_code", "shm_size"

    def first(self, *kinds: str) -> Signal | None:
        return next((s for s in self.signals if s.kind in kinds), None)

    def all(self, *kinds: str) -> list[Signal]:
        return [s for s in self.signals if s.kind in kinds]

    def make(self, verdict: str, cause: str, summary: str, fix: str | None = None, signal: Signal | None = None,
             shm_needed: int | None = None, memory_needed: int | None = None) -> Diagnosis:
        # Log text is printed by explain and run: no terminal escape or control character gets through.
        evidence = tuple(printable(e) for e in [*self.base, *advice.signal_quote(signal)])
        return Diagnosis(verdict, cause, printable(summary), printable(fix) if fix else fix, evidence, shm_needed,
                         memory_needed)


Decide = Callable[[Context, "Signal | None"], "Diagnosis | None"]
Fix = Callable[[Context], "tuple[str | None, int | None]"]


class Rule(Record):
    """One signature. `kind` names the log lines its patterns match; `cause` the diagnosis it gives ("" for a
    rule that only marks lines for another's decision); `fires_on` the kinds it decides on (default: its own;
    none: a rule on the facts alone, always asked)."""

    cause: str
    verdict: str | None = None
    summary: str = ""  # formatted with the pattern's named groups (and `line`)
    fix: Any = None  # a text, or a Fix function: (text, bytes of /dev/shm to give)
    kind: str = ""
    patterns: tuple[re.Pattern[str], ...] = ()
    where: Any = None  # (match, line, lines before) -> details, or None: the line is not this kind after all
    fires_on: tuple[str, ...] = ()
    always: bool = False  # decide even when the log has none of its kinds (on the facts alone)
    decide: Any = None  # a Decide function, for verdicts that depend on the facts
    case: str = ""  # the log it was written from: tests/data/explain/…

    @property
    def triggers(self) -> tuple[str, ...]:
        return self.fires_on or ((self.kind,) if self.kind else ())

    def diagnose(self, ctx: Context) -> Diagnosis | None:
        if not self.cause:
            return None
        signal = ctx.first(*self.triggers) if self.triggers else None
        if self.triggers and signal is None and not self.always:
            return None
        if self.decide is not None:
            return self.decide(ctx, signal)
        assert self.verdict is not None, f"rule {self.cause} has neither a verdict nor a decide function"
        fix, needed = self.fix(ctx) if callable(self.fix) else (self.fix, None)
        details = {**(signal.details if signal else {}), "line": signal.line if signal else ""}
        summary = self.summary.format_map(_Details(details))
        return ctx.make(self.verdict, self.cause, summary, fix, signal, shm_needed=needed)


class _Details(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def compile_all(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


# --- facts and details the rules read --------------------------------------------------------------------

ENOSPC = re.compile(r"No space left on device|\[Errno 28\]|\bENOSPC\b")
# What a line near an ENOSPC says about the write that failed (a traceback reads upwards).
SHM_CALL = re.compile(r"_new_shared|share_memory_|_share_fd|_share_filename|multiprocessing/shared_memory|"
                      r"SharedMemory\(|shm_open|/dev/shm|<torch_")
SEMLOCK_CALL = re.compile(r"\bSemLock\b|multiprocessing/synchronize\.py")
# torch's own segment names, as its allocator prints them: `</torch_57_3981_1>` (file_system) or `<torch_…>`.
TORCH_SEGMENT = re.compile(r"/?torch_\d+_\d+(?:_\d+)?")
TORCH_SEGMENT_IN_LINE = re.compile(r"</?torch_\d+_")
CHECKPOINT_CALL = re.compile(r"torch/serialization\.py|\btorch\.save\(")
CONTEXT_LINES = 15
PATH = re.compile(r"(?<![\w.])/(?:[\w.@+~-]+/?)+")
SHM_PATHS = ("/dev/shm", "/run/shm")


def place_enospc(line: str, before: list[str]) -> tuple[str, dict]:
    """ENOSPC, placed: a semaphore (SemLock, in /dev/shm), /dev/shm (a path or a shared-memory call), another
    path, torch.save, or nowhere known."""
    paths = [p.rstrip("/'\":,") for p in PATH.findall(line) if not TORCH_SEGMENT.fullmatch(p.rstrip("/'\":,>"))]
    shm_paths = [p for p in paths if p.startswith(SHM_PATHS)]
    other = [p for p in paths if not p.startswith(SHM_PATHS)]
    if shm_paths or TORCH_SEGMENT_IN_LINE.search(line):
        segment = re.search(r"<[^>]*torch_[^>]*>", line)
        return "enospc-shm", {"path": shm_paths[0] if shm_paths else segment.group() if segment else None}
    if other:
        return "enospc-elsewhere", {"path": other[0]}
    context = "\n".join(before[-CONTEXT_LINES:])
    if CHECKPOINT_CALL.search(context):
        return "enospc-checkpoint", {}
    if SEMLOCK_CALL.search(context):
        return "enospc-semlock", {}
    if SHM_CALL.search(context):
        return "enospc-shm", {"path": "a shared-memory segment"}
    return "enospc-unplaced", {}


def enospc_is(kind: str):
    def where(match: re.Match[str], line: str, before: list[str]) -> dict | None:
        placed, details = place_enospc(line, before)
        return details if placed == kind else None
    return where


def nccl_details(match: re.Match[str], line: str, before: list[str]) -> dict:
    details: dict[str, Any] = {k: v for k, v in match.groupdict().items() if v is not None}
    if "size" in details:
        details["size"] = int(details["size"])
    return details


def ray_asked(match: re.Match[str], line: str, before: list[str]) -> dict:
    """What Ray's message says /dev/shm should hold: its `--shm-size=N.NNgb` (GiB: Ray divides by 2**30),
    or the object store it was configured with (GB: it divides by 1e9)."""
    groups = match.groupdict()
    asked = None
    if groups.get("gb"):
        asked = int(float(groups["gb"]) * GIB)
    elif groups.get("store"):
        asked = int(float(groups["store"]) * 10**9)
    return {**{k: v for k, v in groups.items() if v is not None}, "asked": asked}


def df_size(match: re.Match[str], line: str, before: list[str]) -> dict | None:
    """A `df` (or `df -h`) line of /dev/shm: its size, and whether it is full."""
    size = parse_df_size(match.group("size"))
    if size is None:
        return None
    return {"size": size, "full": int(match.group("use")) >= 98}


DF_UNITS = {"": 1024, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_df_size(text: str) -> int | None:
    """`64M`, `1.0G` (df -h, powers of 1024) or `65536` (df's 1K blocks) in bytes."""
    m = re.fullmatch(r"(\d+(?:[.,]\d+)?)([KMGT]?)", text)
    if not m:
        return None
    return int(float(m.group(1).replace(",", ".")) * DF_UNITS[m.group(2)])


def job_memory(match: re.Match[str], line: str, before: list[str]) -> dict | None:
    """Slurm's memory for the job (`#SBATCH --mem=256M`, scontrol's `MinMemoryNode=256M`): M is MiB there."""
    try:
        return {"bytes": parse_size(match.group("mem").upper())}
    except ValueError:
        return None


def exit_code_of(match: re.Match[str], line: str, before: list[str]) -> dict:
    return {"code": int(match.group("code"))}


# --- the decisions that depend on the facts ----------------------------------------------------------------

def ended_well(ctx: Context, _: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if ev.exit_code != 0 or ev.oom_killed:
        return None
    noted = ctx.signals[0] if ctx.signals else None
    return ctx.make(NO_FAILURE, "none", "The container ended well (exit 0)" +
                    (", though its log shows the message below; it did not end the job." if noted else
                     " and its log shows no shared-memory failure."), None, noted)


def worker_bus_error(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    fix, needed = shm_advice(ctx)
    who = f"DataLoader worker {s.details['pid']}" if s.details.get("pid") else "A DataLoader worker"
    return ctx.make(SHARED_MEMORY, "worker-bus-error",
                    f"{who} died of SIGBUS (Bus error): it wrote to shared memory that the full /dev/shm tmpfs "
                    f"could not back with a page.", fix, s, needed)


NCCL_SPACE_KINDS = ("nccl-call", "nccl-extend", "nccl-create", "nccl-file")


def nccl(ctx: Context, _: Signal | None) -> Diagnosis | None:
    """NCCL's shared-memory transport: a segment that did not fit (ENOSPC) is /dev/shm; others are not its size."""
    ev = ctx.ev
    said = [s for s in ctx.all(*NCCL_SPACE_KINDS) if s.details.get("error")]
    space = [s for s in said if ENOSPC.search(s.details["error"])]
    create = ctx.first("nccl-create", "nccl-extend")
    cuda = ctx.first("nccl-cuda-failure")
    other_reason = next((s for s in said if not ENOSPC.search(s.details["error"])), None)
    if space or (create and not cuda and other_reason is None):
        segment = create or space[0]
        size = segment.details.get("size")
        where = " " + segment.details["path"] if segment.details.get("path") else ""
        had = f"the {format_size(ev.shm_size)} of /dev/shm" if ev.shm_size is not None else "/dev/shm"
        if ev.job is not None:
            needed: int | None = sizing.shm_size(ev.job)
            assert needed is not None
            room = (f" on top of the {format_size(needed)} the DataLoader needs: "
                    f"{shm_fixes(Want(size=needed), ctx.platforms, sizing.slurm_memory_needed(ev.job))}")
        else:
            needed = None
            want = advice.evidence_want(ctx, size)
            room = f": {shm_fixes(want, ctx.platforms)}. {advice.DESCRIBE}"
        fix = ("give /dev/shm room for NCCL's segments (one per pair of local ranks and channel"
               + (f", {format_size(size)} each here" if size else "") + f"){room} Or set NCCL_SHM_DISABLE=1 "
               f"(NCCL then goes through the network or P2P, slower).")
        return ctx.make(SHARED_MEMORY if space else LIKELY, "nccl-shm",
                        f"NCCL could not create its shared-memory segment{where}"
                        + (f" of {format_size(size)}" if size else "") + f": {had} had no room for it"
                        + ("" if space else " (the message gives no reason; a full /dev/shm is the usual one)") + ".",
                        fix, segment if not space else space[0], needed)
    if create and cuda:  # a CUDA failure: not a question of space
        return ctx.make(UNDETERMINED, "nccl-shm-cuda",
                        "NCCL could not create a shared-memory segment, and it says why: a CUDA failure "
                        f"({cuda.details.get('error')}), not a full /dev/shm.",
                        "see NCCL's troubleshooting guide; NCCL_SHM_DISABLE=1 avoids the shared-memory transport.",
                        create)
    if create and other_reason is not None:  # shm_open, open, mmap refused, not for want of space
        return ctx.make(UNDETERMINED, "nccl-shm-file",
                        f"NCCL could not create its shared-memory segment, and not for want of space: "
                        f"{other_reason.details.get('call', 'a call')} failed with "
                        f"{other_reason.details['error'].strip()}: /dev/shm is not writable, missing or out of "
                        f"inodes, so a bigger one would not help.",
                        "make /dev/shm a writable tmpfs for the job's user (its mode is 1777), or set "
                        "NCCL_SHM_DISABLE=1.", other_reason)
    if s := ctx.first("nccl-file"):
        return ctx.make(UNDETERMINED, "nccl-shm-file",
                        f"NCCL could not create its file {s.details.get('path')} in /dev/shm, and not for want of "
                        f"space: /dev/shm is missing, read-only or out of inodes.",
                        "mount a writable tmpfs at /dev/shm, or set NCCL_SHM_DISABLE=1.", s)
    if s := ctx.first("nccl-attach"):
        return ctx.make(UNDETERMINED, "nccl-shm-attach",
                        "An NCCL rank could not attach to another rank's shared-memory segment "
                        f"({s.details.get('error', 'no reason given')}): the segment was missing, not too big, so "
                        f"the size of /dev/shm is not the cause (ranks in different IPC namespaces, or a segment "
                        f"removed).", "run the ranks of a node in one container (one /dev/shm), or set "
                        "NCCL_SHM_DISABLE=1.", s)
    return None


DF_SHM = re.compile(r"^\s*(?:shm|tmpfs|none)\s+(?P<size>[\d.,]+[KMGT]?)\s+\S+\s+\S+\s+(?P<use>\d+)%\s+/dev/shm\s*$")
SHM_IN_LOG = re.compile(r"/dev/shm|</?torch_\d+_")


def oom(ctx: Context, _: Signal | None) -> Diagnosis | None:
    """An OOM kill (the flag, or the kernel's, Slurm's or the kubelet's words in the log): did /dev/shm's pages
    take the memory? Only when its peak, its size, or the log says it could have."""
    ev = ctx.ev
    said = ctx.first("oom-kill")
    if not ev.oom_killed and said is None:
        return None
    slurm = "slurm" in ctx.platforms or (said is not None and "slurm" in said.details.get("by", ""))
    fix, needed = memory_advice(ev, ctx.platforms)
    large_tmpfs = ev.shm_unbounded or (ev.memory_limit is not None and ev.shm_size is not None
                                       and ev.shm_size * 2 >= ev.memory_limit)
    shm_filled = (ev.shm_peak is not None and ev.memory_limit is not None and ev.shm_peak * 2 >= ev.memory_limit)
    shm_line = next((Signal("shm-use", line.strip()) for line in strip_sequences(ev.logs).splitlines()
                     if SHM_IN_LOG.search(line) and not DF_SHM.search(line)
                     and (said is None or line.strip() != said.line)), None)
    limit = (f"its memory limit of {format_size(ev.memory_limit)}" if ev.memory_limit is not None
             else "the job's memory (--mem)" if slurm else "its memory")
    who = "Slurm's cgroup out-of-memory handler ended the job" if slurm else "The kernel's OOM killer ended the container"
    if shm_filled or large_tmpfs or (slurm and shm_line is not None):
        if slurm and shm_line is not None and not shm_filled:
            why = (f"the log shows the job using /dev/shm ({advice.quote(shm_line.line, 120)}), and Slurm charges "
                   f"its pages to the job; the tmpfs's own size does not limit it")
        else:
            tmpfs = ("/dev/shm has no size limit" if ev.shm_unbounded else
                     f"/dev/shm ({format_size(ev.shm_size or 0)}) can hold half the limit or more")
            why = (f"/dev/shm held {format_size(ev.shm_peak or 0)} of it" if shm_filled else tmpfs)
        shm_fix = ""
        if ev.job is not None and not slurm:  # under Slurm the tmpfs's size caps nothing: no cap to give
            shm_needed = sizing.shm_size(ev.job)
            if ev.shm_unbounded or (ev.shm_size is not None and ev.shm_size > shm_needed):
                shm_fix = (f" Cap /dev/shm at what the job needs, {format_size(shm_needed)} "
                           f"({shm_fixes(Want(size=shm_needed), ctx.platforms)}), so that leaked segments fail as "
                           f"a clear shm error and not as an OOM kill.")
        if slurm:
            above = f" above {slurm_size(ev.memory_limit)}" if ev.memory_limit is not None else "=…"
            default = (f"#SBATCH --mem{above}, with room for what the job keeps in /dev/shm on top of its processes, "
                       f"or keep less there. {advice.DESCRIBE}")
        else:
            default = ("raise the memory limit so it holds /dev/shm's pages and the processes, or describe the job "
                       "(--workers, --batch-size, --sample-shape) to get the size.")
        return ctx.make(SHARED_MEMORY if shm_filled else LIKELY, "oom-shm",
                        f"{who}: {limit} was full, and tmpfs pages count against it: {why}.",
                        ((fix or default) + shm_fix).strip(), said or ctx.first("worker-killed") or shm_line,
                        memory_needed=needed)
    small = (ev.shm_peak is not None) or (ev.shm_size is not None and ev.memory_limit is not None)
    above = f" above {slurm_size(ev.memory_limit)}" if ev.memory_limit is not None else "=…"
    default = (f"#SBATCH --mem{above}, or lower what the processes hold; /dev/shm's pages count against it "
               f"too." if slurm else
               "raise the memory limit, or lower what the processes hold (batch size, workers, caches).")
    return ctx.make(NOT_SHARED_MEMORY if small else UNDETERMINED, "oom",
                    f"{who}: {limit} was full"
                    + (f", with /dev/shm at {format_size(ev.shm_peak)}: the processes' own memory filled it"
                       if ev.shm_peak is not None else
                       (f"; /dev/shm ({format_size(ev.shm_size or 0)}) is too small to be what filled it"
                        if small else "; nothing here says whether /dev/shm's pages were part of it")) + ".",
                    fix or default, said or ctx.first("worker-killed"), memory_needed=needed)


def command_not_found(ctx: Context, s: Signal | None) -> Diagnosis | None:
    if ctx.ev.exit_code != 127:
        return None
    command = ctx.ev.command or "its command"
    return ctx.make(NOT_SHARED_MEMORY, "command-not-found",
                    f"The container's command was not found in the image (exit 127): {command}.",
                    "check the command after `--` and the image's PATH.", s)


def disk_full(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    where = (f"on the filesystem of {s.details['path']}" if s.kind == "enospc-elsewhere"
             else "while torch.save wrote a checkpoint")
    return ctx.make(NOT_SHARED_MEMORY, "disk-full",
                    f"A disk filled up {where} (No space left on device); that is not /dev/shm, so a bigger shm "
                    f"would not help.", "free space on that filesystem or write elsewhere (df -h shows which is full).", s)


def sigbus(ctx: Context, _: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    bus = ctx.first("bus-error")
    if ev.exit_code != SIGBUS_EXIT and bus is None:
        return None
    container = ev.platform is not None or (ev.exit_code is not None and "exit_code" not in ctx.seen)
    what = ("The container " if container else "A process ") + (
        "died of SIGBUS (exit 135)" if ev.exit_code == SIGBUS_EXIT else "reported a Bus error")
    if peak_low(ev):
        return ctx.make(NOT_SHARED_MEMORY, "sigbus",
                        f"{what}, but /dev/shm never ran out (peak {peak_of(ev)}): the SIGBUS came "
                        f"from elsewhere (a memory-mapped file that was truncated, an unaligned access, a hardware "
                        f"fault).", "look at the process that crashed (a core dump, or run it under faulthandler).",
                        bus)
    fix, needed = shm_advice(ctx)
    confirmed = ev.shm_peak is not None
    return ctx.make(SHARED_MEMORY if confirmed else LIKELY, "sigbus",
                    f"{what}. In a container that is most often a process touching shared memory "
                    f"that the full /dev/shm tmpfs cannot back" +
                    (f" (/dev/shm peaked at {peak_of(ev)})." if confirmed else
                     "; nothing here proves it (a truncated memory-mapped file does the same)."), fix, bus, needed)


def workers(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    ev = ctx.ev
    if s.kind == "worker-killed":
        fix, needed = memory_advice(ev, ctx.platforms)
        return ctx.make(NOT_SHARED_MEMORY if not ev.shm_unbounded else LIKELY, "worker-killed",
                        f"DataLoader worker {s.details['pid']} was killed by SIGKILL: the kernel's OOM killer, most "
                        f"likely, inside a memory limit that cannot hold the workers" +
                        (" and the unbounded /dev/shm" if ev.shm_unbounded else "") + ".",
                        fix or "raise the memory limit, or lower num_workers or batch_size.", s, memory_needed=needed)
    if peak_low(ev):
        return ctx.make(UNDETERMINED, "workers-exited",
                        f"DataLoader workers ({s.details['pids']}) exited unexpectedly, while /dev/shm stayed low "
                        f"(peak {peak_of(ev)}): not shared memory; the workers' own error is in the log above this "
                        f"line, or they were killed.", None, s)
    fix, shm_needed = shm_advice(ctx)
    return ctx.make(LIKELY, "workers-exited",
                    f"DataLoader workers ({s.details['pids']}) exited unexpectedly without a Python error: most often "
                    f"a worker that died of SIGBUS in a full /dev/shm, sometimes a worker killed for memory.",
                    fix, s, shm_needed)


def enospc_unplaced(ctx: Context, s: Signal | None) -> Diagnosis:
    ev = ctx.ev
    if peak_full(ev):  # watched full (run held at its ceiling): the space that ran out is /dev/shm's
        fix, needed = shm_advice(ctx)
        return ctx.make(SHARED_MEMORY, "shm-enospc",
                        f"Something ran out of space (No space left on device) while /dev/shm was full (peak "
                        f"{peak_of(ev)}): it is /dev/shm that had no room left.", fix, s, needed)
    if peak_low(ev):
        return ctx.make(NOT_SHARED_MEMORY, "disk-full",
                        f"Something ran out of space (No space left on device), but not /dev/shm: it stayed under "
                        f"half full (peak {peak_of(ev)}).",
                        "find the full filesystem with df -h in the container and free space there.", s)
    return ctx.make(UNDETERMINED, "enospc",
                    "Something ran out of space (No space left on device), and nothing in the log says it was "
                    "/dev/shm" + (f" (its peak was {peak_of(ev)})"
                                  if ev.shm_peak is not None and ev.shm_size is not None else "") + ".",
                    "find the full filesystem with df -h in the container; if it is /dev/shm, give it more.", s)


def loader_timeout(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    ev = ctx.ev
    waited = f"no batch came within {s.details['seconds']:g} s"
    if peak_full(ev):
        fix, needed = shm_advice(ctx)
        return ctx.make(SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}) while /dev/shm was full (peak {peak_of(ev)}): a "
                        f"worker's batch that could not be written to it was lost, and the trainer waited for it.",
                        fix, s, needed)
    if peak_low(ev):
        return ctx.make(NOT_SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}), but /dev/shm stayed under half full (peak "
                        f"{peak_of(ev)}): a slow or stuck worker (its data source, a lock), not shared memory.",
                        "look at what the workers wait on (py-spy dump --pid of a worker).", s)
    fix, needed = shm_advice(ctx)
    return ctx.make(LIKELY if ev.shm_peak is None else UNDETERMINED, "loader-timeout",
                    f"The DataLoader timed out ({waited}). A full /dev/shm does that when a worker's batch cannot "
                    f"be written and is lost; so does a slow or stuck worker" +
                    ("; nothing here says which." if ev.shm_peak is None else f" (/dev/shm peaked at {peak_of(ev)})."),
                    fix, s, needed)


def ray_object_store(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    # Ray's own figure is the store it wants; with the job described, its DataLoader's shm comes on top.
    asked = s.details.get("asked")
    needed = None
    want = advice.evidence_want(ctx)
    if ctx.ev.job is not None and isinstance(asked, int):
        needed = sizing.pod_shm_size(ctx.ev.job, extra=asked)
        want = Want(size=needed, at_least=True)
    platforms = ctx.platforms if "ray" in ctx.platforms else ("ray", *ctx.platforms)
    fix = shm_fixes(want, platforms) + "."
    if s.kind == "ray-object-store-crash":
        summary = ("Ray refused to start: the object store it was configured with does not fit in /dev/shm"
                   + (f" ({s.details['shm']} GB)" if s.details.get("shm") else "") + ".")
    else:
        available = s.details.get("available")
        summary = ("Ray put its object store in /tmp instead of /dev/shm, because /dev/shm had only "
                   + (format_size(int(available)) if available else "a little") + " free. This is a warning, "
                   "not a crash: the job runs, slower (objects go through the disk). If it died, the cause is "
                   "elsewhere in the log.")
    return ctx.make(SHARED_MEMORY, "ray-object-store", summary, fix, s, needed)


def open_files(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    named = ctx.first("open-files")
    if named is None:  # torch's shm_open failed and said no more: most often the open-files limit
        return ctx.make(UNDETERMINED, "open-files",
                        "PyTorch could not open a shared-memory segment and does not say why; with /dev/shm "
                        "mounted, that is most often the open-files limit (each tensor shared by descriptor holds "
                        "one), not /dev/shm's size.", nofile_advice(ctx), s)
    return ctx.make(NOT_SHARED_MEMORY, "open-files",
                    "The processes ran out of open files (EMFILE): each tensor a DataLoader worker shares by "
                    "descriptor holds one until the trainer takes it. Not /dev/shm's size.", nofile_advice(ctx), named)


def shm_full(ctx: Context, _: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if not (peak_full(ev) and ev.exit_code not in (None, 0)):
        return None
    fix, needed = shm_advice(ctx)
    return ctx.make(LIKELY, "shm-full",
                    f"The container exited {ev.exit_code} after /dev/shm filled up (peak {peak_of(ev)}); its log "
                    f"names no shared-memory error, but a full /dev/shm is the likeliest cause.", fix, None, needed)


def killed(ctx: Context, s: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if s is None and ev.exit_code != SIGKILL_EXIT:
        return None
    if ev.exit_code == SIGKILL_EXIT and s is None and "exit_code" not in ctx.seen:
        return ctx.make(UNDETERMINED, "killed",
                        "The container was killed (SIGKILL, exit 137) but not by the OOM killer: docker kill or "
                        "stop, an eviction, or an engine restart. Not shared memory.", None)
    what = (f"A process was killed by SIGKILL ({s.line.strip()[:120]})" if s is not None
            else "The container ended with exit code 137 (SIGKILL)")
    return ctx.make(UNDETERMINED, "killed",
                    f"{what}: most often the kernel's OOM killer (the host's memory, or a memory limit, which "
                    f"/dev/shm's pages count against), else a kill from outside (docker kill, an eviction, a "
                    f"scheduler's time limit). Nothing here says it was /dev/shm's size.",
                    "look for the OOM kill (dmesg -T | grep -i oom, kubectl describe pod, sacct -j JOB) and raise "
                    "the memory limit if it is one.", s)


def unknown_failure(ctx: Context, s: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if s is not None:
        return ctx.make(UNDETERMINED, "unknown",
                        "The log shows a failure (below), and nothing in it points at shared memory: no SIGBUS, no "
                        "shared-memory message, no OOM kill.", None, s)
    if ev.running or ev.exit_code is None:
        return ctx.make(NO_FAILURE, "none", "The container is still running and its log shows no failure."
                        if ev.running else "The log shows no failure.")
    return ctx.make(UNDETERMINED, "unknown",
                    f"The container exited {ev.exit_code}, and nothing in the evidence points at shared memory: no "
                    f"SIGBUS, no shared-memory message, no OOM kill. Its own error is in the log.")


PUBLIC = "tests/data/explain/public/"

# --- the table ---------------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule("none", decide=ended_well, case="completed-1g/logs.txt"),
    # 1. Messages that can only mean a full /dev/shm.
    Rule("shm-enospc", SHARED_MEMORY, kind="torch-shm-enospc",
         patterns=compile_all(r"unable to allocate shared memory\(shm\)(?: for file <?(?P<file>[^>:\s]+)>?)?"),
         summary="PyTorch could not allocate a tensor in /dev/shm (No space left on device): a DataLoader "
                 "worker's batch, or a tensor moved to shared memory, did not fit in what /dev/shm had left.",
         fix=shm_advice, case="dataloader-enospc-64m/logs.txt"),
    # torch's writer of a segment (THAllocator/MapAllocator) without the reason, as PyTorch before 1.12 printed
    # it; with "No space left" on the line it is an enospc-shm line (below), as the Python API expects.
    Rule("shm-enospc", SHARED_MEMORY, kind="torch-shm-write",
         patterns=compile_all(r"unable to write to file <(?P<file>/?torch_[^>]*)>(?!.*(?:No space left|\[Errno))"),
         summary="PyTorch could not write its shared-memory segment <{file}> in /dev/shm: the write of the "
                 "segment's last byte fails when the tmpfs is full (this PyTorch does not print the reason).",
         fix=shm_advice, case=PUBLIC + "nnunet-1910-unable-to-write.log"),
    Rule("worker-bus-error", kind="worker-bus-error", decide=worker_bus_error,
         patterns=compile_all(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Bus error",
                              r"Unexpected bus error encountered in worker"),
         case="worker-bus-error-64m/logs.txt"),
    # NCCL's shared-memory transport (include/shm.h up to 2.11, src/misc/shmutils.cc up to 2.27, src/os/linux.cc
    # from 2.28); shmguard/nccl.py's NCCL_SHM_ERRORS names the same messages. The lines are marked here, and
    # one rule decides on all of them: a segment that did not fit (ENOSPC) is /dev/shm, other reasons are not.
    Rule("", kind="nccl-call", where=nccl_details,
         patterns=compile_all(r"NCCL WARN Call to (?P<call>\w+) failed ?: ?(?P<error>.+)")),
    Rule("", kind="nccl-extend", where=nccl_details, patterns=compile_all(
        r"Error: failed to extend (?P<path>\S+) to (?P<size>\d+) bytes(?:, error: (?P<error>.+))?")),
    Rule("", kind="nccl-create", where=nccl_details, patterns=compile_all(
        r"Error while creating shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)(?:, error: (?P<error>.+))?")),
    Rule("", kind="nccl-attach", where=nccl_details, patterns=compile_all(
        r"Error while attaching to shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)(?:, error: (?P<error>.+))?")),
    Rule("", kind="nccl-file", where=nccl_details, patterns=compile_all(
        r"Error: failed to create shared memory file (?P<path>\S+)(?:.*?error: (?P<error>.+))?")),
    Rule("", kind="nccl-cuda-failure", where=nccl_details, patterns=compile_all(r"NCCL WARN Cuda failure '(?P<error>[^']+)'")),
    Rule("nccl-shm", decide=nccl, fires_on=("nccl-call", "nccl-extend", "nccl-create", "nccl-attach", "nccl-file"),
         case=PUBLIC + "nccl-525-posix-fallocate.log"),
    Rule("shm-enospc", SHARED_MEMORY, kind="enospc-shm", patterns=(ENOSPC,), where=enospc_is("enospc-shm"),
         summary="A write to {path} failed with No space left on device: /dev/shm was full.",
         fix=shm_advice, case=PUBLIC + "nnunet-2162-unable-to-write-enospc.log"),
    Rule("shm-enospc", SHARED_MEMORY, kind="enospc-semlock", patterns=(ENOSPC,), where=enospc_is("enospc-semlock"),
         summary="multiprocessing could not create a semaphore (SemLock: a small file in /dev/shm) for a Lock, "
                 "Queue or Event: /dev/shm was full (No space left on device).",
         fix=shm_advice, case=PUBLIC + "cpython-93253-semlock-docker.log"),
    Rule("ray-object-store", kind="ray-object-store-crash", decide=ray_object_store, where=ray_asked,
         patterns=compile_all(
             r"The configured object store size \((?P<store>[\d.]+) GB\) exceeds /dev/shm size \((?P<shm>[\d.]+) GB\)",
             r"The configured object store size exceeds the capacity of /dev/shm"),
         case=PUBLIC + "kiirkirjutaja-5-ray-object-store-exceeds.log"),
    # 2. The OOM killer: Docker's flag, the kernel's words, Slurm's, the kubelet's.
    Rule("", kind="oom-kill", where=lambda m, line, before: {"by": "slurm" if "slurm" in line or "srun" in line
                                                                      or "OUT_OF_ME" in line else ""},
         patterns=compile_all(r"Memory cgroup out of memory|\boom-kill:|Out of memory: Kill(?:ed)? process",
                              r"\"OOMKilled\": true|Reason:\s+OOMKilled|\breason: OOMKilled\b",
                              r"slurmstepd(?:-\S+)?: error: Detected \d+ oom[-_]kill event",
                              r"\bExitCode=0:125\b",
                              r"srun: error: .*: task \d+: Out Of Memory",
                              r"\bOUT_OF_ME(?:MORY|\+)", r"The node was low on resource: memory")),
    Rule("oom", decide=oom, case=PUBLIC + "arjuna-52-slurm-oom-kill.log"),
    # 3. Failures that are not shared memory, whatever else the log shows.
    Rule("command-not-found", kind="command-not-found", decide=command_not_found,
         patterns=compile_all(r"exec .* failed: No such file or directory|executable file not found"),
         case="tests/unit/engine/test_plan.py::test_post_mortem_does_not_blame_shm_for_other_deaths"),
    Rule("engine", UNDETERMINED, kind="engine-error", patterns=compile_all(r"Error response from daemon: (?P<error>.+)"),
         summary="The engine could not create or start the container ({error}): it never ran, so the size of its "
                 "/dev/shm is not the cause.",
         fix="read the engine's own log (journalctl -u docker, or dockerd's output) for why it refused.",
         case=PUBLIC + "coreos-2427-mounting-shm-tmpfs.log"),
    Rule("disk-full", kind="enospc-elsewhere", patterns=(ENOSPC,), where=enospc_is("enospc-elsewhere"),
         decide=disk_full, case="tests/unit/diagnosis/test_init.py::test_enospc_is_placed_by_its_path"),
    Rule("disk-full", kind="enospc-checkpoint", patterns=(ENOSPC,), where=enospc_is("enospc-checkpoint"),
         decide=disk_full, case="checkpoint-disk-full/logs.txt"),
    Rule("disk-full", NOT_SHARED_MEMORY, kind="checkpoint-write",
         patterns=compile_all(r"PytorchStreamWriter failed writing file (?P<file>\S+): file write failed"),
         summary="torch.save could not write its checkpoint ({file}): the disk it writes to is full (or gone); "
                 "that is not /dev/shm, so a bigger shm would not help.",
         fix="free space on that filesystem or write elsewhere (df -h shows which is full).",
         case=PUBLIC + "llamafactory-1223-streamwriter.log"),
    Rule("cuda-oom", NOT_SHARED_MEMORY, kind="cuda-oom",
         where=lambda m, line, before: {"size_text": f", tried to allocate {m.group('size')}"
                                        if m.groupdict().get("size") else ""},
         patterns=compile_all(r"CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B)",
                              r"CUDA out of memory|torch\.cuda\.OutOfMemoryError|CUDA error: out of memory"),
         summary="The GPU ran out of memory (CUDA out of memory{size_text}): that is the GPU's own memory, not "
                 "/dev/shm, so a bigger shm would not help.",
         fix="lower the batch size or what the model keeps on the GPU (mixed precision, activation checkpointing); "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when memory is reserved but unallocated.",
         case=PUBLIC + "atacworks-251-cuda-oom.log"),
    Rule("", kind="open-files", patterns=compile_all(r"Too many open files",
                                                      r"received (?:\d+|%d) items of ancdata")),
    Rule("open-files", kind="shm-open", decide=open_files, fires_on=("open-files", "shm-open"),
         patterns=compile_all(r"unable to open shared memory object <[^>]*> in read-write mode"),
         case=PUBLIC + "maskrcnn-158-too-many-open-files.log"),
    Rule("nccl-timeout", UNDETERMINED, kind="nccl-timeout",
         patterns=compile_all(r"Watchdog caught collective operation timeout: WorkNCCL\(.*?\) ran for "
                              r"(?P<ms>\d+) milliseconds"),
         summary="An NCCL collective timed out (the watchdog waited {ms} ms): some rank stopped taking part, "
                 "crashed, hung, or fell far behind. That is a symptom; the first rank to fail says why, and "
                 "nothing here points at /dev/shm.",
         fix="find the first rank's own error (its log, or TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and NCCL_DEBUG=INFO); "
             "raise the process group's timeout only when a step is slow on purpose.",
         case=PUBLIC + "basicsr-737-nccl-watchdog.log"),
    Rule("connection", NOT_SHARED_MEMORY, kind="connection",
         patterns=compile_all(r"Connection refused|ConnectionRefusedError",
                              r"The client socket has timed out after \S+ while trying to connect to",
                              r"RendezvousConnectionError|connect\(\) timed out"),
         summary="A process could not connect to another (the rendezvous store, or another rank): nothing "
                 "listened at that address, or it was not reachable. A network or launch problem, not /dev/shm.",
         fix="check MASTER_ADDR/MASTER_PORT (or --rdzv-endpoint) on every node, that rank 0 started first and "
             "listens, and that the port is open between the nodes.",
         case=PUBLIC + "pytorch-108732-gloo-connection-refused.log"),
    # 4. Symptoms typical of shared memory that prove nothing on their own.
    Rule("", kind="bus-error", patterns=compile_all(r"\bBus error\b")),
    Rule("sigbus", decide=sigbus, case=PUBLIC + "mlsh-17-mpirun-docker-bus-error.log"),
    Rule("worker-exception", NOT_SHARED_MEMORY, kind="worker-exception",
         patterns=compile_all(r"Caught (?P<error>\w+) in DataLoader worker process (?P<worker>\d+)"),
         summary="Your dataset's code raised {error} in DataLoader worker {worker}; the worker's own traceback "
                 "follows it in the log. Not shared memory.",
         fix="fix the error in the dataset or collate_fn the traceback names (num_workers=0 runs it in the main "
             "process, where a debugger reaches it).",
         case=PUBLIC + "transformers-tutorial-1-worker-keyerror.log"),
    Rule("worker-killed", kind="worker-killed", decide=workers, fires_on=("worker-killed", "workers-exited"),
         patterns=compile_all(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Killed"),
         case=PUBLIC + "torchssl-4-worker-killed.log"),
    Rule("", kind="workers-exited", where=lambda m, line, before: {"pids": m.group("pids").strip()},
         patterns=compile_all(r"DataLoader worker \(pid\(s\) (?P<pids>[\d, ]+)\) exited unexpectedly")),
    Rule("enospc", kind="enospc-unplaced", patterns=(ENOSPC,), where=enospc_is("enospc-unplaced"),
         decide=enospc_unplaced, case="tests/unit/diagnosis/test_init.py::test_enospc_without_a_path_is_not_shm_when_shm_stayed_low"),
    # The DataLoader's own timeout (DataLoader(timeout=N)): no batch came. With /dev/shm full, a worker's batch
    # that could not be written was lost (the error hits the queue's feeder thread, not the worker loop), and the
    # trainer waits for it: a hang, not a crash (seen in the integration tests on a loaded machine).
    Rule("loader-timeout", kind="loader-timeout", decide=loader_timeout,
         where=lambda m, line, before: {"seconds": float(m.group("seconds"))},
         patterns=compile_all(r"DataLoader timed out after (?P<seconds>[\d.]+) seconds"),
         case="tests/unit/diagnosis/test_init.py::test_a_dataloader_timeout_is_shm_when_shm_was_full_and_not_when_it_stayed_low"),
    Rule("ray-object-store", kind="ray-object-store", decide=ray_object_store, where=ray_asked,
         patterns=compile_all(r"The object store is using \S+ instead of /dev/shm because /dev/shm has only "
                              r"(?P<available>\d+) bytes available(?:.*--shm-size=(?P<gb>[\d.]+)gb)?"),
         case=PUBLIC + "llmaz-238-ray-object-store-tmp.log"),
    Rule("shm-full", decide=shm_full, case="tests/unit/diagnosis/test_init.py::test_a_failure_after_shm_filled_up_is_likely_shm_even_without_a_message"),
    # 5. What is left: a process killed from outside, an error nothing above names, or no failure at all.
    Rule("killed", kind="sigkill", decide=killed, always=True,
         patterns=compile_all(r"^\s*Killed\s*$", r"\bline \d+: +\d+ Killed\b", r"exited on signal 9 \(Killed\)",
                              r"command terminated with exit code 137", r"killed by signal 9\b"),
         case=PUBLIC + "argo-8981-killed.log"),
    # Facts a log states, read by the rules above (the exit code, the size df shows of /dev/shm).
    Rule("", kind="exit-code", where=exit_code_of, patterns=compile_all(
        r"(?:command terminated|container exited|\bexited) with (?:exit )?code (?P<code>\d+)",
        r"\"ExitCode\": (?P<code>\d+)", r"\bEXIT CODE: (?P<code>\d+)", r"\bExit Code:\s+(?P<code>\d+)")),
    Rule("", kind="job-memory", where=job_memory, patterns=compile_all(
        r"\bMinMemoryNode=(?P<mem>\d+[KMGT]?)\b", r"#SBATCH --mem=(?P<mem>\d+[KMGTkmgt]?)[bB]?\b")),
    Rule("", kind="df-shm", where=df_size, patterns=(DF_SHM,)),
    Rule("unknown", kind="error", decide=unknown_failure, always=True,
         patterns=compile_all(r"Traceback \(most recent call last\)", r"^\s*[\w.]*(?:Error|Exception)\b: ",
                              r"Segmentation fault|core dumped|Fatal Python error|terminate called after throwing",
                              r"^\s*(?:ERROR|FATAL|CRITICAL)\b"),
         case="tests/unit/diagnosis/test_init.py::test_nothing_found"),
)
