"""The shared peak sampler of run (container /dev/shm) and tune (/dev/shm and cgroup memory)."""

from __future__ import annotations

import threading

from shmguard.engine.peak import PeakSampler


def test_keeps_each_readers_peak_and_skips_failed_reads():
    values = iter([5, None, 9, 2])
    sampler = PeakSampler({"shm": lambda: next(values), "never": lambda: None}, interval=1)
    for _ in range(4):
        sampler.sample()
    assert sampler.peaks == {"shm": 9, "never": None}  # None: no sample at all, not a zero peak


def test_a_zero_reading_is_a_peak_of_zero_not_none():
    sampler = PeakSampler({"shm": lambda: 0}, interval=1)
    sampler.sample()
    assert sampler.peaks["shm"] == 0


def test_samples_in_a_thread_until_stopped():
    seen = threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) >= 3:
            seen.set()
        return len(calls)

    with PeakSampler({"n": read}, interval=0.001) as sampler:
        assert seen.wait(5)
    stopped_at = len(calls)
    assert sampler.peaks["n"] >= 3
    assert not sampler._thread.is_alive() and len(calls) == stopped_at


def test_stop_without_start_is_harmless():
    PeakSampler({}, interval=1).stop()


# --- the sampler process (run's /dev/shm watcher) ---

import os  # noqa: E402

from shmguard.engine.peak import ProcessPeakSampler  # noqa: E402


def used(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_the_sampler_process_reports_a_peak_and_stops_with_its_stdin(tmp_path):
    sampler = ProcessPeakSampler(str(tmp_path), interval=0.001).start()
    proc = sampler._proc
    sampler.stop()  # the sampler takes one sample at least, however soon its stdin closes
    assert proc.returncode == 0
    assert sampler.samples >= 1
    assert sampler.peaks["shm"] is not None and sampler.peaks["shm"] > 0
    assert abs(sampler.peaks["shm"] - used(str(tmp_path))) < 1 << 30  # the same filesystem, not another


def test_a_path_never_readable_gives_no_peak(tmp_path):
    sampler = ProcessPeakSampler(str(tmp_path / "missing"), interval=0.001).start()
    sampler.stop()
    assert sampler.peaks["shm"] is None and sampler.samples == 0


def test_the_sampler_sees_what_was_there_while_it_ran(tmp_path):
    """A peak that comes and goes while the sampler runs is seen (the sampler's loop, run in this process on
    a fake statvfs: deterministic, no timing)."""
    import threading

    from shmguard.engine import shm_sampler

    readings = iter([10, 50, 20] + [5] * 3)
    done = threading.Event()

    class St:
        def __init__(self, used):
            self.f_blocks, self.f_bfree, self.f_frsize = used, 0, 4096

    def fake_statvfs(path):
        try:
            return St(next(readings))
        except StopIteration:
            done.set()
            return St(0)

    original = shm_sampler.os.statvfs
    shm_sampler.os.statvfs = fake_statvfs
    try:
        peak, samples = shm_sampler.sample("/x", 0, done)
    finally:
        shm_sampler.os.statvfs = original
    assert peak == 50 * 4096 and samples == 7  # six readings, and the one that found done set


def test_stop_twice_and_without_start(tmp_path):
    ProcessPeakSampler(str(tmp_path)).stop()
    sampler = ProcessPeakSampler(str(tmp_path), interval=0.001).start()
    sampler.stop()
    sampler.stop()


# --- what the sampler processes import (issue 43.1) ---

def plant_shmguard(folder) -> str:
    """A folder named `shmguard` in `folder` whose import leaves a mark: what a stranger can leave in /tmp, a shared
    checkout, or a repository that vendors another copy. Returns the mark's path."""
    mark = folder / "imported-from-cwd"
    package = folder / "shmguard"
    (package / "engine").mkdir(parents=True)
    trap = f"open({str(mark)!r}, 'a').write(__name__ + '\\n')\n"
    (package / "__init__.py").write_text(trap)
    (package / "engine" / "__init__.py").write_text(trap)
    (package / "engine" / "shm_sampler.py").write_text(trap + "raise SystemExit(0)\n")
    return str(mark)


def test_the_sampler_process_never_imports_a_shmguard_from_the_current_directory(tmp_path, monkeypatch):
    """`python -m` puts the current directory first on sys.path: a folder named shmguard wherever the user stands
    would run as root in the sampler. The sampler is this shmguard's, whatever the directory and the environment."""
    mark = plant_shmguard(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}.")  # ignored too: the sampler runs isolated
    monkeypatch.setenv("PYTHONSTARTUP", mark)
    sampler = ProcessPeakSampler(str(tmp_path), interval=0.001).start()
    sampler.stop()
    assert not os.path.exists(mark), open(mark).read()
    assert sampler.samples >= 1 and sampler.peaks["shm"] is not None  # the real sampler ran


def test_the_elastic_sampler_process_never_imports_a_shmguard_from_the_current_directory(tmp_path, monkeypatch):
    from shmguard.engine.elastic import ElasticSampler
    from shmguard.engine.elastic_policy import Policy

    mark = plant_shmguard(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    sampler = ElasticSampler(Policy(batch_bytes=0), print, lambda limit: None, realtime=False).spawn()
    proc = sampler._proc
    sampler.stop()  # closing its stdin before any container: it ends at once, with nothing to say
    assert proc.returncode == 0
    assert not os.path.exists(mark), open(mark).read()


def test_every_process_shmguard_starts_is_started_isolated():
    """Issue 43.1: shmguard starts processes as root (the samplers; the remount's nsenter ran the container's own
    /bin/mount). Every program the package runs is started by start_sampler (isolated, from /), and nothing else
    (a fork runs this process's own code, already imported: the webhook's workers, the API's batch probe)."""
    import re
    from pathlib import Path

    import shmguard

    starts = re.compile(r"\bsubprocess\.\w+\(|\bos\.(system|popen|exec\w*|spawn\w*|posix_spawn\w*)\(|"
                        r"\bpty\.spawn\(|create_subprocess_\w+\(")
    found = []
    for path in sorted(Path(shmguard.__file__).parent.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if starts.search(line.split("#")[0]):
                found.append(f"{path.relative_to(Path(shmguard.__file__).parent)}:{number}")
    assert len(found) == 1 and found[0].startswith("engine/peak.py:"), found
