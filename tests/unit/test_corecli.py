"""`shmguard check`'s argparse command line: the same one-line errors as the click commands, no prefix options."""

from __future__ import annotations

import pytest

from shmguard import main


@pytest.mark.parametrize(("argv", "line"), [
    # argparse took --worker for --workers (a prefix): a typo no other command accepts
    (["--worker", "4", "--batch-size", "64", "--sample-bytes", "1k"], "unknown option --worker (did you mean --workers?)"),
    (["--wokers", "4"], "unknown option --wokers (did you mean --workers?)"),
    (["--batchsize", "3"], "unknown option --batchsize (did you mean --batch-size?)"),
    (["--frob", "1"], "unrecognized arguments: --frob 1"),  # nothing close: argparse's words
    # the one missing is named, not the one given
    (["--workers", "4"], "the job needs --batch-size (or SHMGUARD_BATCH_SIZE) too: only its workers were given"),
    (["--batch-size", "4"], "the job needs --workers (or SHMGUARD_WORKERS) too: only its batch size was given"),
    # a negative size after a space is the value, named by the size's own check (argparse took `-5m` for an option)
    (["--workers", "2", "--batch-size", "4", "--sample-bytes", "-5m"], "--sample-bytes: '-5m': a size cannot be negative"),
    (["--workers", "-2", "--batch-size", "4", "--sample-bytes", "5m"], "--workers must be at least 0, not -2"),
])
def test_bad_usage_is_one_line_that_names_the_fix(capsys, monkeypatch, argv, line):
    for var in ("SHMGUARD_WORKERS", "SHMGUARD_BATCH_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"shmguard: error: {line}\n"
