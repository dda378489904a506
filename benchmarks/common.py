"""Helpers shared by the benchmark scripts (run as `python benchmarks/NAME.py`, so this folder is on sys.path)."""

from __future__ import annotations


def together(args: str, procs: int) -> str:
    """A shell line that runs procs copies side by side and exits non-zero if any of them did."""
    if procs == 1:
        return f"exec {args}"
    starts = "; ".join(f"{args} & p{i}=$!" for i in range(procs))
    waits = "; ".join(f"wait $p{i} || rc=$?" for i in range(procs))
    return f"rc=0; {starts}; {waits}; exit $rc"
