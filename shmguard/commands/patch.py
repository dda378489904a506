"""`shmguard patch`: fix the /dev/shm volume, mount and memory limit of every pod template in YAML manifests.

Reads every file (or stdin) completely and patches all of them in memory first:
a bad document anywhere means an error naming it, exit 2, and no file written.
With -i each changed file is replaced atomically; --check only lists what would change.
"""

from __future__ import annotations

import sys

from shmguard import k8s
from shmguard.files import write_atomic
from shmguard.k8s import ManifestError


def load(text: str, source: str) -> list:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(f"{source}: not valid YAML{where}: {problem}") from None


def patch(job, paths: list[str], in_place: bool, check: bool, out=None, err=None) -> int:
    from shmguard.commands.render import dump

    out = out or sys.stdout
    err = err or sys.stderr
    sources = paths or ["-"]
    results = []
    for path in sources:
        name = "stdin" if path == "-" else path
        try:
            text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        except OSError as exc:
            raise ManifestError(f"{name}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ManifestError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        docs = load(text, name)
        try:
            changes = k8s.patch_documents(docs, job)
        except ManifestError as exc:
            raise ManifestError(f"{name}: {exc}") from None
        results.append((path, name, docs, changes))
    if check:
        total = sum(len(changes) for *_, changes in results)
        for _path, name, _docs, changes in results:
            for change in changes:
                print(f"{name}: {change}", file=out)
        if total:
            print(f"shmguard patch: {total} changes needed", file=err)
            return 1
        print("shmguard patch: nothing to change", file=err)
        return 0
    for path, name, docs, changes in results:
        for change in changes:
            print(f"{name}: {change}", file=err)
        if in_place and path != "-":
            if changes:
                write_atomic(path, dump(docs))
        else:
            out.write(dump(docs))
    return 0
