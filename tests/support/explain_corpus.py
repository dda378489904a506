"""The judged corpus of issue 41 (tests/data/explain/judged/): its split, its cases, and how a diagnosis is scored.

Read by tests/unit (the split and the development half) and by benchmarks/explain_corpus.py (both halves,
side by side). SPLIT.md in the corpus folder says how the halves were decided and what a header holds.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from shmguard.diagnosis import BLAMES_SHM, Diagnosis, Evidence, diagnose
from shmguard.units import parse_quantity, parse_size

JUDGED = Path(__file__).resolve().parents[1] / "data" / "explain" / "judged"
HALVES = ("development", "held-out")
ROUND_2 = "held-out-2"  # round 2's held-out set: every log collected for it, whatever its URL (SPLIT.md)
ROUND_3 = "held-out-3"  # round 3's: collected after round 3's rules were written, scored once (SPLIT.md)
ROUND_4 = "held-out-4"  # round 4's, the same way
ROUND_5 = "held-out-5"  # round 5's, the same way
ROUND_6 = "held-out-6"  # round 6's, the same way
ROUND_7 = "held-out-7"  # round 7's, the same way
ROUND_8 = "held-out-8"  # round 8's, the same way
ROUND_9 = "held-out-9"  # round 9's, the same way
ROUND_10 = "held-out-10"  # round 10's, the same way
ROUND_11 = "held-out-11"  # round 11's, the same way
ROUNDS = (ROUND_2, ROUND_3, ROUND_4, ROUND_5, ROUND_6, ROUND_7, ROUND_8, ROUND_9, ROUND_10, ROUND_11)
PARTS = (*HALVES, *ROUNDS)
SALT = "shmguard#41:"
LOG_START = "# --- log (verbatim) ---"
FIELDS = ("source", "shows", "platform", "expect", "size", "trimmed")
# The knob each platform's fix must name (a log that shows none of these: Docker's and Kubernetes').
KNOBS = {"docker": "--shm-size", "kubernetes": "sizeLimit", "ray": "object-store-memory", "slurm": "#SBATCH --mem"}
SHM_SIZE_WORDS = re.compile(r"--shm-size|sizeLimit|shm_size|more /dev/shm")
# A size a fix gives /dev/shm: `--shm-size=74m`, `sizeLimit: 74Mi` (never `SIZE`, never `above 64m`).
FIX_SIZES = re.compile(r"--shm-size=(?P<docker>\d+[kmgt]?)\b|sizeLimit: (?P<k8s>\d+(?:[KMGT]i)?)\b")


def url_of(source: str) -> str:
    return source.split()[0]


def half_of(url: str) -> str:
    """The half a thread belongs to: decided by its URL alone, before any rule was written (SPLIT.md)."""
    digest = hashlib.sha256((SALT + url).encode()).digest()
    return HALVES[1] if digest[0] % 2 else HALVES[0]


class Case:
    """One log of the corpus: its header fields and its verbatim text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        self.half = path.parent.name
        text = path.read_text()
        head, sep, self.log = text.partition(LOG_START + "\n")
        if not sep:
            raise ValueError(f"{path}: no '{LOG_START}' line")
        self.meta: dict[str, str] = {}
        for line in head.splitlines():
            key, _, value = line.removeprefix("# ").partition(": ")
            self.meta[key.strip()] = value.strip()
        self.verdict, self.cause = self.meta["expect"].split()

    @property
    def url(self) -> str:
        return url_of(self.meta["source"])

    @property
    def shm(self) -> bool:
        return self.verdict in BLAMES_SHM

    @property
    def platforms(self) -> list[str]:
        return [p for p in self.meta.get("platform", "").split() if p in KNOBS] or ["docker", "kubernetes"]

    @property
    def size(self) -> int | None:
        return int(self.meta["size"]) if self.meta.get("size") else None

    def diagnose(self) -> Diagnosis:
        """As a new user runs it: the log piped in, nothing else said."""
        return diagnose(Evidence(logs=self.log))


def cases(half: str | None = None) -> list[Case]:
    halves = PARTS if half is None else (half,)
    return [Case(path) for h in halves for path in sorted((JUDGED / h).glob("*.log"))]


def fix_sizes(fix: str) -> list[int]:
    """The /dev/shm sizes a fix names, in bytes."""
    sizes = []
    for m in FIX_SIZES.finditer(fix):
        sizes.append(parse_size(m.group("docker")) if m.group("docker") else parse_quantity(m.group("k8s")))
    return sizes


def faults(case: Case, found: Diagnosis | None = None) -> list[str]:
    """What is wrong with a case's diagnosis, as the goal counts it (nothing: it scores).

    A shared-memory death: a verdict that blames shared memory, each platform's knob, and when the log states
    a size, a size at least that large. A look-alike: its own cause, not blamed on shared memory, no /dev/shm
    size in its fix."""
    found = found or case.diagnose()
    fix = found.fix or ""
    wrong = []
    if case.shm:
        if found.verdict not in BLAMES_SHM:
            wrong.append(f"verdict {found.verdict} ({found.cause})")
        wrong += [f"no {KNOBS[p]}" for p in case.platforms if KNOBS[p] not in fix]
        if case.size is not None:
            sizes = fix_sizes(fix)
            if not sizes or min(sizes) < case.size:
                wrong.append(f"no size of at least {case.size} B (fix sizes: {sizes or 'none'})")
        return wrong
    if found.verdict in BLAMES_SHM:
        wrong.append(f"blamed on shared memory ({found.verdict} {found.cause})")
    if found.cause != case.cause:
        wrong.append(f"cause {found.cause}, not {case.cause}")
    if found.shm_needed is not None or SHM_SIZE_WORDS.search(fix):
        wrong.append("a /dev/shm size in the fix")
    return wrong
