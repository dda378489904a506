"""The difference between a manifest before and after an in-place patch, as a few operations.

A patch changes plain dicts in place (shmguard.manifests.podspec); what it changed is the
difference between a copy taken before and the result: values set, keys added, items
appended (and, never by shmguard's patch, things removed). yamledit applies the operations
to YAML text; json_patch turns them into an RFC 6902 JSON Patch (the admission webhook's
answer, shmguard.webhook.review). Lists are compared item by item: an item inserted or removed
in the middle shows as the items after it changed, then an append or a remove at the end; right
for any change, and minimal for what a patch does (append).
"""

from __future__ import annotations

import math
from typing import Any

from shmguard.budget import check
from shmguard.record import Record

SET, ADD, APPEND, REMOVE = "set", "add", "append", "remove"


class Op(Record):
    """One difference: SET the value at path; ADD key to the mapping at path; APPEND value to the sequence
    at path; REMOVE something at path (which the editor does not do in place)."""

    kind: str
    path: tuple
    key: Any = None
    value: Any = None


def diff(before: Any, after: Any, path: tuple = ()) -> list[Op]:
    """The operations that turn before into after (plain data), in document order.

    Equal subtrees are skipped with one ==, so values Python holds equal (1 and True, 1 and 1.0)
    count as unchanged; a patch never turns one into the other.
    """
    ops: list[Op] = []
    _diff(before, after, path, ops)
    return ops


def _diff(before: Any, after: Any, path: tuple, ops: list[Op]) -> None:
    check()  # every node: a Pod of thousands of containers stops when nobody waits (shmguard.budget)
    if before is after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        if before == after:
            return
        for key, value in after.items():
            if key in before:
                _diff(before[key], value, path + (key,), ops)
            else:
                ops.append(Op(ADD, path, key, value))
        ops.extend(Op(REMOVE, path + (key,)) for key in before if key not in after)
    elif isinstance(before, list) and isinstance(after, list):
        if before == after:
            return
        for index in range(min(len(before), len(after))):
            _diff(before[index], after[index], path + (index,), ops)
        ops.extend(Op(APPEND, path, None, value) for value in after[len(before):])
        ops.extend(Op(REMOVE, path + (index,)) for index in reversed(range(len(after), len(before))))  # last first
    elif type(before) is not type(after) or before != after:
        if isinstance(before, float) and isinstance(after, float) and math.isnan(before) and math.isnan(after):
            return
        ops.append(Op(SET, path, None, after))


def json_patch(ops: list[Op]) -> list[dict]:
    """The operations as an RFC 6902 JSON Patch: SET is replace, ADD is add at path/key, APPEND is add at
    path/- and REMOVE is remove (paths as JSON Pointers, RFC 6901)."""
    out: list[dict] = []
    for op in ops:
        if op.kind == SET:
            out.append({"op": "replace", "path": pointer(op.path), "value": op.value})
        elif op.kind == ADD:
            out.append({"op": "add", "path": pointer(op.path + (op.key,)), "value": op.value})
        elif op.kind == APPEND:
            out.append({"op": "add", "path": pointer(op.path) + "/-", "value": op.value})
        else:
            out.append({"op": "remove", "path": pointer(op.path)})
    return out


def pointer(path: tuple) -> str:
    """A JSON Pointer: each step escaped (~ as ~0, / as ~1)."""
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in path)
