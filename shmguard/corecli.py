"""`shmguard check` on the standard library alone (argparse), so that `pip install shmguard` needs no extras.

`check` runs inside training containers, where shmguard may be installed without
click, docker or yaml; `health` has its own even smaller parser. The options come
from the same table as the click commands' (shmguard.options), and errors map to
the same exit codes (shmguard.errors).
"""

from __future__ import annotations

import argparse
import re
import sys

CHECK_DESCRIPTION = """Check this container against the job: /dev/shm, memory, CPUs, GPUs, open files.

Exit 0 when every finding is PASS or WARN, 1 on FAIL (--strict: on WARN too),
2 on bad usage or when the probes cannot run."""


# A negative size (`-5m`, `-1.5g`) given as an option's value: argparse reads only plain numbers (`-5`) so, and
# would take `-5m` for an option and say "expected one argument"; this way the size's own check names it.
_NEGATIVE_VALUE = re.compile(r"^-\d+(?:\.\d+)?[A-Za-z]{0,3}$|^-\.\d+[A-Za-z]{0,3}$")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE  # no option of check looks like a number

    def error(self, message: str):  # one line and exit 2, as the click commands do
        from shmguard.errors import UsageError

        if message.startswith("unrecognized arguments: "):  # the option meant, as click suggests it
            import difflib

            words = [w.split("=", 1)[0] for w in message.split(": ", 1)[1].split() if w.startswith("--")]
            close = [difflib.get_close_matches(w, list(self._option_string_actions), n=1, cutoff=0.8) for w in words]
            meant = [f"{w} (did you mean {c[0]}?)" for w, c in zip(words, close) if c]
            if meant:
                message = f"unknown option {'; '.join(meant)}"
        raise UsageError(message)

    def _print_message(self, message, file=None) -> None:  # argparse swallows write errors: the boundary handles them
        if message:
            (file or sys.stderr).write(message)


def check_parser() -> argparse.ArgumentParser:
    from shmguard.job import OPTIONS
    from shmguard.options import COLLATE_HELP, DATASET_HELP
    from shmguard.units import SIZE_RULE

    parser = _Parser(prog="shmguard check", description=CHECK_DESCRIPTION, epilog=f"SIZE: {SIZE_RULE}.",
                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)  # --worker is no option
    for option in OPTIONS:
        for flags, settings in option.argparse_declarations():
            parser.add_argument(*flags, **settings)
    parser.add_argument("--dataset", metavar="MODULE:CALLABLE", help=DATASET_HELP)
    parser.add_argument("--collate-fn", dest="collate_fn", metavar="MODULE:CALLABLE", help=COLLATE_HELP)
    parser.add_argument("--json", dest="as_json", action="store_true",
                        help="Print one JSON object (verdict, required, recommended, findings, probes).")
    parser.add_argument("--strict", action="store_true", help="Exit 1 on WARN too.")
    parser.add_argument("--root", help="Read /proc, /sys and /dev under this root (tests). [env var: SHMGUARD_ROOT]")
    return parser


def check_main(argv: list[str]) -> int:
    from shmguard.errors import guarded

    return guarded(lambda: check_command(argv))


def check_command(argv: list[str]) -> int:
    """The options parsed (--help: exit 0 with the usage), then `shmguard check` (shmguard.commands.check)."""
    from shmguard.commands.check import check_options

    try:
        args = vars(check_parser().parse_args(argv))
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    return check_options(args)
