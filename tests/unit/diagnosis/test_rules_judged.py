"""The judged corpus of issue 41 (tests/data/explain/judged/): each log where its URL puts it, with its source.

Only the development half is scored here; the held-out half is scored by benchmarks/explain_corpus.py and
reported beside it in BENCHMARKS.md, so that no test pushes a rule towards it.
"""

from __future__ import annotations

import pytest

from shmguard.diagnosis import BLAMES_SHM
from tests.support.explain_corpus import HALVES, JUDGED, KNOBS, PARTS, ROUNDS, cases, half_of
from tests.support.paths import DATA

ALL = cases()
DEVELOPMENT = [case for case in ALL if case.half == "development"]


def test_the_corpus_has_both_halves_of_both_kinds():
    assert len(ALL) >= 60
    for half in HALVES:
        mine = [case for case in ALL if case.half == half]
        assert sum(case.shm for case in mine) >= 10 and sum(not case.shm for case in mine) >= 10, half


@pytest.mark.parametrize("case", ALL, ids=lambda case: f"{case.half}/{case.name}")
def test_each_log_says_where_it_came_from_and_lies_in_the_half_its_url_names(case):
    assert case.meta["source"].startswith("https://"), case.meta  # a thread: GitHub's, a forum's, a knowledge base's
    assert case.meta["shows"] and case.meta["trimmed"] and case.log.strip()
    assert case.half in (half_of(case.url), *ROUNDS), f"{case.name} belongs in {half_of(case.url)}/"
    if case.shm:
        assert case.verdict in BLAMES_SHM
    else:
        assert case.verdict == "not-shared-memory"
    assert set(case.meta.get("platform", "").split()) <= set(KNOBS) | {"nccl", "mpi", "ucx", "windows", "macos"}


@pytest.mark.parametrize("part", ROUNDS)
def test_each_later_round_holds_out_a_set_of_its_own(part):
    assert len(cases(part)) >= 25


def test_no_thread_is_in_two_places():
    """A thread is on one side of the split only, and none was already used for the public corpus."""
    public = {path.read_text().split("\n", 1)[0].removeprefix("# source: ").split()[0]
              for path in (DATA / "explain" / "public").glob("*.log")}
    by_url: dict[str, set[str]] = {}
    for case in ALL:
        by_url.setdefault(case.url, set()).add(case.half)
    assert all(len(halves) == 1 for halves in by_url.values())
    assert not public & set(by_url), public & set(by_url)
    assert {path.parent.name for path in JUDGED.glob("*/*.log")} <= set(PARTS)
