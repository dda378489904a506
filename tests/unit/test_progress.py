"""Progress on stderr (#19 item 4): lines for a person at a terminal, nothing in pipes or with --json unless asked."""

from __future__ import annotations

import io

import pytest

from shmguard import main
from shmguard.progress import Reporter, wanted
from tests.support import needs


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_follows_the_terminal_json_and_the_flag():
    assert wanted(None, stream=Tty()) and not wanted(None, stream=io.StringIO())
    assert not wanted(None, as_json=True, stream=Tty())
    assert wanted(True, as_json=True, stream=io.StringIO()) and not wanted(False, stream=Tty())


def test_reporter_counts_elapsed_and_throttles():
    now = [0.0]
    out = io.StringIO()
    report = Reporter("shmguard x", True, stream=out, clock=lambda: now[0], every=0.5)
    report(1, 4, "a")
    now[0] = 0.1
    report(2, 4, "b")  # within 0.5 s of the last line: skipped
    now[0] = 0.7
    report(3, 4, "c")
    report(4, 4, "d")  # the last one always shows
    assert out.getvalue().splitlines() == ["shmguard x: [1/4] a (0.0 s elapsed)", "shmguard x: [3/4] c (0.7 s elapsed)",
                                           "shmguard x: [4/4] d (0.7 s elapsed)"]
    silent = io.StringIO()
    Reporter("shmguard x", False, stream=silent)(1, 1, "a")
    assert silent.getvalue() == ""


@pytest.mark.needs_torch
def test_measure_progress_only_when_asked_in_a_pipe(capsys):
    needs.module("torch")
    args = ["measure", "--dataset", "tests.support.datasets:fixed", "--batch-size", "4", "--samples", "8"]
    assert main(args) == 0
    assert "shmguard measure: [" not in capsys.readouterr().err  # stderr is not a terminal here
    assert main([*args, "--progress"]) == 0
    err = capsys.readouterr().err
    assert "shmguard measure: [8/8] samples read" in err


@pytest.mark.needs_torch
def test_tune_progress_says_done_total_and_best_so_far(capsys):
    needs.module("torch")
    args = ["tune", "--dataset", "tests.support.datasets:fixed", "--batch-size", "4", "--workers", "0",
            "--batches", "2", "--json"]
    assert main(args) == 0
    assert "shmguard tune: [" not in capsys.readouterr().err  # --json and a pipe: quiet
    assert main([*args, "--progress"]) == 0
    err = capsys.readouterr().err
    assert "shmguard tune: [1/1] num_workers=0 prefetch_factor=2:" in err and "best so far num_workers=0" in err
