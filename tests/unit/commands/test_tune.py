"""The pure parts of `shmguard tune`: the sweep, the recommendation, the PNG."""

from __future__ import annotations

import struct
import zlib

import pytest

from shmguard.commands.tune import Step, TuneResult, default_sweep, parse_list, recommend, table, write_png
from shmguard.errors import UsageError
from shmguard.measuring import Measurement


@pytest.mark.parametrize("cpus, sweep", [(1.0, [0, 1]), (2.0, [0, 1, 2]), (1.5, [0, 1]), (6.0, [0, 1, 2, 4, 6]),
                                         (16.0, [0, 1, 2, 4, 8, 16])])
def test_default_sweep(cpus, sweep):
    assert default_sweep(cpus) == sweep


def test_parse_list():
    assert parse_list("8,0,2,2", "--workers", 0) == [0, 2, 8]
    for bad in ("", "a", "-1", "0"):
        with pytest.raises(UsageError):
            parse_list(bad, "--prefetch-factors", 1)


def steps(*rates):
    return [Step(w, 2, w * 100, rate) for w, rate in rates]


def test_recommend_takes_the_smallest_within_five_percent():
    assert recommend(steps((0, 10.0), (1, 12.0), (2, 20.0), (4, 20.5), (8, 19.0))).workers == 2
    assert recommend(steps((0, 10.0), (2, 18.0), (4, 20.0))).workers == 4
    assert recommend([Step(8, 2, 1, skipped="too big")]) is None


def test_table_and_png(tmp_path):
    result_steps = steps((0, 10.0), (2, 20.0)) + [Step(8, 2, 10**9, skipped="needs 1 GiB")]
    result = TuneResult(Measurement("m:f", 16, 32, 2, 1000, 1000), tuple(result_steps), recommend(result_steps))
    text = table(result)
    assert "recommended: num_workers=2" in text and "skipped" in text
    path = tmp_path / "tune.png"
    write_png(str(path), result, width=60, height=30)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (60, 30)
    idat_len = struct.unpack(">I", data[33:37])[0]
    raw = zlib.decompress(data[41:41 + idat_len])
    assert len(raw) == height * (1 + width * 3)


def test_a_step_beyond_the_cpus_does_not_print_torchs_worker_warning(recwarn):
    """The sweep goes past the CPUs on purpose; torch's 'excessive worker creation' warning would be noise."""
    import os

    try:
        from torch.utils.data import default_collate
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true: torch must be installed", pytrace=False)
        pytest.skip("torch is not installed")
    from shmguard.commands.tune import run_step
    from shmguard.probe import Root
    from tests.support.datasets import fixed

    workers = (os.cpu_count() or 1) + 1
    rate, peak_shm, _ = run_step(fixed(), default_collate, 4, workers, 2, 4, Root("/"), None)
    assert rate > 0 and peak_shm >= 0
    assert not [w for w in recwarn if "worker" in str(w.message)], [str(w.message) for w in recwarn]
