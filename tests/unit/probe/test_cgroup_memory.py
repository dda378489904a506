"""Memory probe: MemTotal, the limit along the path, usage."""

from __future__ import annotations

from pathlib import Path

from shmguard.probe import cgroup
from shmguard.probe.cgroup import parse_meminfo_total, probe_memory
from shmguard.probe.mountinfo import parse_mountinfo
from tests.support.roots import record_reads


def test_parse_meminfo_total():
    assert parse_meminfo_total("MemTotal:       24598640 kB\nMemFree: 1 kB\n") == 24598640 * 1024
    assert parse_meminfo_total("MemFree: 1 kB\n") is None
    assert parse_meminfo_total("MemTotal: lots kB\n") is None


def test_docker_v1_fixture(tree):
    root = tree(base="docker-v1")
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    info = probe_memory(root, mounts, cgroup.parse_proc_cgroup(root.read("/proc/self/cgroup")))
    assert info.limit == 2**30 and info.usage == 50_000_000 and info.host == 24598640 * 1024


def test_nothing_readable(tree):
    info = probe_memory(tree({}), [], [])
    assert info.limit is None and info.host is None and info.usage is None
    assert any("MemTotal" in e for e in info.errors) and any("no cgroup memory" in e for e in info.errors)



STATS = Path(__file__).resolve().parents[2] / "data" / "memory-stat"
V1_STAT = (STATS / "v1.txt").read_text()  # 260 MB of shmem (hierarchical), 10 MB of inactive file cache
V2_STAT = (STATS / "v2.txt").read_text()  # the same, as v2 writes it


def test_the_processes_own_memory_is_the_usage_less_tmpfs_and_inactive_cache(tree):
    """What elastic /dev/shm leaves room for beside /dev/shm under the limit (one rule, here: issue 40)."""
    from shmguard.probe.cgroup import Level, memory_own

    v1 = tree({"/cg1/memory.usage_in_bytes": "400000000\n", "/cg1/memory.stat": V1_STAT,
               "/cg2/memory.current": "400000000\n", "/cg2/memory.stat": V2_STAT,
               "/cg3/memory.current": "1000\n", "/cg3/memory.stat": "",
               "/cg4/memory.current": "10\n", "/cg4/memory.stat": V2_STAT})
    own = 400_000_000 - 260_000_000 - 10_000_000
    assert memory_own(v1, [Level(path="/cg1", version="v1")]).value == own
    assert memory_own(v1, [Level(path="/cg2", version="v2")]).value == own
    assert memory_own(v1, [Level(path="/cg3", version="v2")]).value == 1000
    assert memory_own(v1, [Level(path="/cg4", version="v2")]).value == 0  # never negative
    assert memory_own(v1, [Level(path="/missing", version="v2")]).value is None


def test_the_limit_alone_is_probe_memorys_limit_and_reads_meminfo_only_under_one(tree):
    """health's memory_cgroup_limit keeps probe_memory's rule (a limit at or above the host's memory is none) but
    reads /proc/meminfo only when a limit is found, and never the usage."""
    kept = set()
    for base in ("docker-v1", "docker-v2", "podman-rootless-v2"):
        for limit in (None, "1073741824\n", "9223372036854771712\n", "max\n", f"{24598640 * 1024}\n",
                      f"{24598640 * 1024 - 4096}\n"):
            root = tree(base=base)
            if limit is not None:
                for name in ("memory.limit_in_bytes", "memory.max"):
                    for found in (Path(root.path) / "sys/fs/cgroup").rglob(name):
                        found.write_text(limit)
            mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
            entries = cgroup.parse_proc_cgroup(root.read("/proc/self/cgroup"))
            expected = probe_memory(root, mounts, entries).limit
            paths = record_reads(root)
            levels, found_limit = cgroup.memory_cgroup_limit(root, mounts, entries)
            assert found_limit == expected, (base, limit)
            kept.add((base, found_limit is not None))
            assert ("/proc/meminfo" in paths) == (cgroup.memory_limit(root, levels, None).value is not None)
            assert not any(p.endswith(("usage_in_bytes", "memory.current", "memory.stat")) for p in paths), paths
    assert kept >= {("docker-v1", True), ("docker-v1", False), ("docker-v2", True), ("docker-v2", False)}


def test_without_meminfo_a_limit_is_kept(tree):
    root = tree(base="docker-v1")
    (Path(root.path) / "proc/meminfo").unlink()
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    entries = cgroup.parse_proc_cgroup(root.read("/proc/self/cgroup"))
    assert cgroup.memory_cgroup_limit(root, mounts, entries)[1] == probe_memory(root, mounts, entries).limit == 2**30
