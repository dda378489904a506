"""jsonio: orjson's speed with the json module's rules: the same documents accepted, read and copied, with orjson
installed or not."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmguard.webhook import jsonio
from tests.support.webhook import DATA


@pytest.fixture(params=["orjson", "json module"])
def which(request, monkeypatch):
    if request.param == "orjson":
        pytest.importorskip("orjson")
    else:
        monkeypatch.setattr(jsonio, "orjson", None)
    return request.param


# What orjson refuses and the json module takes: NaN and Infinity, lone surrogates, UTF-16.
ODD = [b'{"a": NaN, "b": -Infinity}', b'{"s": "12345678901234567890", "n": 18446744073709551615}', b'["\\ud800"]',
       '{"x": [1, 2.5, true, null]}'.encode("utf-16"), b'{"dup": 1, "dup": 2}']


@pytest.mark.parametrize("body", ODD + [path.read_bytes() for path in sorted(DATA.glob("*.json"))])
def test_loads_reads_what_the_json_module_reads(which, body):
    got, want = jsonio.loads(body), json.loads(body)
    assert json.dumps(got) == json.dumps(want)  # NaN included (NaN != NaN)


def test_an_integer_beyond_64_bits_is_read_as_a_number(which):
    value = jsonio.loads(b'{"n": 123456789012345678901234567890}')["n"]
    assert value == pytest.approx(123456789012345678901234567890)  # a float with orjson (documented), else an int


@pytest.mark.parametrize("body", [b"{not json", b"", b"[1,]", b'{"a": 1} extra', b"\xff\xfe\xfa", b"[" * 100000])
def test_loads_refuses_what_the_json_module_refuses(which, body):
    with pytest.raises((ValueError, RecursionError)):
        jsonio.loads(body)


def test_dumps_is_compact_json_and_falls_back_for_what_orjson_cannot_write(which):
    assert jsonio.dumps({"a": [1, "b", None, True]}) == b'{"a":[1,"b",null,true]}'
    assert json.loads(jsonio.dumps({"n": 2**70, "s": "\ud800"})) == {"n": 2**70, "s": "\ud800"}
    assert jsonio.dumps({1: "int key"}) == b'{"1":"int key"}'
    assert jsonio.dumps({"t": object()}, default=lambda o: "obj") == b'{"t":"obj"}'
    with pytest.raises(TypeError):
        jsonio.dumps({"t": object()})


def test_ascii_only_escapes_what_is_not_ascii(which):
    out = jsonio.dumps({"name": "grüße"}, ascii_only=True)
    assert out.isascii() and json.loads(out) == {"name": "grüße"}
    assert json.loads(jsonio.dumps({"name": "grüße"})) == {"name": "grüße"}


def test_copy_keeps_nan_infinity_and_big_integers(which):
    value = {"a": [float("nan"), 2**70, {"b": "c"}, float("inf")], "t": True, "one": 1}
    copied = jsonio.copy(value)
    assert math.isnan(copied["a"][0]) and copied["a"][1:] == value["a"][1:]
    assert copied["t"] is True and type(copied["one"]) is int
    assert copied["a"][2] is not value["a"][2]


# Finite floats: orjson writes NaN and infinities as null (documented); copy keeps them (tested above). 64-bit
# integers: orjson reads larger ones as floats (documented, tested above).
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=20)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(JSON)
def test_round_trips_agree_with_the_json_module(value):
    assert json.dumps(jsonio.loads(jsonio.dumps(value))) == json.dumps(json.loads(json.dumps(value)))
    assert json.dumps(jsonio.copy(value)) == json.dumps(value)


@pytest.mark.parametrize("version, safe", [("3.8.3", False), ("3.9.14", False), ("3.9.15", True), ("3.10.0", True),
                                           ("3.13.0", True), ("4", True), ("3.10.0rc1", False), ("", False)])
def test_only_an_orjson_that_bounds_nesting_is_used(version, safe):
    """Issue 33, item 3: orjson before 3.9.15 crashes on deep nesting (CVE-2024-27454)."""
    assert jsonio.safe_version(version) is safe


def test_a_deeply_nested_body_is_a_bad_review_not_a_crash():
    """Run in a child: with an unsafe orjson the parse kills the process (SIGSEGV) rather than raising."""
    import os
    import subprocess
    import sys

    code = ("from shmguard.webhook.review import BadReview, parse_review\n"
            "try:\n    parse_review(b'[' * 1000000 + b']' * 1000000)\n"
            "except BadReview:\n    print('refused')\n")
    root = str(DATA.parents[2])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0 and done.stdout == "refused\n", (done.returncode, done.stderr[-500:])
