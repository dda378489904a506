"""Property tests of log following: a log replayed after an engine restart comes out whole and once.

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.properties import SETTINGS


@SETTINGS
@given(st.binary(max_size=300), st.lists(st.integers(min_value=1, max_value=40), max_size=30), st.data())
def test_replayed_output_is_copied_once_however_it_is_chunked(data, cuts, draw):
    """After an engine restart the log is replayed from the start and the bytes already copied are
    skipped: for any split of the output into chunks, before and after, it comes out whole and once."""
    import io

    from shmguard.engine.follow import Output

    def chunks(blob):
        out, i = [], 0
        for n in cuts or [len(blob) or 1]:
            out.append(blob[i:i + n])
            i += n
        out.append(blob[i:])
        return [c for c in out if c]

    copied_before = draw.draw(st.integers(min_value=0, max_value=len(data)))
    output = Output(io.TextIOWrapper(io.BytesIO(), encoding="latin-1"), io.StringIO())  # bytes in, bytes out
    for chunk in chunks(data[:copied_before]):  # what the first attach delivered before the engine died
        output.write(0, chunk)
    skip = list(output.copied)
    for chunk in chunks(data):  # the replay of the whole log
        output.write(0, chunk, skip)
    output.out.flush()
    assert output.out.buffer.getvalue() == data
    assert output.copied[0] == len(data)
