"""The machinery of a diagnosis: a Rule, the Context it decides in, and the one reading of a log.

A log is read once, in time linear in its length:

- terminal escape sequences are dropped and `\\r` (a progress bar's redraw) ends a line, as `\\n` does;
- each line pattern (a rule's, a platform hint's, a marker's) has *needles*: literal strings of which every
  match holds one, taken from the pattern itself (`needles_of`). The whole text is searched for each needle
  once (`str.find`, C speed), and only the lines that hold one are tried against the patterns that need it;
- every pattern is linear by construction (`pattern_faults` says why one is not): its repeats are bounded,
  none is nested in another, and no match is longer than MATCH_LIMIT characters, so each place in a line
  costs a bounded number of steps; a line is matched on its first LINE_LIMIT characters.

A line is the kind of the first rule (in table order) whose pattern matches it, or its text without the
decorations a launcher puts in front (`[rank3]:`, `(raylet)`, `(pid=12)`, a timestamp, a quote's `> `), or,
for a rule whose message wraps (torch's), it and the next one or two lines joined. Standard library only.
"""

from __future__ import annotations

import bisect
import re
import sys
from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Any

from shmguard.diagnosis import advice
from shmguard.diagnosis.records import Diagnosis, Evidence, Signal
from shmguard.record import Record, field
from shmguard.terminal import printable, strip_sequences

if sys.version_info >= (3, 11):  # the regular-expression parser: re._parser from Python 3.11, sre_parse before
    from re import _constants as _sre
    from re import _parser
else:  # pragma: no cover - Python 3.10
    import sre_constants as _sre
    import sre_parse as _parser

CONTEXT_LINES = 15  # lines around a line that a rule may read (a traceback reads upwards)
LINE_LIMIT = 64 * 1024  # a line is matched on this many characters (the stdin reader cuts there too)
MATCH_LIMIT = 2048  # the longest match any pattern may make
REPEAT_LIMIT = 1024  # the most any one repeat of a pattern may take
WRAP_LINES = 3  # a wrapping message is looked for in this many lines joined

# What launchers and loggers put before a message: `[rank3]:`, `[80746] `, `(raylet)`, `(pid=4496)`,
# `(RayWorkerWrapper pid=5280)`, `> ` (a quote), `[2025-10-13 09:06:25]`, `2024-05-01 12:00:01,123 -`.
_DECORATION = re.compile(
    r"^[ \t]{0,16}(?:\[[^\]\n]{1,64}\][:,]?|\([\w.=: -]{1,64}\)|>|[\d:.,T/-]{8,32}(?: -)?|\d{1,12}\|)[ \t]{0,16}")


class Context(Record):
    """One diagnosis under way: the evidence (with what the log adds), the log's signals, the platforms."""

    ev: Evidence
    signals: tuple[Signal, ...]
    platforms: tuple[str | None, ...]
    base: tuple[str, ...]  # the facts, as phrases
    seen: tuple[str, ...] = ()  # the facts the log itself gave: "exit_code", "shm_size"
    marks: dict = field(default_factory=dict)  # marker name -> the lines it matched (shmguard.diagnosis.rules.MARKERS)
    dev_shm: bool = True  # False when the log shows only platforms without a /dev/shm (Windows, macOS)

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
# (match, the line, the lines before it, the lines after it) -> the line's details, or None: not this kind
Where = Callable[[re.Match, str, list, list], "dict | None"]


class Rule(Record):
    """One signature. `kind` names the log lines its patterns match; `cause` the diagnosis it gives ("" for a
    rule that only marks lines for another's decision); `fires_on` the kinds it decides on (default: its own;
    none: a rule on the facts alone, always asked)."""

    cause: str
    verdict: str | None = None
    summary: str = ""  # formatted with the pattern's named groups (and `line`)
    fix: Any = None  # a text, or a function of the Context: (text, bytes of /dev/shm to give)
    kind: str = ""
    patterns: tuple[re.Pattern[str], ...] = ()
    where: Any = None  # a Where function: the line's details, or None (the line is not this kind after all)
    fires_on: tuple[str, ...] = ()
    always: bool = False  # decide even when the log has none of its kinds (on the facts alone)
    decide: Any = None  # a Decide function, for verdicts that depend on the facts
    gives: tuple[str, ...] = ()  # every cause it can give (default: its own): the --json schemas list them
    crash: str | None = None  # how the Python API words a DataLoader crash of this kind (shmguard.api.messages)
    wraps: bool = False  # the message may be wrapped over WRAP_LINES lines (its patterns match across them)
    any_case: bool = False  # its patterns (written in lower case) match the line in any letter case (round 10)
    source: str = ""  # the library source that prints the message, when the rule reproduces one
    case: str = ""  # the log it was written from: tests/data/explain/…

    @property
    def triggers(self) -> tuple[str, ...]:
        return self.fires_on or ((self.kind,) if self.kind else ())

    @property
    def causes(self) -> tuple[str, ...]:
        return self.gives or ((self.cause,) if self.cause else ())

    def diagnose(self, ctx: Context) -> Diagnosis | None:
        if not self.cause:
            return None
        signal = ctx.first(*self.triggers) if self.triggers else None
        if self.triggers and signal is None and not self.always:
            return None
        if self.decide is not None:
            found = self.decide(ctx, signal)
        else:
            assert self.verdict is not None, f"rule {self.cause} has neither a verdict nor a decide function"
            fix, needed = self.fix(ctx) if callable(self.fix) else (self.fix, None)
            details = {**(signal.details if signal else {}), "line": signal.line if signal else ""}
            found = ctx.make(self.verdict, self.cause, self.summary.format_map(_Details(details)), fix, signal,
                             shm_needed=needed)
        assert found is None or found.cause in self.causes, f"rule {self.cause} gave {found.cause}"
        return found


class _Details(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def compile_all(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """The rule's patterns, with ASCII word boundaries: a message glued to Chinese or Japanese text (`但报错Bus
    error`) still starts a word, which Unicode's `\\b` would not see (round 8)."""
    return tuple(re.compile(p, re.ASCII) for p in patterns)


def wrapped(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """Patterns of a message that a terminal or a paste may wrap: each space may be a line break."""
    return tuple(re.compile(p.replace(" ", r"\s{1,3}"), re.ASCII) for p in patterns)


# --- needles and linearity --------------------------------------------------------------------------------

_LITERAL, _NOT_LITERAL = _sre.LITERAL, _sre.NOT_LITERAL
_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT} | ({_sre.POSSESSIVE_REPEAT} if hasattr(_sre, "POSSESSIVE_REPEAT") else set())
_SINGLE = {_sre.LITERAL, _sre.NOT_LITERAL, _sre.IN, _sre.ANY}


def needles_of(pattern: re.Pattern[str]) -> frozenset[str]:
    """Literal strings of which every match of the pattern holds one (empty: none could be found, so every line
    must be tried). The set whose shortest needle is longest is chosen."""
    if pattern.flags & re.IGNORECASE:
        return frozenset()
    return _best(_candidates(list(_parser.parse(pattern.pattern, pattern.flags).data))) or frozenset()


def _candidates(items: list) -> list[frozenset[str]]:
    """The needle sets a sequence of parsed items offers: each literal run, and each mandatory part's best set."""
    found: list[frozenset[str]] = []
    run: list[str] = []
    for op, av in items:
        if op == _LITERAL:
            run.append(chr(av))
            continue
        if run:
            found.append(frozenset(["".join(run)]))
            run = []
        if op == _sre.SUBPATTERN:
            best = _best(_candidates(list(av[-1])))
        elif op == _sre.BRANCH:
            alternatives = [_best(_candidates(list(alt))) for alt in av[1]]
            best = frozenset().union(*alternatives) if all(alternatives) else None  # type: ignore[arg-type]
        elif op in _REPEATS and av[0] >= 1:
            best = _best(_candidates(list(av[2])))
        elif op == getattr(_sre, "ATOMIC_GROUP", None):
            best = _best(_candidates(list(av)))
        else:
            best = None
        if best:
            found.append(best)
    if run:
        found.append(frozenset(["".join(run)]))
    return found


def _best(sets: list[frozenset[str]]) -> frozenset[str] | None:
    sets = [s for s in sets if s and all(s)]
    return max(sets, key=lambda s: (min(map(len, s)), -len(s)), default=None)


def pattern_faults(pattern: re.Pattern[str]) -> list[str]:
    """Why a pattern is not linear by construction (nothing: it is). Its repeats must be bounded (at most
    REPEAT_LIMIT) and none nested in another unless the inner one takes single characters, its longest match at
    most MATCH_LIMIT characters, and it must not ignore case (its needles would not find its lines)."""
    faults = []
    parsed = _parser.parse(pattern.pattern, pattern.flags)
    if parsed.getwidth()[1] > MATCH_LIMIT:
        faults.append(f"a match can be longer than {MATCH_LIMIT} characters")
    if pattern.flags & re.IGNORECASE:
        faults.append("ignores case")

    def walk(items: Iterable, inside_repeat: bool) -> None:
        for op, av in items:
            if op in _REPEATS:
                low, high, body = av
                if high == _sre.MAXREPEAT or high > REPEAT_LIMIT:
                    faults.append(f"an unbounded repeat ({high if high != _sre.MAXREPEAT else 'no limit'})")
                body = list(body)
                if inside_repeat and not (len(body) == 1 and body[0][0] in _SINGLE):
                    faults.append("a repeat nested in a repeat")
                walk(body, True)
            elif op == _sre.SUBPATTERN:
                walk(av[-1], inside_repeat)
            elif op == _sre.BRANCH:
                for alt in av[1]:
                    walk(alt, inside_repeat)
            elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
                walk(av[1], inside_repeat)
            elif op == getattr(_sre, "ATOMIC_GROUP", None):
                walk(av, inside_repeat)

    walk(parsed.data, False)
    return faults


# --- reading a log ----------------------------------------------------------------------------------------

class Probe(Record):
    """A pattern as the reader uses it: what it belongs to (a rule's index, or a marker's name), its needles."""

    owner: Any
    pattern: re.Pattern[str]
    needles: frozenset[str]
    wraps: bool = False
    any_case: bool = False  # tried on the line with its ASCII letters lowered (a rule's any_case)


class Reading(Record):
    """A log read once: its lines, the signals the rules found in it (in order), and each marker's lines (their
    text, stripped)."""

    lines: tuple[str, ...]
    signals: tuple[Signal, ...]
    marks: dict


def normalized(logs: str) -> str:
    """The log without its escape sequences, `\\r` (a progress bar's redraw) ending a line as `\\n` does."""
    return strip_sequences(logs).replace("\r\n", "\n").replace("\r", "\n")


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lower(text: str) -> str:
    """The text with its ASCII letters lowered, every other character kept: the same length and offsets (str.lower
    can change both)."""
    return text.translate(_ASCII_LOWER)


def lines_of(logs: str) -> list[str]:
    """The log's lines, as the reader cuts them."""
    return normalized(logs).split("\n")


def body_of(line: str) -> str:
    """The line without what a launcher or logger put before the message (at most four decorations)."""
    for _ in range(4):
        m = _DECORATION.match(line)
        if m is None or not m.end():
            break
        line = line[m.end():]
    return line


def hit_lines(text: str, starts: list[int], needles: Iterable[str]) -> set[int]:
    """The indices of the lines that hold any of the needles (`starts`: each line's offset in `text`)."""
    hits: set[int] = set()
    for needle in needles:
        at = text.find(needle)
        while at >= 0:
            line = bisect.bisect_right(starts, at) - 1
            hits.add(line)
            nxt = starts[line + 1] if line + 1 < len(starts) else len(text)  # on to the next line: one hit a line
            at = text.find(needle, nxt)
    return hits


# Strings that several needles hold and ordinary training output rarely does: the text is searched for the
# anchor instead of each needle that holds it (every line the needle is in holds the anchor too). A search
# costs less the longer its string (str.find skips ahead by its length): so anchors are long, and a short
# needle is better written out of its pattern than anchored. Only the speed depends on this list, never a result.
ANCHORS = ("shared memory", "DataLoader", "killed by signal", "Segmentation fault", "exited unexpectedly")


def minimal(needles: Iterable[str]) -> list[str]:
    """What to search the text for: each needle, or the anchor it holds; then only those that hold no other
    (finding those finds every line any of them is in)."""
    needles = {next((a for a in ANCHORS if a in n), n) for n in needles}
    ordered = sorted(needles, key=len)
    kept: list[str] = []
    for needle in ordered:
        if not any(k in needle for k in kept):
            kept.append(needle)
    return kept


class Reader:
    """Reads logs with one table of rules and a set of markers (named patterns whose lines are wanted).

    Not a record: it keeps the needles it works out on first use."""

    def __init__(self, rules: tuple[Rule, ...], markers: dict[str, tuple[re.Pattern[str], ...]]) -> None:
        self.rules = rules
        self.markers = markers
        self._probes: list[Probe] | None = None
        self._by_needle: dict[str, list[int]] = {}
        self._by_lowered: dict[str, list[int]] = {}  # the any-case probes' needles

    @property
    def probes(self) -> list[Probe]:
        """Every pattern with its needles, worked out once, on first use (import stays cheap)."""
        if self._probes is None:
            probes = [Probe(index, pattern, needles_of(pattern), rule.wraps, rule.any_case)
                      for index, rule in enumerate(self.rules) for pattern in rule.patterns]
            probes += [Probe(name, pattern, needles_of(pattern)) for name, patterns in self.markers.items()
                       for pattern in patterns]
            by_needle: dict[str, list[int]] = {}
            by_lowered: dict[str, list[int]] = {}
            for number, probe in enumerate(probes):
                for needle in probe.needles:
                    (by_lowered if probe.any_case else by_needle).setdefault(needle, []).append(number)
            self._by_needle = by_needle
            self._by_lowered = by_lowered
            self._probes = probes
        return self._probes

    def candidates(self, line: str) -> list[Probe]:
        """The probes one of whose needles the line holds, in table order (each needle looked for once; an any-case
        probe's in the line with its letters lowered)."""
        probes = self.probes
        numbers = {n for needle, owners in self._by_needle.items() if needle in line for n in owners}
        if self._by_lowered:
            lowered = lower(line)
            numbers |= {n for needle, owners in self._by_lowered.items() if needle in lowered for n in owners}
        return [probes[n] for n in sorted(numbers)]

    def read(self, logs: str) -> Reading:
        text = normalized(logs)
        lines = text.split("\n")
        starts = [0]
        starts += accumulate(len(line) + 1 for line in lines[:-1])
        probes = self.probes
        assert all(p.needles for p in probes), "a pattern without needles (pattern_faults and the tests say which)"
        hits = hit_lines(text, starts, minimal(n for p in probes if not p.any_case for n in p.needles))
        if self._by_lowered:  # the any-case needles, in the text with its ASCII letters lowered (same offsets)
            hits |= hit_lines(lower(text), starts, minimal(n for p in probes if p.any_case for n in p.needles))
        signals: list[Signal] = []
        marks: dict[str, list[str]] = {name: [] for name in self.markers}
        for index in sorted(hits):
            raw = lines[index][:LINE_LIMIT]
            line = raw.strip()
            if not line:
                continue
            candidates = self.candidates(raw)
            signal = self.classify(line, index, lines, candidates)
            if signal is not None:
                signals.append(signal)
            for probe in candidates:
                if isinstance(probe.owner, str) and probe.pattern.search(line) and line not in marks[probe.owner][-1:]:
                    marks[probe.owner].append(line)
        return Reading(tuple(lines), tuple(signals), {k: tuple(v) for k, v in marks.items()})

    def classify(self, line: str, index: int, lines: list[str], probes: list[Probe]) -> Signal | None:
        """The signal a line is: the kind of the first rule whose pattern (and `where`) accepts it."""
        body = body_of(line)
        for probe in (p for p in probes if not isinstance(p.owner, str)):
            rule = self.rules[probe.owner]
            texts = [body]
            if probe.wraps:
                following = [lines[j][:LINE_LIMIT].strip() for j in range(index + 1, min(len(lines), index + WRAP_LINES))]
                texts += ["\n".join([body, *following[:n]]) for n in range(1, len(following) + 1)]
            for text in texts:
                m = probe.pattern.search(lower(text) if probe.any_case else text)
                if m is None:
                    continue
                if rule.where is not None:
                    before = [lines[j][:LINE_LIMIT] for j in range(max(0, index - CONTEXT_LINES), index)]
                    after = [lines[j][:LINE_LIMIT] for j in range(index + 1, min(len(lines), index + 1 + CONTEXT_LINES))]
                    details = rule.where(m, text, before, after)
                    if details is None:
                        break
                else:
                    details = {k: v for k, v in m.groupdict().items() if v is not None}
                return Signal(rule.kind, text if text is not body else line, details)
        return None
