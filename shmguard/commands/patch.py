"""`shmguard patch`: fix the /dev/shm volume, mount and memory limit of every pod template in YAML manifests.

Reads every file (or stdin) completely and sizes all of them in memory first
(shmguard.manifests.podspec.patch_documents); every template is reported, changed or
left alone and why, on stderr (`--json`: one object). A bad document anywhere is
reported with the others, then exit 2 and no file written. With -i each changed file
is replaced atomically; --check only lists what would change.
"""

from __future__ import annotations

import json
import sys

from shmguard.files import write_atomic
from shmguard.manifests import yamlio
from shmguard.manifests.podspec import PatchOptions, patch_documents
from shmguard.manifests.templates import ManifestError
from shmguard.manifests.yamlio import dump, load


def read(path: str) -> tuple[str, str]:
    name = "stdin" if path == "-" else path
    try:
        # Never more than the limit (+1, to tell that it was exceeded) in memory, however big the input.
        if path == "-":
            return name, sys.stdin.read(yamlio.MAX_INPUT_BYTES + 1)
        with open(path, encoding="utf-8") as f:
            return name, f.read(yamlio.MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"{name}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def patch(defaults, paths: list[str], in_place: bool, check: bool, out=None, err=None,
          options: PatchOptions | None = None, as_json: bool = False) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    results = []  # (path, name, docs, summary or None, file error or None)
    for path in paths or ["-"]:
        try:
            name, text = read(path)
            docs = load(text, name)
        except ManifestError as exc:
            results.append((path, "stdin" if path == "-" else path, None, None, str(exc)))
            continue
        results.append((path, name, docs, patch_documents(docs, defaults, options), None))
    failed = any(error or summary.errors for *_, summary, error in results)
    changes = sum(len(summary.changes) for *_, summary, error in results if summary)
    if as_json:
        report = {"files": [{"file": name, "error": error, **(summary.to_json() if summary else {})}
                            for _p, name, _d, summary, error in results],
                  "changes": changes, "errors": failed}
        print(json.dumps(report, indent=2), file=err)
    else:
        for _path, name, _docs, summary, error in results:
            for line in [error] if error else summary.lines():
                print(line if error else f"{name}: {line}", file=err)
    if failed:
        print("shmguard patch: errors above; nothing written", file=err)
        return 2
    if check:
        for _path, name, _docs, summary, _error in results:
            for line in summary.changes:
                print(f"{name}: {line}", file=out)
        print(f"shmguard patch: {changes} changes needed" if changes else "shmguard patch: nothing to change", file=err)
        return 1 if changes else 0
    for path, _name, docs, summary, _error in results:
        if in_place and path != "-":
            if summary.changes:
                write_atomic(path, dump(docs))
        else:
            out.write(dump(docs))
    return 0
