"""`shmguard patch`: fix the /dev/shm volume, mount and memory limit of every pod template in YAML manifests.

Reads every file (or stdin) completely and patches all of them in memory first:
a bad document anywhere means an error naming it, exit 2, and no file written.
With -i each changed file is replaced atomically; --check only lists what would change.
"""

from __future__ import annotations

import sys

from shmguard.files import write_atomic
from shmguard.manifests.podspec import patch_documents
from shmguard.manifests.templates import ManifestError
from shmguard.manifests import yamlio
from shmguard.manifests.yamlio import dump, load


def patch(job, paths: list[str], in_place: bool, check: bool, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    sources = paths or ["-"]
    results = []
    for path in sources:
        name = "stdin" if path == "-" else path
        try:
            # Never more than the limit (+1, to tell that it was exceeded) in memory, however big the input.
            if path == "-":
                text = sys.stdin.read(yamlio.MAX_INPUT_BYTES + 1)
            else:
                with open(path, encoding="utf-8") as f:
                    text = f.read(yamlio.MAX_INPUT_BYTES + 1)
        except OSError as exc:
            raise ManifestError(f"{name}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ManifestError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        docs = load(text, name)
        try:
            changes = patch_documents(docs, job)
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
