"""`shmguard patch`: fix the /dev/shm volume, mount and memory limit of every pod template in YAML manifests.

Reads every file (or stdin) completely and patches all of them in memory first:
a bad document anywhere means an error naming it, exit 2, and no file written. The
output differs from the input only in the lines the patch had to change
(shmguard.manifests.yamledit). With -i every changed file is first written beside
itself and only then renamed into place, keeping its mode and owner, so a read-only
directory or a full disk fails before any file changes. --check changes nothing and
prints a unified diff of what would change.
"""

from __future__ import annotations

import os
import sys

from shmguard.files import commit_staged, discard_staged, stage_atomic_bytes
from shmguard.manifests import yamlio
from shmguard.manifests.podspec import patch_documents
from shmguard.manifests.templates import ManifestError
from shmguard.manifests.yamledit import PatchedText, patch_text, unified_diff


def read_text(path: str, name: str) -> str:
    """The file (or stdin) as text, line ends as they are; at most the loader's limit (+1, to tell it was exceeded)."""
    limit = yamlio.MAX_INPUT_BYTES + 1
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:  # a text stream put in place of stdin
                return sys.stdin.read(limit)
            data = stream.read(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit)
    except OSError as exc:
        raise ManifestError(f"{name}: cannot read: {exc.strerror}") from None
    if len(data) >= limit:  # before decoding: the cut may split a character
        raise ManifestError(f"{name}: more than the {yamlio.MAX_INPUT_BYTES // 2**20} MiB shmguard patch reads; "
                            f"split the manifest")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def target_of(path: str, follow_symlinks: bool) -> str:
    """The file -i rewrites: path itself; a symlink only with follow_symlinks (then the file it points to)."""
    if not os.path.islink(path):
        return path
    if not follow_symlinks:
        raise ManifestError(f"{path}: is a symbolic link (to {os.readlink(path)}); -i would replace the link by a "
                            f"file: give --follow-symlinks to patch the file it points to")
    return os.path.realpath(path)


def patch_one(text: str, name: str, job) -> PatchedText:
    """The patched text of one input (pure: no I/O); ManifestError names the input."""
    def mutate(docs: list) -> list[str]:
        try:
            return patch_documents(docs, job)
        except ManifestError as exc:
            raise ManifestError(f"{name}: {exc}") from None

    return patch_text(text, name, mutate)


def patch(job, paths: list[str], in_place: bool, check: bool, follow_symlinks: bool = False, out=None,
          err=None) -> int:
    with yamlio.no_gc():
        return _patch(job, paths, in_place, check, follow_symlinks, out or sys.stdout, err or sys.stderr)


def _patch(job, paths: list[str], in_place: bool, check: bool, follow_symlinks: bool, out, err) -> int:
    sources = paths or ["-"]
    results = []
    for path in sources:
        name = "stdin" if path == "-" else path
        target = target_of(path, follow_symlinks) if in_place and path != "-" else path
        text = read_text(target, name)
        results.append((target, name, text, patch_one(text, name, job)))
    for _target, name, _text, patched in results:
        for fallback in patched.fallbacks:
            print(f"{name}: {fallback}", file=err)
    if check:
        total = 0
        for _target, name, text, patched in results:
            for change in patched.changes:
                print(f"{name}: {change}", file=err)
            total += len(patched.changes)
            if patched.text != text:
                out.writelines(unified_diff(text, patched.edits, fromfile=name, tofile=f"{name} (patched)"))
        if total:
            print(f"shmguard patch: {total} changes needed", file=err)
            return 1
        print("shmguard patch: nothing to change", file=err)
        return 0
    if in_place:
        write_all([(target, name, patched.text) for target, name, text, patched in results
                   if target != "-" and patched.text != text])
    for target, name, _text, patched in results:
        for change in patched.changes:
            print(f"{name}: {change}", file=err)
        if not in_place or target == "-":
            out.write(patched.text)
    return 0


def write_all(files: list[tuple[str, str, str]]) -> None:
    """Replace every (path, name, text) or none: all are written beside their file first, then renamed."""
    staged: list[tuple[str, str]] = []
    try:
        for path, name, text in files:
            try:
                staged.append((stage_atomic_bytes(path, text.encode("utf-8")), path))
            except OSError as exc:
                raise ManifestError(f"{name}: cannot write it ({exc.strerror or exc}); no file was changed") from None
    except BaseException:
        for tmp, _path in staged:
            discard_staged(tmp)
        raise
    for index, (tmp, path) in enumerate(staged):
        try:
            commit_staged(tmp, path)
        except OSError as exc:
            for later, _path in staged[index:]:
                discard_staged(later)
            raise ManifestError(f"{path}: cannot replace it ({exc.strerror or exc}); "
                                f"{index} of {len(staged)} files were already patched") from None
