"""What a diagnosis reads (Evidence), what it finds in a log (Signal) and what it answers (Diagnosis)."""

from __future__ import annotations

from typing import Any

from shmguard.record import Record, field

SHARED_MEMORY = "shared-memory"
LIKELY = "likely-shared-memory"
NOT_SHARED_MEMORY = "not-shared-memory"
UNDETERMINED = "undetermined"
NO_FAILURE = "no-failure"
VERDICTS = (SHARED_MEMORY, LIKELY, NOT_SHARED_MEMORY, UNDETERMINED, NO_FAILURE)
BLAMES_SHM = (SHARED_MEMORY, LIKELY)

# How the Python API (shmguard.api.messages) words a DataLoader's shared-memory crash; a rule's `crash` is one.
CRASH_BUS, CRASH_ALLOC, CRASH_ENOSPC = "bus error", "shared memory allocation", "no space left in /dev/shm"
CRASH_TIMEOUT = "a batch that never came"  # a worker's queue thread failed to share it: only when shm was short
CRASHES = (CRASH_BUS, CRASH_ALLOC, CRASH_ENOSPC, CRASH_TIMEOUT)

SIGBUS_EXIT = 128 + 7
SIGKILL_EXIT = 128 + 9
# How the fix is spelled: `run` (shmguard run's flags), docker, kubernetes, slurm, ray, or None: what the log
# shows of its platform, else both docker and kubernetes.
PLATFORMS = ("run", "docker", "kubernetes", "slurm", "ray", None)


class Evidence(Record):
    """What is known about one container's (or job's) end. None: not known (never "zero")."""

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
    # /dev/shm growths made while it ran (`run` with elastic /dev/shm), oldest first: each a record with the
    # size before and after and when. Kept here so that a diagnosis can name them; none of the rules reads
    # them yet.
    growths: tuple[Any, ...] = ()


class Signal(Record):
    """One thing a log shows: its kind (a stable id: the Python API reads some), the line, parsed details."""

    kind: str
    line: str
    details: dict = field(default_factory=dict)


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
