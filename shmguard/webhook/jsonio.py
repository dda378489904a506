"""JSON in and out of the webhook: orjson when it is installed, the json module otherwise.

Reading the AdmissionReview, copying its Pod and writing the answer and the log line
are a third of a review's CPU with the json module; orjson does them several times
faster (BENCHMARKS.md section 8). What orjson refuses (NaN and Infinity, lone
surrogates, bodies that are not UTF-8, keys that are not strings) goes to the json
module, so what is accepted stays the json module's. Two differences: orjson reads an
integer beyond 64 bits as a float (the apiserver never sends one: it has decoded the
Pod into int32 and int64 fields before it asks), and writes a NaN or an infinite float
as null (the json module writes NaN and Infinity, which are not JSON; the webhook's
answers and log lines carry no such float).

orjson before 3.9.15 has no limit on nesting: a body of a million `[` crashes the process
(CVE-2024-27454). Such a version is not used; the json module refuses deep nesting with a
RecursionError, which the review answers with 400, as orjson 3.9.15 and later refuse it too.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any, Callable

SAFE_ORJSON = (3, 9, 15)  # the first orjson that bounds nesting (CVE-2024-27454)


def safe_version(version: str) -> bool:
    """Whether an orjson version string is SAFE_ORJSON or later (a version it cannot read is not)."""
    try:
        return tuple(int(part) for part in version.split(".")[:3]) >= SAFE_ORJSON
    except ValueError:
        return False


def _usable_orjson() -> ModuleType | None:
    try:
        import orjson as module
    except ImportError:  # the webhook extra brings it; without it, the json module does all
        return None
    return module if safe_version(getattr(module, "__version__", "0")) else None


orjson = _usable_orjson()


def loads(data: bytes | str) -> Any:
    """The JSON document in data; ValueError (or RecursionError) when it is not JSON, as json.loads."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # not JSON, or JSON orjson is stricter about: the json module decides
    return json.loads(data)


def dumps(value: Any, default: Callable[[Any], Any] | None = None, ascii_only: bool = False) -> bytes:
    """Compact JSON (no spaces) as UTF-8 bytes; ascii_only: non-ASCII characters as \\u escapes (for log streams
    whatever their encoding). TypeError for what is not JSON, as json.dumps."""
    if orjson is not None:
        try:
            out = orjson.dumps(value, default=default)
        except TypeError:
            pass  # big integers, lone surrogates, keys that are not strings: the json module's way
        else:
            if not ascii_only or out.isascii():
                return out
    return json.dumps(value, separators=(",", ":"), default=default).encode()


def copy(value: Any) -> Any:
    """A deep copy of JSON data by a round trip (many times faster than copy.deepcopy); ValueError or TypeError
    for what does not survive one."""
    if orjson is not None:
        try:
            copied = orjson.loads(orjson.dumps(value))
        except (TypeError, ValueError):
            pass
        else:
            if copied == value:  # orjson writes NaN as null: such a document is copied by the json module
                return copied
    return json.loads(json.dumps(value))
