"""Why did the container die, and was it shared memory? One answer for `shmguard explain` and `run`'s post-mortem.

`diagnose(evidence) -> Diagnosis` is pure: the exit code, the OOM-kill flag, the
log text, the /dev/shm size and (when `run` watched it) its peak, the memory limit
and the job. It recognises the shared-memory failures by their real messages
(tests/data/explain holds captured ones, with their sources):

- PyTorch: `unable to allocate shared memory(shm) for file </torch_…>: No space left
  on device` (a collate or share_memory_ that does not fit: posix_fallocate says so);
  `DataLoader worker (pid N) is killed by signal: Bus error` (a worker touched a page
  the full tmpfs could not give); `DataLoader worker (pid(s) …) exited unexpectedly`
  (a worker died without a word: shared memory is the usual cause, not the only one);
- NCCL: `Call to posix_fallocate failed`, `failed to extend /dev/shm/nccl-… to N
  bytes`, `Error while creating shared memory segment … (size N)`;
- SIGBUS: exit 135 (128 + 7) or a `Bus error` line;
- `No space left on device` (ENOSPC) naming /dev/shm or raised in a shared-memory call;
- an OOM kill with a large tmpfs: one that can hold half the memory limit or more, has
  no size limit, or was seen holding half of it (tmpfs pages are charged to the
  container's memory cgroup).

Advice follows the evidence, never the symptom alone: ENOSPC naming another path,
or raised by torch.save, is a full disk; a SIGBUS while /dev/shm stayed under half
full is not shared memory; an OOM kill of a job whose shm stayed small is the
processes' memory. Sizes come from shmguard.sizing only. Standard library only.

Verdicts, and the exit code `explain` gives each:
  shared-memory (1)          the evidence shows a shared-memory failure;
  likely-shared-memory (1)   a typical symptom, nothing confirms or contradicts it;
  not-shared-memory (0)      a failure, and the evidence points elsewhere;
  undetermined (0)           a failure, and nothing points at shared memory;
  no-failure (0)             it ended well (or still runs) and the log shows none of the above.
"""

from __future__ import annotations

import re
from typing import Any

from shmguard import model, sizing
from shmguard.record import Record, field
from shmguard.units import docker_size, format_size, k8s_quantity

SHARED_MEMORY = "shared-memory"
LIKELY = "likely-shared-memory"
NOT_SHARED_MEMORY = "not-shared-memory"
UNDETERMINED = "undetermined"
NO_FAILURE = "no-failure"
VERDICTS = (SHARED_MEMORY, LIKELY, NOT_SHARED_MEMORY, UNDETERMINED, NO_FAILURE)
BLAMES_SHM = (SHARED_MEMORY, LIKELY)

SIGBUS_EXIT = 128 + 7
SIGKILL_EXIT = 128 + 9
# How the fix is spelled: `run` (shmguard run's flags), docker, kubernetes, or None (both docker and kubernetes).
PLATFORMS = ("run", "docker", "kubernetes", None)

# PyTorch (torch/csrc/.../MapAllocator.cpp, torch/utils/data/_utils/signal_handling.py, dataloader.py).
TORCH_SHM_ENOSPC = re.compile(r"unable to allocate shared memory\(shm\)(?: for file <?(?P<file>[^>:\s]+)>?)?")
WORKER_BUS_ERROR = re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Bus error")
WORKER_KILLED = re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Killed")
WORKERS_EXITED = re.compile(r"DataLoader worker \(pid\(s\) (?P<pids>[\d, ]+)\) exited unexpectedly")
BUS_ERROR = re.compile(r"\bBus error\b")
ENOSPC = re.compile(r"No space left on device|\[Errno 28\]|\bENOSPC\b")
# What a line near an ENOSPC says about the write that failed (a traceback reads upwards).
SHM_CALL = re.compile(r"_new_shared|share_memory_|_share_fd|_share_filename|multiprocessing/shared_memory|"
                      r"SharedMemory\(|shm_open|/dev/shm|<torch_")
# torch's own segment names, as its allocator prints them: `</torch_57_3981_1>` (file_system) or `<torch_…>`.
TORCH_SEGMENT = re.compile(r"/?torch_\d+_\d+(?:_\d+)?")
TORCH_SEGMENT_IN_LINE = re.compile(r"</?torch_\d+_")
CHECKPOINT_CALL = re.compile(r"torch/serialization\.py|\btorch\.save\(")
CONTEXT_LINES = 15
PATH = re.compile(r"(?<![\w.])/(?:[\w.@+~-]+/?)+")
SHM_PATHS = ("/dev/shm", "/run/shm")
# NCCL's shared-memory transport (include/shm.h up to 2.11, src/misc/shmutils.cc up to 2.27, src/os/linux.cc
# from 2.28). Defined here because shmguard/nccl.py (NCCL_SHM_ERRORS) is on another branch; its list names the
# same messages. Here a message counts as a full /dev/shm only when it says ENOSPC (or says nothing).
NCCL_FALLOCATE = re.compile(r"Call to posix_fallocate failed ?: ?(?P<error>.+)")
NCCL_EXTEND = re.compile(r"Error: failed to extend (?P<path>\S+) to (?P<size>\d+) bytes(?:, error: (?P<error>.+))?")
NCCL_CREATE = re.compile(r"Error while creating shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)"
                         r"(?:, error: (?P<error>.+))?")
NCCL_ATTACH = re.compile(r"Error while attaching to shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)"
                         r"(?:, error: (?P<error>.+))?")
NCCL_SHM_FILE = re.compile(r"Error: failed to create shared memory file (?P<path>\S+)(?:.*?error: (?P<error>.+))?")
NCCL_CUDA_FAILURE = re.compile(r"NCCL WARN Cuda failure '(?P<error>[^']+)'")
# The DataLoader's own timeout (DataLoader(timeout=N)): no batch came. With /dev/shm full, a worker's batch
# that could not be written was lost (the error hits the queue's feeder thread, not the worker loop), and
# the trainer waits for it: a hang, not a crash (seen in the integration tests on a loaded machine).
LOADER_TIMEOUT = re.compile(r"DataLoader timed out after (?P<seconds>[\d.]+) seconds")
COMMAND_NOT_FOUND = re.compile(r"exec .* failed: No such file or directory|executable file not found")


class Evidence(Record):
    """What is known about one container's end. None: not known (never "zero")."""

    exit_code: int | None = None
    oom_killed: bool = False
    logs: str = ""
    shm_size: int | None = None  # bytes of /dev/shm the container had
    shm_unbounded: bool = False  # an emptyDir of medium Memory without sizeLimit, or the host's /dev/shm (--ipc host)
    shm_peak: int | None = None  # peak use of /dev/shm, when it was watched (`run`)
    memory_limit: int | None = None
    job: Any = None  # shmguard.job.Job
    platform: str | None = None  # how to spell the fix: see PLATFORMS
    command: str | None = None  # the container's command, for exit 127
    running: bool = False
    notes: tuple[str, ...] = ()  # what could not be used (e.g. a job description that does not validate)
    shm_growths: tuple = ()  # engine.growths.Growth: /dev/shm grew under `shmguard run` (shm_size is the last size)


class Diagnosis(Record):
    verdict: str
    cause: str  # a stable id: shm-enospc, worker-bus-error, sigbus, nccl-shm, oom-shm, oom, disk-full, …
    summary: str  # what happened, in a sentence or two
    fix: str | None
    evidence: tuple[str, ...] = field(default=())  # the facts and log lines it rests on
    shm_needed: int | None = None  # bytes of /dev/shm to give (sizing.shm_size), when the job is known
    memory_needed: int | None = None  # memory limit to give (sizing.memory_needed), when the job is known

    @property
    def blames_shared_memory(self) -> bool:
        return self.verdict in BLAMES_SHM

    def text(self) -> str:
        """One paragraph: what happened, then the fix."""
        return self.summary + (f" Fix: {self.fix}" if self.fix else "")

    def as_dict(self, shallow: bool = False) -> dict[str, Any]:
        """The JSON form, with the schema's names (shallow or not: it holds no record)."""
        return {"verdict": self.verdict, "cause": self.cause, "summary": self.summary, "fix": self.fix,
                "evidence": list(self.evidence), "shm_needed_bytes": self.shm_needed,
                "memory_needed_bytes": self.memory_needed}


class Signal(Record):
    """One thing the evidence shows: its kind, the log line (or fact) and parsed details."""

    kind: str
    line: str
    details: dict = field(default_factory=dict)


def scan(logs: str) -> list[Signal]:
    """The shared-memory (and look-alike) signals in a log, in order of appearance."""
    lines = logs.splitlines()
    found: list[Signal] = []
    for index, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if m := TORCH_SHM_ENOSPC.search(line):
            found.append(Signal("torch-shm-enospc", line, {"file": m.group("file")}))
            continue
        if m := WORKER_BUS_ERROR.search(line):
            found.append(Signal("worker-bus-error", line, {"pid": int(m.group("pid"))}))
            continue
        if m := WORKER_KILLED.search(line):
            found.append(Signal("worker-killed", line, {"pid": int(m.group("pid"))}))
            continue
        if m := WORKERS_EXITED.search(line):
            found.append(Signal("workers-exited", line, {"pids": m.group("pids").strip()}))
            continue
        nccl = nccl_signal(line)
        if nccl:
            found.append(nccl)
            continue
        if ENOSPC.search(line):
            found.append(enospc_signal(line, lines[max(0, index - CONTEXT_LINES):index]))
            continue
        if BUS_ERROR.search(line):
            found.append(Signal("bus-error", line))
            continue
        if m := LOADER_TIMEOUT.search(line):
            found.append(Signal("loader-timeout", line, {"seconds": float(m.group("seconds"))}))
            continue
        if COMMAND_NOT_FOUND.search(line):
            found.append(Signal("command-not-found", line))
    return found


def nccl_signal(line: str) -> Signal | None:
    for pattern, kind in ((NCCL_FALLOCATE, "nccl-fallocate"), (NCCL_EXTEND, "nccl-extend"),
                          (NCCL_CREATE, "nccl-create"), (NCCL_ATTACH, "nccl-attach"), (NCCL_SHM_FILE, "nccl-file")):
        m = pattern.search(line)
        if m:
            details = {k: v for k, v in m.groupdict().items() if v is not None}
            if "size" in details:
                details["size"] = int(details["size"])
            return Signal(kind, line, details)
    if m := NCCL_CUDA_FAILURE.search(line):
        return Signal("nccl-cuda-failure", line, {"error": m.group("error")})
    return None


def enospc_signal(line: str, before: list[str]) -> Signal:
    """ENOSPC, placed: on /dev/shm (a path or a shared-memory call), on another path, in torch.save, or unknown."""
    paths = [p.rstrip("/'\":,") for p in PATH.findall(line) if not TORCH_SEGMENT.fullmatch(p.rstrip("/'\":,>"))]
    shm_paths = [p for p in paths if p.startswith(SHM_PATHS)]
    other = [p for p in paths if not p.startswith(SHM_PATHS)]
    if shm_paths or TORCH_SEGMENT_IN_LINE.search(line):
        return Signal("enospc-shm", line, {"path": shm_paths[0] if shm_paths else None})
    if other:
        return Signal("enospc-elsewhere", line, {"path": other[0]})
    context = "\n".join(before)
    if CHECKPOINT_CALL.search(context):
        return Signal("enospc-checkpoint", line)
    if SHM_CALL.search(context):
        return Signal("enospc-shm", line, {"path": None})
    return Signal("enospc-unplaced", line)


def first(signals: list[Signal], *kinds: str) -> Signal | None:
    return next((s for s in signals if s.kind in kinds), None)


def quote(line: str, limit: int = 240) -> str:
    return '"' + (line if len(line) <= limit else line[:limit - 1] + "…") + '"'


def shm_spelling(size: int, platform: str | None) -> str:
    """How to give /dev/shm `size` bytes on the platform."""
    if platform == "run":
        return f"shmguard run gives it {format_size(size)} (drop --shm-size, or --shm-size={docker_size(size)})"
    docker = f"docker run --shm-size={docker_size(size)} (compose: shm_size: {docker_size(size)})"
    k8s = (f"an emptyDir with medium: Memory and sizeLimit: {k8s_quantity(size)} mounted at /dev/shm, "
           f"as shmguard patch writes it")
    if platform == "docker":
        return docker
    if platform == "kubernetes":
        return k8s
    return f"{docker}; in Kubernetes, {k8s}"


def memory_spelling(size: int, platform: str | None) -> str:
    if platform in ("run", "docker"):
        return f"--memory={docker_size(size)}"
    if platform == "kubernetes":
        return f"resources.limits.memory: {k8s_quantity(size)}"
    return f"--memory={docker_size(size)} (Kubernetes: resources.limits.memory: {k8s_quantity(size)})"


def facts(ev: Evidence) -> list[str]:
    """The non-log evidence, as short phrases."""
    out = []
    if ev.exit_code is not None:
        out.append(f"exit code {ev.exit_code}" + (" (SIGBUS)" if ev.exit_code == SIGBUS_EXIT else ""))
    if ev.oom_killed:
        out.append("OOM-killed")
    if ev.shm_unbounded:
        out.append("/dev/shm without a size limit")
    elif ev.shm_size is not None:
        out.append(f"/dev/shm {format_size(ev.shm_size)}")
    if ev.shm_peak is not None:
        out.append(f"/dev/shm peak {format_size(ev.shm_peak)}")
    if ev.memory_limit is not None:
        out.append(f"memory limit {format_size(ev.memory_limit)}")
    return out + list(ev.notes)


def peak_low(ev: Evidence) -> bool:
    """/dev/shm was watched and stayed under half full: it did not run out (a fill-and-free faster than
    the sampling could hide in the other half, not a whole shm)."""
    return ev.shm_peak is not None and ev.shm_size is not None and not ev.shm_unbounded and ev.shm_peak * 2 < ev.shm_size


def peak_of(ev: Evidence) -> str:
    """How full /dev/shm got, as the messages say it: "64.0 MiB of 64.0 MiB"."""
    return f"{format_size(ev.shm_peak)} of {format_size(ev.shm_size)}"


def peak_full(ev: Evidence) -> bool:
    """/dev/shm was watched and reached its size (within 2%): it ran out, whatever the log says."""
    return (ev.shm_peak is not None and ev.shm_size is not None and not ev.shm_unbounded
            and ev.shm_peak * 100 >= ev.shm_size * 98)


def shm_advice(ev: Evidence, what: str) -> tuple[str, int | None]:
    """The /dev/shm fix for a job that ran out: the model's size when the job is known."""
    if ev.job is None:
        had = f"the {format_size(ev.shm_size)} it had" if ev.shm_size is not None else "what it had"
        return (f"give {what} more /dev/shm than {had}. To get the exact size, describe the job "
                f"(--workers, --batch-size, --sample-shape or --sample-bytes, or its SHMGUARD_* variables) "
                f"and run shmguard explain again; shmguard measure finds the sample size."), None
    needed = sizing.shm_size(ev.job)
    if ev.shm_size is not None and not ev.shm_unbounded and ev.shm_size >= needed:
        return (f"the job as described needs {format_size(needed)} of /dev/shm and had {format_size(ev.shm_size)}: "
                f"something else fills /dev/shm too (stale segments of earlier runs, NCCL, other processes), or the "
                f"batches are larger than described. Run shmguard check in the container and shmguard measure on "
                f"the dataset."), needed
    peak = model.shm_bytes(ev.job)
    why = (f"the job needs {format_size(needed)} at its peak" if needed > sizing.SHM_FLOOR
           else f"the job needs {format_size(peak)} at its peak; shmguard never gives less than Docker's "
                f"{format_size(sizing.SHM_FLOOR)}")
    return f"{shm_spelling(needed, ev.platform)}: {why}.", needed


def memory_advice(ev: Evidence) -> tuple[str | None, int | None]:
    """The memory-limit fix after an OOM kill: the model's need when it is above the limit, never below it."""
    if ev.job is None:
        return None, None
    needed = sizing.memory_needed(ev.job)
    if ev.memory_limit is None or needed > ev.memory_limit:
        return (f"{memory_spelling(needed, ev.platform)} or more: the job needs about {format_size(needed)}, "
                f"the {format_size(sizing.shm_size(ev.job))} of /dev/shm it needs included."), needed
    return (f"shmguard's model puts the job at {format_size(needed)}, within the {format_size(ev.memory_limit)} it "
            f"was killed at: something besides the DataLoader's batches (the model, data held in memory, a leak) "
            f"uses the rest. Raise the limit above {format_size(ev.memory_limit)} and watch the peak "
            f"(shmguard run reports it), or find what grows."), needed


def diagnose(ev: Evidence) -> Diagnosis:
    """The most telling explanation of the evidence (see the module docstring for the verdicts)."""
    signals = scan(ev.logs)
    base = facts(ev)

    def make(verdict, cause, summary, fix=None, signal=None, shm_needed=None, memory_needed=None):
        evidence = base + ([quote(signal.line)] if signal else [])
        return Diagnosis(verdict, cause, summary, fix, tuple(evidence), shm_needed, memory_needed)

    if ev.exit_code == 0 and not ev.oom_killed:
        noted = signals[0] if signals else None
        return make(NO_FAILURE, "none", "The container ended well (exit 0)" +
                    (", though its log shows the message below; it did not end the job." if noted else
                     " and its log shows no shared-memory failure."), None, noted)
    # 1. Messages that can only mean a full /dev/shm.
    if s := first(signals, "torch-shm-enospc"):
        fix, needed = shm_advice(ev, "the container")
        return make(SHARED_MEMORY, "shm-enospc",
                    "PyTorch could not allocate a tensor in /dev/shm (No space left on device): a DataLoader "
                    "worker's batch, or a tensor moved to shared memory, did not fit in what /dev/shm had left.",
                    fix, s, needed)
    if s := first(signals, "worker-bus-error"):
        fix, needed = shm_advice(ev, "the container")
        return make(SHARED_MEMORY, "worker-bus-error",
                    f"DataLoader worker {s.details['pid']} died of SIGBUS (Bus error): it wrote to shared memory "
                    f"that the full /dev/shm tmpfs could not back with a page.", fix, s, needed)
    nccl = nccl_diagnosis(ev, signals, make)
    if nccl is not None:
        return nccl
    if s := first(signals, "enospc-shm"):
        fix, needed = shm_advice(ev, "the container")
        where = s.details.get("path") or "a shared-memory allocation"
        return make(SHARED_MEMORY, "shm-enospc", f"A write to {where} failed with No space left on device: /dev/shm "
                    f"was full.", fix, s, needed)
    # 2. The OOM killer.
    if ev.oom_killed:
        return oom_diagnosis(ev, signals, make)
    # 3. Commands that were never there.
    if ev.exit_code == 127 and (s := first(signals, "command-not-found")):
        command = ev.command or "its command"
        return make(NOT_SHARED_MEMORY, "command-not-found",
                    f"The container's command was not found in the image (exit 127): {command}.",
                    "check the command after `--` and the image's PATH.", s)
    # 4. ENOSPC that is not /dev/shm.
    if s := first(signals, "enospc-elsewhere", "enospc-checkpoint"):
        where = (f"on the filesystem of {s.details['path']}" if s.kind == "enospc-elsewhere"
                 else "while torch.save wrote a checkpoint")
        return make(NOT_SHARED_MEMORY, "disk-full",
                    f"A disk filled up {where} (No space left on device); that is not /dev/shm, so a bigger shm "
                    f"would not help.", "free space on that filesystem or write elsewhere (df -h shows which is full).", s)
    # 5. SIGBUS and the DataLoader's worker deaths: typical of shared memory, not proof.
    bus = first(signals, "bus-error")
    if ev.exit_code == SIGBUS_EXIT or bus:
        what = "died of SIGBUS (exit 135)" if ev.exit_code == SIGBUS_EXIT else "reported a Bus error"
        if peak_low(ev):
            return make(NOT_SHARED_MEMORY, "sigbus",
                        f"The container {what}, but /dev/shm never ran out (peak {peak_of(ev)}): the SIGBUS came from elsewhere (a memory-mapped file that "
                        f"was truncated, an unaligned access, a hardware fault).",
                        "look at the process that crashed (a core dump, or run it under faulthandler).", bus)
        fix, needed = shm_advice(ev, "the container")
        confirmed = ev.shm_peak is not None and not peak_low(ev)
        return make(SHARED_MEMORY if confirmed else LIKELY, "sigbus",
                    f"The container {what}. In a container that is most often a process touching shared memory that "
                    f"the full /dev/shm tmpfs cannot back" +
                    (f" (/dev/shm peaked at {peak_of(ev)})."
                     if confirmed else "; nothing here proves it (a truncated memory-mapped file does the same)."),
                    fix, bus, needed)
    if s := first(signals, "workers-exited", "worker-killed"):
        if s.kind == "worker-killed":
            return make(NOT_SHARED_MEMORY if not ev.shm_unbounded else LIKELY, "worker-killed",
                        f"DataLoader worker {s.details['pid']} was killed by SIGKILL: the kernel's OOM killer, most "
                        f"likely, inside a memory limit that cannot hold the workers" +
                        (" and the unbounded /dev/shm" if ev.shm_unbounded else "") + ".",
                        memory_advice(ev)[0] or "raise the memory limit, or lower num_workers or batch_size.",
                        s, memory_needed=memory_advice(ev)[1])
        if peak_low(ev):
            return make(UNDETERMINED, "workers-exited",
                        f"DataLoader workers ({s.details['pids']}) exited unexpectedly, while /dev/shm stayed low "
                        f"(peak {peak_of(ev)}): not shared memory; the "
                        f"workers' own error is in the log above this line, or they were killed.", None, s)
        fix, needed = shm_advice(ev, "the container")
        return make(LIKELY, "workers-exited",
                    f"DataLoader workers ({s.details['pids']}) exited unexpectedly without a Python error: most often "
                    f"a worker that died of SIGBUS in a full /dev/shm, sometimes a worker killed for memory.",
                    fix, s, needed)
    if s := first(signals, "enospc-unplaced"):
        if peak_low(ev):
            return make(NOT_SHARED_MEMORY, "disk-full",
                        f"Something ran out of space (No space left on device), but not /dev/shm: it stayed under "
                        f"half full (peak {peak_of(ev)}).",
                        "find the full filesystem with df -h in the container and free space there.", s)
        return make(UNDETERMINED, "enospc",
                    "Something ran out of space (No space left on device), and nothing in the log says it was "
                    "/dev/shm" + (f" (its peak was {peak_of(ev)})"
                                  if ev.shm_peak is not None and ev.shm_size is not None else "") + ".",
                    "find the full filesystem with df -h in the container; if it is /dev/shm, give it more.", s)
    if s := first(signals, "loader-timeout"):
        waited = f"no batch came within {s.details['seconds']:g} s"
        if peak_full(ev):
            fix, needed = shm_advice(ev, "the container")
            return make(SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}) while /dev/shm was full (peak "
                        f"{peak_of(ev)}): a worker's batch that could "
                        f"not be written to it was lost, and the trainer waited for it.", fix, s, needed)
        if peak_low(ev):
            return make(NOT_SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}), but /dev/shm stayed under half full (peak "
                        f"{peak_of(ev)}): a slow or stuck worker "
                        f"(its data source, a lock), not shared memory.",
                        "look at what the workers wait on (py-spy dump --pid of a worker).", s)
        fix, needed = shm_advice(ev, "the container")
        return make(LIKELY if ev.shm_peak is None else UNDETERMINED, "loader-timeout",
                    f"The DataLoader timed out ({waited}). A full /dev/shm does that when a worker's batch cannot "
                    f"be written and is lost; so does a slow or stuck worker" +
                    ("; nothing here says which." if ev.shm_peak is None else
                     f" (/dev/shm peaked at {peak_of(ev)})."),
                    fix, s, needed)
    if peak_full(ev) and ev.exit_code not in (None, 0):
        fix, needed = shm_advice(ev, "the container")
        return make(LIKELY, "shm-full",
                    f"The container exited {ev.exit_code} after /dev/shm filled up (peak {format_size(ev.shm_peak)} "
                    f"of {format_size(ev.shm_size)}); its log names no shared-memory error, but a full /dev/shm "
                    f"is the likeliest cause.", fix, None, needed)
    if ev.exit_code == SIGKILL_EXIT:
        return make(UNDETERMINED, "killed",
                    "The container was killed (SIGKILL, exit 137) but not by the OOM killer: docker kill or stop, "
                    "an eviction, or an engine restart. Not shared memory.", None)
    if ev.running or ev.exit_code is None:
        return make(NO_FAILURE, "none", "The container is still running and its log shows no shared-memory failure."
                    if ev.running else "The log shows no shared-memory failure.")
    return make(UNDETERMINED, "unknown",
                f"The container exited {ev.exit_code}, and nothing in the evidence points at shared memory: no "
                f"SIGBUS, no shared-memory message, no OOM kill. Its own error is in the log.")


def nccl_diagnosis(ev: Evidence, signals: list[Signal], make) -> Diagnosis | None:
    """NCCL's shared-memory transport: a segment that did not fit (ENOSPC) is /dev/shm; others are not its size."""
    space = [s for s in signals if s.kind in ("nccl-fallocate", "nccl-extend", "nccl-create", "nccl-file")
             and ENOSPC.search(s.details.get("error", "") or s.line)]
    create = first(signals, "nccl-create", "nccl-extend")
    if space or (create and not first(signals, "nccl-cuda-failure")):
        s = space[0] if space else create
        assert s is not None
        segment = first(signals, "nccl-create", "nccl-extend") or s
        size = segment.details.get("size")
        had = f"the {format_size(ev.shm_size)} of /dev/shm" if ev.shm_size is not None else "/dev/shm"
        job_part = ""
        needed = None
        if ev.job is not None:
            needed = sizing.shm_size(ev.job)
            job_part = f" on top of the {format_size(needed)} the DataLoader needs"
        fix = ("give /dev/shm room for NCCL's segments (one per pair of local ranks and channel"
               + (f", {format_size(size)} each here" if size else "") + f"){job_part}: "
               f"{shm_spelling(needed, ev.platform) if needed else 'more than it had'}; or set NCCL_SHM_DISABLE=1 "
               f"(NCCL then goes through the network or P2P, slower).")
        return make(SHARED_MEMORY if space else LIKELY, "nccl-shm",
                    f"NCCL could not create its shared-memory segment{' ' + segment.details['path'] if segment.details.get('path') else ''}"
                    + (f" of {format_size(size)}" if size else "") + f": {had} had no room for it"
                    + ("" if space else " (the message gives no reason; a full /dev/shm is the usual one)") + ".",
                    fix, segment if not space else space[0], needed)
    if s := first(signals, "nccl-create"):  # with a CUDA failure: not a question of space
        return make(UNDETERMINED, "nccl-shm-cuda",
                    "NCCL could not create a shared-memory segment, and it says why: a CUDA failure "
                    f"({first(signals, 'nccl-cuda-failure').details['error']}), not a full /dev/shm.",
                    "see NCCL's troubleshooting guide; NCCL_SHM_DISABLE=1 avoids the shared-memory transport.", s)
    if s := first(signals, "nccl-file"):
        return make(UNDETERMINED, "nccl-shm-file",
                    f"NCCL could not create its file {s.details['path']} in /dev/shm, and not for want of space: "
                    f"/dev/shm is missing, read-only or out of inodes.",
                    "mount a writable tmpfs at /dev/shm, or set NCCL_SHM_DISABLE=1.", s)
    if s := first(signals, "nccl-attach"):
        return make(UNDETERMINED, "nccl-shm-attach",
                    "An NCCL rank could not attach to another rank's shared-memory segment "
                    f"({s.details.get('error', 'no reason given')}): the segment was missing, not too big, so the "
                    f"size of /dev/shm is not the cause (ranks in different IPC namespaces, or a segment removed).",
                    "run the ranks of a node in one container (one /dev/shm), or set NCCL_SHM_DISABLE=1.", s)
    return None


def oom_diagnosis(ev: Evidence, signals: list[Signal], make) -> Diagnosis:
    """An OOM kill: did /dev/shm's pages take the memory? Only when its peak, or its size, says it could have."""
    fix, needed = memory_advice(ev)
    large_tmpfs = ev.shm_unbounded or (ev.memory_limit is not None and ev.shm_size is not None
                                       and ev.shm_size * 2 >= ev.memory_limit)
    shm_filled = (ev.shm_peak is not None and ev.memory_limit is not None and ev.shm_peak * 2 >= ev.memory_limit)
    limit = f"its memory limit of {format_size(ev.memory_limit)}" if ev.memory_limit is not None else "its memory"
    if shm_filled or large_tmpfs:
        tmpfs = ("/dev/shm has no size limit" if ev.shm_unbounded else
                 f"/dev/shm ({format_size(ev.shm_size)}) can hold half the limit or more")
        why = (f"/dev/shm held {format_size(ev.shm_peak)} of it" if shm_filled else tmpfs)
        shm_fix = ""
        if ev.job is not None:
            shm_needed = sizing.shm_size(ev.job)
            if ev.shm_unbounded or (ev.shm_size is not None and ev.shm_size > shm_needed):
                shm_fix = (f" Cap /dev/shm at what the job needs, {format_size(shm_needed)} "
                           f"({shm_spelling(shm_needed, ev.platform)}), so that leaked segments fail as a "
                           f"clear shm error and not as an OOM kill.")
        return make(SHARED_MEMORY if shm_filled else LIKELY, "oom-shm",
                    f"The kernel's OOM killer ended the container: {limit} was full, and tmpfs pages count against "
                    f"it: {why}.",
                    ((fix or "raise the memory limit so it holds /dev/shm's pages and the processes, or describe "
                      "the job (--workers, --batch-size, --sample-shape) to get the size.") + shm_fix).strip(),
                    first(signals, "worker-killed"), memory_needed=needed)
    small = (ev.shm_peak is not None) or (ev.shm_size is not None and ev.memory_limit is not None)
    return make(NOT_SHARED_MEMORY if small else UNDETERMINED, "oom",
                f"The kernel's OOM killer ended the container: {limit} was full"
                + (f", with /dev/shm at {format_size(ev.shm_peak)}: the processes' own memory filled it"
                   if ev.shm_peak is not None else
                   (f"; /dev/shm ({format_size(ev.shm_size)}) is too small to be what filled it"
                    if small else "")) + ".",
                fix or "raise the memory limit, or lower what the processes hold (batch size, workers, caches).",
                first(signals, "worker-killed"), memory_needed=needed)
