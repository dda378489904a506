"""Why did the container die, and was it shared memory? One answer for `shmguard explain` and `run`'s post-mortem.

`diagnose(evidence) -> Diagnosis` is pure: the exit code, the OOM-kill flag, the log
text, the /dev/shm size and (when `run` watched it) its peak, the memory limit and the
job. It reads the log with the signatures of shmguard.diagnosis.rules (one table: each
rule's pattern, verdict, fix, the library source it reproduces and the log it came from),
which recognise the shared-memory deaths by their mechanism (a shared-memory pool,
segment, semaphore or store that had no room in /dev/shm: PyTorch's, NCCL's,
multiprocessing's, Triton's, UCX's, PostgreSQL's, pandarallel's, Ray's; SIGBUS under a
launcher) and name their look-alikes (a GPU out of memory, an OOM kill, a full disk, open
files, System V limits, a segfault, SIGTERM, the pin-memory thread, Slurm's time limit, an
eviction, an NCCL timeout, a refused connection, an exception in a worker).

The three rooms: rules.py is the table, decisions.py what depends on the facts and on the
lines around a line, machinery.py the Rule, the Context and the one reading of a log (in
time linear in its length: needles, then bounded patterns on the lines that hold them).

Advice follows the evidence, never the symptom alone: ENOSPC naming another path, or
raised by torch.save, is a full disk; a SIGBUS while /dev/shm stayed under half full is
not shared memory; an OOM kill of a job whose shm stayed small is the processes'
memory. Every fix names the knob of the platform (shmguard.diagnosis.platforms finds which, shmguard.fixes
spells it); sizes come
from shmguard.sizing, or, without the job, from what the evidence supports. Terminal
escape sequences in the log are dropped before it is read. Standard library only.

Verdicts, and the exit code `explain` gives each:
  shared-memory (1)          the evidence shows a shared-memory failure;
  likely-shared-memory (1)   a typical symptom, nothing confirms or contradicts it;
  not-shared-memory (0)      a failure, and the evidence points elsewhere;
  undetermined (0)           a failure, and nothing points at shared memory;
  no-failure (0)             it ended well (or still runs) and the log shows no failure.
"""

from __future__ import annotations

from shmguard.diagnosis.advice import facts, peak_full, peak_low, peak_of, quote
from shmguard.diagnosis.machinery import Context, Reader, Rule
from shmguard.diagnosis.platforms import MARKERS as PLATFORM_MARKERS
from shmguard.diagnosis.platforms import has_dev_shm, platforms_in, seen_in
from shmguard.diagnosis.records import (
    BLAMES_SHM,
    CRASHES,
    LIKELY,
    NO_FAILURE,
    NOT_SHARED_MEMORY,
    PLATFORMS,
    SHARED_MEMORY,
    SIGBUS_EXIT,
    SIGKILL_EXIT,
    UNDETERMINED,
    VERDICTS,
    Diagnosis,
    Evidence,
    Signal,
)
from shmguard.diagnosis.rules import MARKERS, MARKS, RULES

__all__ = [
    "READER",
    "BLAMES_SHM", "CRASHES", "LIKELY", "NO_FAILURE", "NOT_SHARED_MEMORY", "PLATFORMS", "RULES", "SHARED_MEMORY",
    "SIGBUS_EXIT", "SIGKILL_EXIT", "UNDETERMINED", "VERDICTS", "Diagnosis", "Evidence", "Rule", "Signal",
    "causes", "diagnose", "facts", "peak_full", "peak_low", "peak_of", "quote", "rule_of", "scan",
]

READER = Reader(RULES, {**MARKERS, **PLATFORM_MARKERS})


def scan(logs: str) -> list[Signal]:
    """The shared-memory (and look-alike) signals in a log, in order of appearance."""
    return [s for s in READER.read(logs).signals if s.kind not in MARKS]


def rule_of(kind: str) -> Rule:
    """The first rule whose lines are of this kind (the one that classified them)."""
    return next(rule for rule in RULES if rule.kind == kind)


def causes() -> tuple[str, ...]:
    """Every cause a diagnosis can give, in table order: the --json schemas list them."""
    return tuple(dict.fromkeys(cause for rule in RULES for cause in rule.causes))


def with_log_facts(ev: Evidence, signals: tuple[Signal, ...]) -> tuple[Evidence, tuple[str, ...]]:
    """The evidence with what the log states and the evidence does not: the exit code (the last one the log
    gives), the size df shows of /dev/shm, the memory Slurm gave the job."""
    seen: list[str] = []
    if ev.exit_code is None and not ev.running:
        codes = [s.details["code"] for s in signals if s.kind == "exit-code"]
        if codes:
            ev = ev.replace(exit_code=codes[-1])
            seen.append("exit_code")
    if ev.shm_size is None and not ev.shm_unbounded:
        sizes = [s.details["size"] for s in signals if s.kind == "df-shm"]
        if sizes:
            ev = ev.replace(shm_size=sizes[-1])
            seen.append("shm_size")
    if ev.memory_limit is None:
        limits = [s.details["bytes"] for s in signals if s.kind == "job-memory"]
        if limits:
            ev = ev.replace(memory_limit=limits[-1])
            seen.append("memory_limit")
    return ev, tuple(seen)


def diagnose(ev: Evidence) -> Diagnosis:
    """The most telling explanation of the evidence: the first rule of RULES that fires."""
    reading = READER.read(ev.logs)
    ev, seen = with_log_facts(ev, reading.signals)
    platforms = seen_in(reading.marks)
    ctx = Context(ev, reading.signals, platforms_in(platforms, ev.platform), tuple(facts(ev, seen)), seen,
                  reading.marks, has_dev_shm(platforms, ev.platform))
    for rule in RULES:
        found = rule.diagnose(ctx)
        if found is not None:
            return found
    raise AssertionError("the last rule always answers")  # pragma: no cover
