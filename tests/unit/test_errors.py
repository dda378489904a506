"""Every exit code shmguard defines is documented in the exit-code table of docs/reference/exit-codes.md."""

from __future__ import annotations

import re

from shmguard import errors
from tests.support.paths import CHECKOUT

EXIT_CODES = CHECKOUT / "docs" / "reference" / "exit-codes.md"


def documented_codes() -> set[int]:
    table = EXIT_CODES.read_text(encoding="utf-8")
    return {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}


def test_every_exit_code_is_in_the_documented_table():
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert defined == {0, 1, 2, 70, 125, 130, 141}
    assert defined <= documented_codes()


def test_commands_return_only_defined_codes(tmp_path, capsys):
    from shmguard import main

    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    job = ["--workers", "2", "--batch-size", "8", "--sample-bytes", "1k"]
    calls = [["--version"], ["nope"], ["check", *job], ["check", "--workers", "x"], ["health", "--min-free", "1"],
             ["health", "--bogus"], ["render", "k8s", *job, "--image", "x"], ["patch", *job, str(tmp_path / "none.yaml")],
             ["run", *job, "--memory", "1k", "--dry-run", "x"]]
    for argv in calls:
        assert main(argv) in defined, argv
    capsys.readouterr()
