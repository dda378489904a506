"""Issue 42's rules judged on fresh public manifests: the development part and the held-out part, scored apart.

    python benchmarks/manifest_corpus.py dev            # the part the rules may be written from
    python benchmarks/manifest_corpus.py heldout        # the part no rule is written from (score it, never tune on it)
    python benchmarks/manifest_corpus.py dev heldout --failures   # every miss, one line each
    python benchmarks/manifest_corpus.py heldout --json out.json

The corpus is tests/data/manifests-42 (CORPUS.md there: every file's source and how it was split). Each file is
run through the real command, as a user runs it: `shmguard patch --json` with a job on the command line
(--workers 4 --batch-size 64 --sample-shape 3,224,224) and the file's own extra arguments (CASES.yaml), then
again on its own output. Per file:

- no traceback: exit 0 or 2 (2: an error the JSON names), never a Python traceback;
- --json: stderr is exactly one JSON object (every message inside it);
- intact: the output reads back as YAML with as many documents (JSON stays JSON);
- nothing lowered: no memory limit or request, pod limit or sizeLimit ends lower than it was, nor is removed;
- comments kept: every comment line of the input is in the output;
- not re-written: no document re-written whole, and every line of the input is still there but the values changed;
- idempotent: patching the output again changes nothing.

Per pod template, against CASES.yaml (what a user expects, written before the rules): `sized` (sized, with the
right container and process count), `alone` (left alone with a reason), `refused` (an error that names the
placeholder the size depends on), `training` (sized, or its need told), `any` (either way, but not an error).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "manifests-42"
JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
FILE_CHECKS = ("no traceback", "--json", "intact", "nothing lowered", "comments kept", "not re-written", "idempotent")
PROCS_NOTE = re.compile(r"\b(\d+) training processes\b")


def shmguard(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "shmguard", "patch", *args], input=stdin, capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def one_json(text: str):
    """The one JSON object stderr holds, or None when it holds anything else too."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def quantity(value) -> float | None:
    from shmguard.units import parse_quantity

    try:
        return float(parse_quantity(value))
    except (ValueError, TypeError):
        return None


def memory_values(node, path=()) -> dict[tuple, object]:
    """Every memory limit or request, pod limit and sizeLimit in a document, by its path."""
    out: dict[tuple, object] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            here = path + (key,)
            if key == "sizeLimit" or (key == "memory" and len(path) and path[-1] in ("limits", "requests")):
                out[here] = value
            else:
                out.update(memory_values(value, here))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.update(memory_values(value, path + (index,)))
    return out


def lowered(before: list, after: list) -> list[str]:
    """The memory values that ended lower, or went away."""
    misses = []
    for index, (old, new) in enumerate(zip(before, after)):
        was, now = memory_values(old), memory_values(new)
        for path, value in was.items():
            where = f"document {index + 1} {'.'.join(map(str, path))}"
            if path not in now:
                misses.append(f"{where}: {value} removed")
                continue
            a, b = quantity(value), quantity(now[path])
            if a is not None and (b is None or b < a):
                misses.append(f"{where}: {value} -> {now[path]}")
    return misses


def comment_lines(text: str) -> collections.Counter:
    return collections.Counter(line.strip() for line in text.splitlines() if line.strip().startswith("#"))


def chosen(result: dict) -> tuple[list[str], int | None]:
    """The DataLoader container(s) and processes per pod a result reports (its own fields, else its words)."""
    names = result.get("containers")
    if names is None:
        names = sorted({m.group(1) for c in result.get("changes", [])
                        for m in [re.search(r"\bfor (\S+)$", c.get("why", ""))] if m})
    procs = result.get("procs_per_node")
    if procs is None and result.get("status") in ("changed", "unchanged"):
        found = [int(m.group(1)) for n in result.get("notes", []) for m in [PROCS_NOTE.search(n)] if m]
        procs = found[0] if found else 1
    return list(names), procs


def judge(expected: dict, result: dict | None) -> str | None:
    """None when the template's result is what CASES.yaml expects, else what is wrong."""
    want = expected["expect"]
    if want == "any":  # either way, but never an error the user did not ask for (exit 2 writes nothing)
        if result is not None and result.get("status") == "error":
            return f"an error where either way would do: {result.get('reason')}"
        return None
    if result is None:
        return "not found (no result for this template)"
    status, reason = result.get("status"), result.get("reason") or ""
    if want == "alone":
        if status != "skipped":
            return f"{status}, expected left alone ({expected.get('why', '')})"
        return None if reason.strip() else "left alone without a reason"
    if want == "refused":
        if status != "error":
            return f"{status}, expected an error naming {'/'.join(expected['mentions'])}"
        if not any(name in reason for name in expected["mentions"]):
            return f"the error does not name {'/'.join(expected['mentions'])}: {reason}"
        return None
    if want == "training":
        if status in ("changed", "unchanged") or (status == "skipped" and result.get("needs", {}).get("shm")):
            return None
        return f"{status}, expected recognised as training: {reason}"
    if status not in ("changed", "unchanged"):
        return f"{status}, expected sized: {reason}"
    names, procs = chosen(result)
    if expected.get("container") and names != [expected["container"]]:
        return f"container {', '.join(names) or '(none said)'}, expected {expected['container']}"
    if expected.get("procs") is not None and procs != expected["procs"]:
        return f"{procs} processes, expected {expected['procs']}"
    return None


def load_all(text: str):
    return list(yaml.safe_load_all(text))


def score_file(part: Path, case: dict) -> dict:
    path = part / case["file"]
    text = path.read_text()
    args = [*JOB, *case.get("args", []), "--json"]
    first = shmguard([*args, str(path.relative_to(ROOT))])
    checks: dict[str, str | None] = {}
    checks["no traceback"] = (None if first.returncode in (0, 2) and "Traceback" not in first.stderr
                              else f"exit {first.returncode}: {first.stderr.strip().splitlines()[-1:]}")
    report = one_json(first.stderr)
    checks["--json"] = None if report is not None else f"stderr is not one JSON object: {first.stderr[:200]!r}"
    results = [t for f in (report or {}).get("files", []) for t in f.get("templates", [])]
    errors = [f.get("error") for f in (report or {}).get("files", []) if f.get("error")]
    out = first.stdout
    if first.returncode == 2 or not out:  # nothing written: the file-level checks are about the input
        out = text
    try:
        before, after = load_all(text), load_all(out)
        checks["intact"] = None if len(before) == len(after) else f"{len(before)} documents became {len(after)}"
    except yaml.YAMLError as exc:
        before, after = load_all(text), []
        checks["intact"] = f"the output is not YAML: {str(exc).splitlines()[0]}"
    if text.lstrip().startswith(("{", "[")) and not out.lstrip().startswith(("{", "[")):
        checks["intact"] = "a JSON file came out as YAML"
    misses = lowered(before, after) if after else []
    checks["nothing lowered"] = "; ".join(misses) or None
    lost = comment_lines(text) - comment_lines(out)
    checks["comments kept"] = f"{sum(lost.values())} comment lines lost, e.g. {next(iter(lost))}" if lost else None
    gone = collections.Counter(text.splitlines()) - collections.Counter(out.splitlines())
    sets = sum(1 for t in results for c in t.get("changes", []) if c.get("before") is not None)
    whole = "re-written whole" in first.stderr
    checks["not re-written"] = ("a document was re-written whole" if whole else
                                f"{sum(gone.values())} input lines gone for {sets} values changed"
                                if sum(gone.values()) > sets else None)
    if first.returncode == 0 and first.stdout:
        second = shmguard(args, stdin=first.stdout)
        again = one_json(second.stderr) or {}
        changed = second.stdout != first.stdout or again.get("changes", 0)
        checks["idempotent"] = f"the second run changed {again.get('changes')} values" if changed else None
    else:
        checks["idempotent"] = None
    templates = []
    used: set[int] = set()
    for expected in case["templates"]:
        match = next((i for i, r in enumerate(results) if i not in used and r.get("document") == expected["doc"]
                      and expected["at"] in (r.get("path") or "")), None)
        if match is not None:
            used.add(match)
        result = results[match] if match is not None else None
        if result is None and errors:
            result = {"status": "error", "reason": "; ".join(errors)}
        templates.append({"doc": expected["doc"], "at": expected["at"], "expect": expected["expect"],
                          "miss": judge(expected, result),
                          "got": None if result is None else {k: result.get(k) for k in ("status", "reason", "path")}})
    return {"file": case["file"], "rules": case["rules"], "checks": checks, "templates": templates,
            "unlabelled": [r.get("path") for i, r in enumerate(results) if i not in used]}


def score(part_name: str) -> dict:
    part = CORPUS / part_name
    cases = yaml.safe_load((part / "CASES.yaml").read_text())
    files = [score_file(part, case) for case in cases]
    by_check = {name: [sum(f["checks"][name] is None for f in files), len(files)] for name in FILE_CHECKS}
    by_expect: dict[str, list[int]] = {}
    for f in files:
        for t in f["templates"]:
            tally = by_expect.setdefault(t["expect"], [0, 0])
            tally[0] += t["miss"] is None
            tally[1] += 1
    return {"part": part_name, "files": files, "checks": by_check, "templates": by_expect}


def print_part(result: dict, failures: bool) -> None:
    print(f"## {result['part']}: {len(result['files'])} files")
    for name, (good, total) in result["checks"].items():
        print(f"  {name:<16} {good}/{total} files")
    for kind in ("sized", "alone", "refused", "training", "any"):
        if kind in result["templates"]:
            good, total = result["templates"][kind]
            print(f"  {kind:<16} {good}/{total} templates")
    judged = {k: v for k, v in result["templates"].items() if k != "any"}
    good = sum(v[0] for v in judged.values())
    total = sum(v[1] for v in judged.values())
    print(f"  {'all templates':<16} {good}/{total} (the `any` ones apart: judged only for not ending in an error)")
    if failures:
        for f in result["files"]:
            for name, miss in f["checks"].items():
                if miss:
                    print(f"  MISS {f['file']}: {name}: {miss}")
            for t in f["templates"]:
                if t["miss"]:
                    print(f"  MISS {f['file']} doc {t['doc']} {t['at']}: {t['miss']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", choices=["dev", "heldout"])
    parser.add_argument("--failures", action="store_true", help="List every miss.")
    parser.add_argument("--json", metavar="FILE", help="Write the full results as JSON.")
    args = parser.parse_args(argv)
    results = [score(part) for part in args.parts]
    for result in results:
        print_part(result, args.failures)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
