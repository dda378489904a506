"""`shmguard top`'s frame (pure): the marks come from the exporter's alert thresholds, the rows heading for a crash
come first, the bar shows use and the peak, odd names stay printable. tests/integration/test_top.py runs it in a
real terminal."""

from __future__ import annotations

from shmguard.commands.top import bar, frame, mark
from shmguard.exporter import rules
from shmguard.exporter.metrics import Reading, Row, Sample, Target

MIB = 2**20


def row(name: str, size: int, used: int, peak: int | None = None, need: int | None = None, **memory) -> Row:
    return Row(Target(key=name, id=name, name=name, shm_required=need),
               Reading(shm_size=size, shm_used=used, **memory), peak if peak is not None else used)


def test_marks_follow_the_alert_thresholds():
    assert mark(row("a", 64 * MIB, 0, need=368 * MIB)) == "BUS ERROR"  # ShmguardShmBelowJob
    full = int(rules.FULL_RATIO * 64 * MIB) + MIB
    assert mark(row("b", 64 * MIB, full)) == "FULL"  # ShmguardShmNearlyFull's ratio
    assert mark(row("c", 64 * MIB, full - 2 * MIB)) == ""
    oom = {"memory_limit": 1000 * MIB, "memory_usage": 950 * MIB, "memory_shmem": 300 * MIB}
    assert mark(row("d", 512 * MIB, 300 * MIB, **oom)) == "OOM"  # ShmguardShmNearMemoryLimit
    assert mark(row("e", 512 * MIB, 300 * MIB, **dict(oom, memory_shmem=100 * MIB))) == ""


def test_the_bar_shows_use_and_the_peak():
    assert bar(row("a", 64 * MIB, 32 * MIB), 10) == "[#####.....]"
    assert bar(row("a", 64 * MIB, 16 * MIB, peak=48 * MIB), 10) == "[##.....|..]"  # where a use of 48 would end
    assert bar(Row(Target(key="x", id="x", name="x"), Reading()), 4) == "[????]"


def test_the_frame_puts_the_crashes_first():
    sample = Sample(rows=(row("calm", 256 * MIB, 10 * MIB), row("short", 64 * MIB, 1 * MIB, need=368 * MIB),
                          row("full", 64 * MIB, 60 * MIB), row("odd\udcff", 64 * MIB, 0)), taken_at=0.0)
    lines = frame(sample, width=200)
    assert lines[0].startswith("shmguard top") and "4 /dev/shm  2 heading for a crash" in lines[0]
    assert lines[1].split() == ["NAME", "SIZE", "USED", "PEAK", "NEED", "USE", "MARK"]
    assert [line.split()[0] for line in lines[2:]] == ["short", "full", "calm", "odd\\xff"]
    assert lines[2].endswith("BUS ERROR") and lines[3].endswith("FULL")
    assert "no /dev/shm to show" in frame(Sample(), width=80)[-1]
    assert all(len(line) <= 60 for line in frame(sample, width=60))
