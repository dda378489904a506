"""NCCL's own /dev/shm (shmguard.nccl): the arithmetic against the segment sizes NCCL prints in public reports.

Published sizes used here (each is what NCCL printed, `… shared memory segment /dev/shm/nccl-… (size N)`):
- 9637888: NVIDIA/nccl#1518 (torchrun, 4 GPUs, 64 MB /dev/shm: fails with 4 ranks, works with 2), and
  the 4-GPU report in NVIDIA/nccl#1683's thread; the default configuration.
- 5967872, and "failed to extend … to 5967876 bytes" for the same file: NVIDIA/nccl-tests#166.
- 13832192: NVIDIA/nccl#2190 ("MMAP imported shareable host buffer /dev/shm/nccl-… size 13832192").
- 4194660 bytes ("failed to extend /dev/shm/nccl-03v824 to 4194660 bytes"): the NCCL user guide,
  Troubleshooting > Shared memory (a proxy pool, not an SHM connection).
"""

from __future__ import annotations

import re

import pytest

from shmguard import diagnosis, model, nccl, sizing
from shmguard.errors import UsageError
from shmguard.job import job_from_env, make_job

MIB = 2**20
DEFAULTS = (nccl.DEFAULT_LL_BUFFSIZE, nccl.DEFAULT_LL128_BUFFSIZE, nccl.DEFAULT_BUFFSIZE)
RUNTIME = "2.27.7"  # a version that connects at the first collective (the SHM arithmetic below is the same at any)


def gpu_job(ranks=8, workers=0, **kw):
    """A job of `ranks` GPU processes; at NCCL 2.27.7 unless nccl_version says otherwise (None: not known)."""
    kw.setdefault("nccl_version", RUNTIME)
    return make_job(workers=workers, batch_size=32, sample_shape="3,224,224", gpus=ranks, procs_per_node=ranks, **kw)


def test_the_default_receive_segment_is_the_9637888_bytes_nccl_prints():
    # NVIDIA/nccl#1518: "Error while creating shared memory segment /dev/shm/nccl-NzwJ7O (size 9637888)"
    assert nccl.DEFAULT_LL_BUFFSIZE == 8 * 512 * 8 * 16
    assert nccl.DEFAULT_LL128_BUFFSIZE == 120 * 640 * 8 * 8
    assert nccl.segment_size(DEFAULTS) == 9637888
    assert nccl.segment_size(nccl.buff_sizes({})) == 9637888


@pytest.mark.parametrize("buffsize, printed, source", [
    (524288, 5967872, "NVIDIA/nccl-tests#166"),
    (8388608, 13832192, "NVIDIA/nccl#2190"),
    (4194304, 9637888, "NVIDIA/nccl#1518"),
])
def test_nccl_buffsize_gives_the_other_published_sizes(buffsize, printed, source):
    sizes = nccl.buff_sizes({"NCCL_BUFFSIZE": str(buffsize)})
    assert nccl.segment_size(sizes) == printed, source
    assert nccl.simple_buffsize_of(printed) == buffsize


def test_the_file_is_the_segment_plus_its_refcount_in_whole_pages():
    # NVIDIA/nccl-tests#166: segment (size 5967872) <- "failed to extend … to 5967876 bytes"
    assert nccl.segment_size(nccl.buff_sizes({"NCCL_BUFFSIZE": "524288"})) + nccl.REFCOUNT_BYTES == 5967876
    # tmpfs: 9637892 bytes take 2354 pages; the 4100-byte send segment 2 pages
    assert nccl.connection_bytes(DEFAULTS) == 2354 * 4096 + 2 * 4096


def test_the_guides_example_is_a_proxy_pool_not_an_shm_connection():
    # "failed to extend /dev/shm/nccl-03v824 to 4194660 bytes": 4 MiB of ops + 352 bytes of pool state + refcount
    assert 4194660 == 4 * MIB + 352 + nccl.REFCOUNT_BYTES
    assert nccl.simple_buffsize_of(4194656) is None
    assert nccl.version_row("2.24.3").proxy_pool_bytes - 352 == 27 * MIB // 2  # 13.5 MiB of ops (NVIDIA/nccl#1589)


def test_simple_buffsize_of_rejects_sizes_below_the_fixed_part():
    assert nccl.simple_buffsize_of(4096) is None


@pytest.mark.parametrize("ranks, channels, tree, connections", [
    (2, 2, True, 4),  # the tree's child is the ring predecessor: nothing more
    (3, 2, True, 2 * (3 + 2)),
    (4, 2, True, 2 * (4 + 3)),
    (8, 2, True, 2 * (8 + 7)),
    (8, 2, False, 16),
    (8, 1, True, 15),
    (1, 2, True, 0),
    (0, 2, True, 0),
])
def test_receive_connections(ranks, channels, tree, connections):
    assert nccl.receive_connections(ranks, channels, tree) == connections


def test_nccl_1518_two_ranks_fit_docker_default_and_four_do_not():
    # NVIDIA/nccl#1518: 64 MB /dev/shm, "2 coll channels": works with 2 GPUs, fails with 4.
    assert nccl.shm_bytes(gpu_job(2)) < 64 * MIB < nccl.shm_bytes(gpu_job(4))


def test_eight_ranks_default():
    assert nccl.shm_bytes(gpu_job(8)) == 30 * nccl.connection_bytes(DEFAULTS)
    assert 270 * MIB < nccl.shm_bytes(gpu_job(8)) < 280 * MIB


@pytest.mark.parametrize("gpus, procs", [(0, 8), (8, 1), (1, 8), (0, 1)])
def test_no_nccl_term_without_two_gpu_ranks(gpus, procs):
    job = make_job(workers=2, batch_size=4, sample_bytes=100, gpus=gpus, procs_per_node=procs)
    assert nccl.local_ranks(job) == 0 and nccl.shm_bytes(job) == 0 and nccl.describe(job) == ""


def test_ranks_are_the_processes_with_a_gpu_each():
    assert nccl.local_ranks(make_job(workers=0, batch_size=1, sample_bytes=1, gpus=8, procs_per_node=4)) == 4
    assert nccl.local_ranks(make_job(workers=0, batch_size=1, sample_bytes=1, gpus=4, procs_per_node=8)) == 4


def env_job(env, ranks=4):
    return gpu_job(ranks, nccl_env=env)


@pytest.mark.parametrize("env, channels", [
    ({}, 2),
    ({"NCCL_MAX_NCHANNELS": "1"}, 1),
    ({"NCCL_MAX_NCHANNELS": "0"}, 1),  # NCCL: "setting it to 1"
    ({"NCCL_MIN_NCHANNELS": "8"}, 8),
    ({"NCCL_MIN_NCHANNELS": "1000"}, 64),
    ({"NCCL_MIN_NRINGS": "4"}, 4),  # the old name
    ({"NCCL_MAX_NRINGS": "1", "NCCL_MAX_NCHANNELS": "4"}, 2),  # the new name wins
    ({"NCCL_MIN_NCHANNELS": "-2"}, 2),  # NCCL's "unset"
])
def test_channels_from_the_environment(env, channels):
    assert nccl.channels(env) == channels
    assert nccl.shm_bytes(env_job(env)) == nccl.receive_connections(4, channels) * nccl.connection_bytes(DEFAULTS)


@pytest.mark.parametrize("algo, tree", [
    ("", True), ("Ring", False), ("ring", False), ("Tree", True), ("Ring,Tree", True), ("^Tree", False),
    ("^Ring", True), ("^NVLS,CollnetDirect", True), ("allreduce:ring;broadcast:ring", False),
    ("allreduce:tree,ring", True), ("allreduce:^tree", False), ("NVLSTree", False),
])
def test_nccl_algo(algo, tree):
    assert nccl.uses_tree({"NCCL_ALGO": algo}) is tree


def test_ring_only_halves_roughly():
    assert nccl.shm_bytes(env_job({"NCCL_ALGO": "Ring"}, 8)) == 16 * nccl.connection_bytes(DEFAULTS)


def test_buffer_sizes_from_the_environment():
    env = {"NCCL_BUFFSIZE": "0x100000", "NCCL_LL_BUFFSIZE": "65536", "NCCL_LL128_BUFFSIZE": "-2"}
    assert nccl.buff_sizes(env) == (65536, nccl.DEFAULT_LL128_BUFFSIZE, 1 << 20)
    assert nccl.shm_bytes(env_job(env, 2)) == 4 * nccl.connection_bytes((65536, nccl.DEFAULT_LL128_BUFFSIZE, 1 << 20))


def test_nccl_proto_changes_nothing():
    # src/transport/shm.cc allocates every protocol's buffer whatever NCCL_PROTO says
    assert "NCCL_PROTO" not in nccl.ENV_NAMES
    assert nccl.env_of({"NCCL_PROTO": "Simple", "NCCL_DEBUG": "INFO", "PATH": "/bin"}) == ()
    assert nccl.shm_bytes(env_job({"NCCL_PROTO": "Simple"})) == nccl.shm_bytes(gpu_job(4))


def test_shm_disabled_sizes_the_proxy_pools():
    job = env_job({"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}, 8)
    assert nccl.transport(job) == "net"
    assert nccl.shm_bytes(job) == 8 * nccl.round_up(nccl.version_row(RUNTIME).proxy_pool_bytes + 4)
    assert "sockets" in nccl.describe(job) and "or P2P" not in nccl.describe(job)
    assert "or P2P" in nccl.describe(env_job({"NCCL_SHM_DISABLE": "1"}, 8))
    assert nccl.transport(env_job({"NCCL_SHM_DISABLE": "0"})) == "shm"


def test_p2p_transport_uses_no_shm():
    job = gpu_job(8, nccl_transport="p2p")
    assert nccl.shm_bytes(job) == 0 and "P2P" in nccl.describe(job)
    assert nccl.transport(gpu_job(8, nccl_transport="p2p", nccl_env={"NCCL_SHM_DISABLE": "1"})) == "p2p"


@pytest.mark.parametrize("env", [{"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_LEVEL": "LOC"}, {"NCCL_P2P_LEVEL": "0"}])
def test_p2p_disabled_keeps_the_shm_sizing(env):
    assert nccl.p2p_disabled(env) and nccl.shm_bytes(env_job(env)) == nccl.shm_bytes(gpu_job(4))


@pytest.mark.parametrize("env, message", [
    ({"NCCL_BUFFSIZE": "4M"}, "NCCL_BUFFSIZE must be a whole number, not '4M'"),
    ({"NCCL_MIN_NCHANNELS": "-5"}, "NCCL_MIN_NCHANNELS must be 0 or more"),
    ({"NCCL_SHM_DISABLE": "yes"}, "NCCL_SHM_DISABLE must be a whole number"),
])
def test_bad_values_name_the_variable(env, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        gpu_job(4, nccl_env=env)


def test_bad_transport_is_refused():
    with pytest.raises(UsageError, match="--nccl-transport must be shm or p2p"):
        gpu_job(4, nccl_transport="nvlink")


def test_model_adds_the_nccl_term():
    loader = gpu_job(8, workers=2)
    without = loader.replace(gpus=0)
    assert model.shm_bytes(loader) == model.shm_bytes(without) + nccl.shm_bytes(loader)
    assert model.shm_bytes(gpu_job(8)) == nccl.shm_bytes(gpu_job(8))  # workers=0: NCCL's alone
    assert model.memory_bytes(gpu_job(8)) - model.memory_bytes(gpu_job(8).replace(gpus=0)) == nccl.shm_bytes(gpu_job(8))
    assert sizing.shm_size(gpu_job(8)) == model.round_up(nccl.shm_bytes(gpu_job(8)), MIB)


def test_job_from_env_reads_the_nccl_variables_and_carries_the_transport():
    environ = {"SHMGUARD_WORKERS": "0", "SHMGUARD_BATCH_SIZE": "1", "SHMGUARD_SAMPLE_BYTES": "1",
               "SHMGUARD_GPUS": "4", "SHMGUARD_PROCS_PER_NODE": "4", "NCCL_BUFFSIZE": "524288", "NCCL_DEBUG": "INFO"}
    job = job_from_env(environ)
    assert job.nccl_env == (("NCCL_BUFFSIZE", "524288"),)
    assert nccl.segment_size(nccl.buff_sizes(dict(job.nccl_env))) == 5967872
    assert "SHMGUARD_NCCL_TRANSPORT" not in job.to_env()
    p2p = job.replace(nccl_transport="p2p")
    assert p2p.to_env()["SHMGUARD_NCCL_TRANSPORT"] == "p2p"
    assert job_from_env({**environ, **p2p.to_env()}).nccl_transport == "p2p"


@pytest.mark.parametrize("kind, line", [
    ("nccl-create", "ubuntu:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory "
                    "segment /dev/shm/nccl-KWfVyt (size 5967872)"),  # NVIDIA/nccl-tests#166
    ("nccl-extend", "ubuntu:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend "
                    "/dev/shm/nccl-fjwOOB to 5967876 bytes"),  # NVIDIA/nccl-tests#166
    ("nccl-extend", "NCCL WARN Error: failed to extend /dev/shm/nccl-03v824 to 4194660 bytes"),  # the NCCL guide
    ("nccl-attach", "g148:14937:69361 [0] misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory "
                    "segment /dev/shm/nccl-glnlGK (size 14156128), error: No such file or directory (2)"),  # nccl#1589
    ("nccl-unlink", "NCCL WARN unlink shared memory /dev/shm/nccl-d5rTd0 failed, error: No such file or directory"),
    ("nccl-call", "NCCL WARN Call to posix_fallocate failed : No space left on device"),
])
def test_the_rule_table_knows_nccls_published_lines(kind, line):
    """NCCL's shared-memory messages live in the diagnosis's one table (issue 39: no second list in nccl.py)."""
    assert [s.kind for s in diagnosis.scan(line)] == [kind]
    assert any(rule.kind == kind and rule.source for rule in diagnosis.RULES)


def test_a_segment_removed_under_nccl_is_not_its_size():
    """`unlink shared memory … failed`: the segment vanished (systemd RemoveIPC, a cleanup), which explain missed."""
    found = diagnosis.diagnose(diagnosis.Evidence(logs="NCCL WARN unlink shared memory /dev/shm/nccl-d5rTd0 failed, "
                                                       "error: No such file or directory"))
    assert (found.verdict, found.cause) == (diagnosis.UNDETERMINED, "nccl-shm-removed")
    assert "RemoveIPC=no" in found.fix and found.shm_needed is None


@pytest.mark.parametrize("ranks", range(2, 17))
def test_more_ranks_never_need_less(ranks):
    assert nccl.shm_bytes(gpu_job(ranks + 1)) > nccl.shm_bytes(gpu_job(ranks)) > 0


@pytest.mark.parametrize("name", ["NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE"])
def test_bigger_buffers_never_need_less(name):
    sizes = [nccl.shm_bytes(env_job({name: str(1 << k)})) for k in range(12, 26)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
