"""memory.stat: every line, or only the keys asked for (the exporter's path), both the same numbers; shmem v1/v2."""

from __future__ import annotations

from shmguard.probe.cgroup import Level, memory_shmem, memory_usage, parse_memory_stat

V1 = ("cache 1000\nrss 2000\nshmem 300\nmapped_file 5\ninactive_file 70\ntotal_cache 1100\ntotal_shmem 400\n"
      "total_inactive_file 80\nbad line\ntotal_unevictable x\n")
V2 = "anon 10\nfile 20\nshmem 30\nfile_mapped 1\ninactive_file 40"  # no newline at the end


def test_only_the_keys_asked_for_and_the_same_numbers():
    every = parse_memory_stat(V1)
    assert every["shmem"] == 300 and every["total_shmem"] == 400 and "total_unevictable" not in every
    keys = ("shmem", "total_shmem", "total_inactive_file", "inactive_file", "absent")
    assert parse_memory_stat(V1, keys) == {k: every[k] for k in keys if k in every}
    assert parse_memory_stat(V2, ("shmem", "inactive_file")) == {"shmem": 30, "inactive_file": 40}
    assert parse_memory_stat("total_shmem 5\n", ("shmem",)) == {}  # a key inside another key's name is not it


class Files:
    def __init__(self, files: dict) -> None:
        self.files = files

    def read(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def read_or_none(self, path: str):
        return self.files.get(path)


def test_shmem_and_usage_v1_and_v2():
    v1 = Files({"/cg/memory.usage_in_bytes": "1000\n", "/cg/memory.stat": V1})
    assert memory_shmem(v1, [Level("/cg", "v1")]).value == 400  # hierarchical: total_shmem
    assert memory_usage(v1, [Level("/cg", "v1")]).value == 1000 - 80
    v2 = Files({"/cg/memory.current": "1000\n", "/cg/memory.stat": V2})
    assert memory_shmem(v2, [Level("/cg", "v2")]).value == 30
    assert memory_usage(v2, [Level("/cg", "v2")]).value == 1000 - 40
    assert memory_shmem(Files({}), [Level("/cg", "v2")]).errors
    assert memory_shmem(Files({"/cg/memory.stat": "anon 1\n"}), [Level("/cg", "v2")]).errors == (
        "/cg/memory.stat has no shmem line",)
