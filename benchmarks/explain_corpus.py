"""`shmguard explain` scored on the judged corpus of issue 41, both halves side by side.

Each log of tests/data/explain/judged/{development,held-out,held-out-2,...,held-out-11}/ is diagnosed as a new user pipes it in (no job,
no --shm-size, no --platform), and scored as tests/support/explain_corpus.faults says:

- a shared-memory death scores when the verdict blames shared memory, the fix names each platform's knob, and,
  where the log states a size, the fix names a size at least that large;
- a look-alike scores when it gets its own cause, is not blamed on shared memory, and its fix names no
  /dev/shm size.

    python3 benchmarks/explain_corpus.py                 # the table, and the development half's misses
    python3 benchmarks/explain_corpus.py --tree /tmp/old # the same, with another tree's shmguard
    python3 benchmarks/explain_corpus.py --show-held-out # also name the held-out misses (never tune on them)

The split and the goal are in tests/data/explain/judged/SPLIT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL = 0.9
PARTS = ("development", "held-out", "held-out-2", "held-out-3", "held-out-4", "held-out-5", "held-out-6",
         "held-out-7", "held-out-8", "held-out-9", "held-out-10", "held-out-11")  # SPLIT.md: a held-out set a round

SCORE = r"""
import json, sys
sys.path.append(sys.argv[1])  # after PYTHONPATH: the scored tree's shmguard, this tree's corpus and scorer
from tests.support.explain_corpus import cases, faults
out = []
for case in cases():
    found = case.diagnose()
    out.append({"half": case.half, "name": case.name, "shm": case.shm, "expect": case.cause,
                "verdict": found.verdict, "cause": found.cause, "faults": faults(case, found)})
print(json.dumps(out))
"""


def score(tree: Path) -> list[dict]:
    """Every case's diagnosis and faults, with `tree`'s shmguard (the corpus and scorer are this tree's)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run([sys.executable, "-c", SCORE, str(REPO)], env=env, capture_output=True, text=True,
                            check=True, cwd="/")
    return json.loads(result.stdout)



def table(rows: list[dict]) -> str:
    names = ["development", "held-out (round 1)"] + [f"{p} (round {p.rsplit('-', 1)[1]})" for p in PARTS[2:]]
    lines = ["| measure | " + " | ".join(names) + " | goal (held-out) |", "|---" * (len(PARTS) + 2) + "|"]

    def part(half: str, shm: bool, test) -> str:
        mine = [r for r in rows if r["half"] == half and r["shm"] == shm]
        hits = sum(1 for r in mine if test(r))
        return f"{hits}/{len(mine)} ({100 * hits / len(mine):.0f}%)" if mine else "-"

    def blamed(r: dict) -> bool:
        return any(f.startswith("blamed") for f in r["faults"])

    lines.append("| shm deaths: verdict, knob and the size the log states | "
                 + " | ".join(part(h, True, lambda r: not r["faults"]) for h in PARTS)
                 + f" | ≥ {GOAL:.0%} |")
    lines.append("| shm deaths: verdict blames shared memory | "
                 + " | ".join(part(h, True, lambda r: not any(f.startswith("verdict") for f in r["faults"]))
                              for h in PARTS) + " | |")
    lines.append("| look-alikes named with their own cause | "
                 + " | ".join(part(h, False, lambda r: not r["faults"]) for h in PARTS)
                 + f" | ≥ {GOAL:.0%} |")
    lines.append("| look-alikes: their own cause, whatever the fix's words | "
                 + " | ".join(part(h, False, lambda r: r["cause"] == r["expect"]) for h in PARTS)
                 + " | |")
    lines.append("| look-alikes blamed on /dev/shm | "
                 + " | ".join(part(h, False, blamed) for h in PARTS) + " | 0 |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=REPO, help="the tree whose shmguard is scored (default: this one)")
    parser.add_argument("--show-held-out", action="store_true", help="also list the held-out half's misses")
    args = parser.parse_args()
    rows = score(args.tree.resolve())
    print(table(rows))
    halves = PARTS if args.show_held_out else ("development",)
    for half in halves:
        misses = [r for r in rows if r["half"] == half and r["faults"]]
        print(f"\n{half}: {len(misses)} miss(es)")
        for r in misses:
            print(f"  {r['name']}: expected {r['expect']}, got {r['verdict']} ({r['cause']}): {'; '.join(r['faults'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
