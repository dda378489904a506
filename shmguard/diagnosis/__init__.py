"""Why did the container die, and was it shared memory? One answer for `shmguard explain` and `run`'s post-mortem.

`diagnose(evidence) -> Diagnosis` is pure: the exit code, the OOM-kill flag, the log
text, the /dev/shm size and (when `run` watched it) its peak, the memory limit and the
job. It reads the log with the signatures of shmguard.diagnosis.rules (one table: each
rule's pattern, verdict, fix and the public log it came from, in
tests/data/explain/public/), which recognise the shared-memory deaths by their real
messages (PyTorch's, NCCL's, multiprocessing's semaphores, Ray's object store, SIGBUS
under a launcher) and name their look-alikes (a GPU out of memory, an OOM kill, a full
disk, open files, an NCCL timeout, a refused connection, an exception in a worker).

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
from shmguard.diagnosis.platforms import platforms_in
from shmguard.diagnosis.records import (
    BLAMES_SHM,
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
from shmguard.diagnosis.rules import RULES, TORCH_SEGMENT_IN_LINE, Context, Rule
from shmguard.terminal import strip_sequences

__all__ = [
    "BLAMES_SHM", "LIKELY", "NO_FAILURE", "NOT_SHARED_MEMORY", "PLATFORMS", "RULES", "SHARED_MEMORY",
    "SIGBUS_EXIT", "SIGKILL_EXIT", "TORCH_SEGMENT_IN_LINE", "UNDETERMINED", "VERDICTS", "Diagnosis", "Evidence",
    "Rule", "Signal", "diagnose", "facts", "peak_full", "peak_low", "peak_of", "quote", "scan",
]

CONTEXT_LINES = 15  # lines before a line that a rule may read (a traceback reads upwards)
_LINE_RULES = tuple(rule for rule in RULES if rule.patterns)


def classify(line: str, before: list[str]) -> Signal | None:
    """The signal a log line is: the kind of the first rule whose pattern (and test) matches it."""
    for rule in _LINE_RULES:
        for pattern in rule.patterns:
            m = pattern.search(line)
            if m is None:
                continue
            if rule.where is not None:
                details = rule.where(m, line, before)
                if details is None:
                    continue
            else:
                details = {k: v for k, v in m.groupdict().items() if v is not None}
            return Signal(rule.kind, line, details)
    return None


# Kinds that only mark a line for the rules (an error nothing names, the exit code, df's /dev/shm): not signals
# of a failure of their own, so `scan` leaves them out.
MARKS = ("error", "exit-code", "df-shm", "job-memory")


def scan(logs: str) -> list[Signal]:
    """The shared-memory (and look-alike) signals in a log, in order of appearance."""
    return [s for s in read_log(logs) if s.kind not in MARKS]


def read_log(logs: str) -> list[Signal]:
    """Every line of the log that a rule marks, in order of appearance."""
    lines = strip_sequences(logs).splitlines()
    found: list[Signal] = []
    for index, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        signal = classify(line, lines[max(0, index - CONTEXT_LINES):index])
        if signal is not None:
            found.append(signal)
    return found


def with_log_facts(ev: Evidence, signals: list[Signal]) -> tuple[Evidence, tuple[str, ...]]:
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
    signals = read_log(ev.logs)
    ev, seen = with_log_facts(ev, signals)
    ctx = Context(ev, tuple(signals), platforms_in(strip_sequences(ev.logs), ev.platform), tuple(facts(ev, seen)),
                  seen)
    for rule in RULES:
        found = rule.diagnose(ctx)
        if found is not None:
            return found
    raise AssertionError("the last rule always answers")  # pragma: no cover
