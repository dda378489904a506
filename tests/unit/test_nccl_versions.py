"""NCCL's /dev/shm per NCCL version (issue 28.2): shmguard.nccl against a table built from NCCL's source.

Every fact below is cited as (tag, file, line, text found on that line) in github.com/NVIDIA/nccl;
`python3 tests/data/nccl/verify_sources.py NCCL_GIT_DIR` checks each citation against a clone (run on
2026-07 against the tags v2.12.7-1 to v2.30.7-1). sizeof(struct ncclProxyOp) is laid out here again, the
way an x86-64 C compiler does, from the struct's field types as the cited lines declare them; the pool
is then MAX_OPS_PER_PEER x NCCL_MAX_LOCAL_RANKS ops plus its own fields. Three pool sizes NCCL printed in
public reports confirm the layout independently:

- 4194660 bytes: the NCCL user guide, Troubleshooting > Shared memory, "failed to extend
  /dev/shm/nccl-03v824 to 4194660 bytes" (the pool of 2.16-2.19 plus its 4-byte refcount);
- 7340384 bytes: hiyouga/EasyR1#228 (NCCL_SHM_DISABLE=1 and NCCL_P2P_DISABLE=1; the pool of 2.21-2.22);
- 14156128 bytes: NVIDIA/nccl#1589, NCCL 2.24 ("Error while attaching to shared memory segment … (size 14156128)").
"""

from __future__ import annotations

import pytest

from shmguard import nccl
from shmguard.declared import container_job
from shmguard.errors import UsageError
from shmguard.job import job_from_env, make_job

PAGE = 4096

# --- Citations: (tag, file, line, text on that line). Checked by tests/data/nccl/verify_sources.py.
SOURCES = {
    # MAXCHANNELS
    "maxchannels-2.12": ("v2.12.7-1", "src/include/devcomm.h", 49, "#define MAXCHANNELS 32"),
    "maxchannels-2.20": ("v2.20.3-1", "src/include/device.h", 54, "#define MAXCHANNELS 32"),
    "maxchannels-2.22": ("v2.22.3-1", "src/include/device.h", 62, "#define MAXCHANNELS 32"),
    "maxchannels-2.24": ("v2.24.3-1", "src/include/device.h", 62, "#define MAXCHANNELS 32"),
    "maxchannels-2.25": ("v2.25.1-1", "src/include/device.h", 62, "#define MAXCHANNELS 64"),
    "maxchannels-2.28": ("v2.28.3-1", "src/include/device.h", 86, "#define MAXCHANNELS 64"),
    "maxchannels-2.30": ("v2.30.3-1", "src/include/device.h", 88, "#define MAXCHANNELS 64"),
    # NCCL_MAX_LOCAL_RANKS
    "localranks-2.12": ("v2.12.7-1", "src/include/proxy.h", 92, "#define NCCL_MAX_LOCAL_RANKS 64"),
    "localranks-2.16": ("v2.16.2-1", "src/include/proxy.h", 98, "#define NCCL_MAX_LOCAL_RANKS 64"),
    "localranks-2.20": ("v2.20.3-1", "src/include/info.h", 16, "#define NCCL_MAX_LOCAL_RANKS 64"),
    "localranks-2.22": ("v2.22.3-1", "src/include/device.h", 63, "#define NCCL_MAX_LOCAL_RANKS 64"),
    "localranks-2.25": ("v2.25.1-1", "src/include/device.h", 63, "#define NCCL_MAX_LOCAL_RANKS 72"),
    "localranks-2.28": ("v2.28.3-1", "src/include/device.h", 87, "#define NCCL_MAX_LOCAL_RANKS 72"),
    "localranks-2.30": ("v2.30.3-1", "src/include/device.h", 89, "#define NCCL_MAX_LOCAL_RANKS 72"),
    # MAX_OPS_PER_PEER and its factors
    "opsperpeer-2.12": ("v2.12.7-1", "src/include/proxy.h", 91, "#define MAX_OPS_PER_PEER (2*MAXCHANNELS*NCCL_MAX_WORK_ELEMENTS_P2P)"),
    "worksize-2.12": ("v2.12.7-1", "src/include/devcomm.h", 159, "#define NCCL_WORK_SIZE 512"),
    "p2pelems-2.12": ("v2.12.7-1", "src/include/devcomm.h", 222, "#define NCCL_MAX_WORK_ELEMENTS_P2P (NCCL_WORK_SIZE/sizeof(struct ncclWorkElemP2p))"),
    "workelemp2p-2.12": ("v2.12.7-1", "src/include/devcomm.h", 199, "struct ncclWorkElemP2p {"),
    "p2pelems-2.16": ("v2.16.2-1", "src/include/devcomm.h", 227, "#define NCCL_MAX_WORK_ELEMENTS_P2P 16"),
    "p2pelems-2.21": ("v2.21.5-1", "src/include/device.h", 279, "#define NCCL_MAX_WORK_ELEMENTS_P2P 16"),
    "opsperpeer-2.21": ("v2.21.5-1", "src/include/proxy.h", 128, "#define MAX_OPS_PER_PEER (2*MAXCHANNELS*NCCL_MAX_WORK_ELEMENTS_P2P)"),
    "opsperpeer-2.22": ("v2.22.3-1", "src/include/proxy.h", 145, "#define MAX_OPS_PER_PEER (2*MAXCHANNELS*2*NCCL_MAX_DEV_WORK_P2P_PER_BATCH)"),
    "p2pbatch-2.22": ("v2.22.3-1", "src/include/device.h", 342, "#define NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8"),
    "p2pbatch-2.25": ("v2.25.1-1", "src/include/device.h", 341, "#define NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8"),
    "p2pbatch-2.30": ("v2.30.3-1", "src/include/device.h", 389, "#define NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8"),
    "opsperpeer-2.30": ("v2.30.3-1", "src/include/proxy.h", 220, "#define MAX_OPS_PER_PEER (2*MAXCHANNELS*2*NCCL_MAX_DEV_WORK_P2P_PER_BATCH)"),
    # struct ncclProxyOpsPool: ops, then int nextOps, nextOpsEnd, freeOps[NCCL_MAX_LOCAL_RANKS], mutex, cond
    "pool-2.12": ("v2.12.7-1", "src/include/proxy.h", 94, "struct ncclProxyOp ops[MAX_OPS_PER_PEER*NCCL_MAX_LOCAL_RANKS];"),
    "pool-2.21": ("v2.21.5-1", "src/include/proxy.h", 134, "volatile int freeOps[NCCL_MAX_LOCAL_RANKS];"),
    "pool-mutex-2.28": ("v2.28.3-1", "src/include/proxy.h", 212, "pthread_mutex_t mutex;"),
    "pool-mutex-2.30": ("v2.30.3-1", "src/include/proxy.h", 227, "std::mutex mutex;"),
    # The refcount after every segment
    "refcount-2.15": ("v2.15.5-1", "src/misc/shmutils.cc", 20, "int err = posix_fallocate(fd, 0, shmSize);"),
    "refcount-2.16": ("v2.16.2-1", "src/misc/shmutils.cc", 54, "const size_t realShmSize = shmSize + refSize;"),
    "refcount-2.28": ("v2.28.3-1", "src/misc/shmutils.cc", 56, "const size_t realShmSize = shmSize + refSize;"),
    "refcount-2.30": ("v2.30.3-1", "src/os/linux.cc", 640, "const size_t realShmSize = shmSize + refSize;"),
    # Who makes the pool: a proxy connection whose transport needs progress (NET's does), on both sides
    "netprogress-2.12": ("v2.12.7-1", "src/transport/net.cc", 1107, "sendProxyProgress },"),
    "poolmap-2.12": ("v2.12.7-1", "src/proxy.cc", 779, "if (tcomm->proxyProgress) {"),
    "poolmake-2.21": ("v2.21.5-1", "src/proxy.cc", 1320, "NCCLCHECK(proxyProgressInit(proxyState));"),
    "poolmake-2.28": ("v2.28.3-1", "src/proxy.cc", 1440, "NCCLCHECK(proxyProgressInit(proxyState));"),
    # ... and every rank at init, up to 2.21 always
    "initproxy-2.12": ("v2.12.7-1", "src/init.cc", 836, "NCCLCHECK(ncclProxyConnect(comm, TRANSPORT_NET, 1, comm->rank, &proxyConn));"),
    "initproxy-2.16": ("v2.16.2-1", "src/init.cc", 1010, "// Connect to local net proxy"),
    "initproxy-2.21": ("v2.21.5-1", "src/init.cc", 1367, "// Connect to local net proxy"),
    "inittree-2.21": ("v2.21.5-1", "src/init.cc", 1266, "// Connect Trees"),
    # from 2.22 only without runtime connection
    "runtime-2.22": ("v2.22.3-1", "src/init.cc", 1153, "comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect();"),
    "initproxy-2.22": ("v2.22.3-1", "src/init.cc", 1185, "    // Connect to local net proxy"),
    "runtimeparam-2.22": ("v2.22.3-1", "src/init.cc", 47, 'NCCL_PARAM(RuntimeConnect, "RUNTIME_CONNECT", 1);'),
    "runtime-2.23": ("v2.23.4-1", "src/init.cc", 1190, "comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect();"),
    "runtime-2.24": ("v2.24.3-1", "src/init.cc", 1192, "comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect();"),
    "runtime-2.27": ("v2.27.7-1", "src/init.cc", 1148, "comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect();"),
    "inittree-2.27": ("v2.27.7-1", "src/init.cc", 1164, "NCCLCHECKGOTO(ncclTransportTreeConnect(comm), ret, fail);"),
    "initproxy-2.27": ("v2.27.7-1", "src/init.cc", 1185, "    // Connect to local net proxy"),
    "runtime-2.28": ("v2.28.3-1", "src/init.cc", 1224, "comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect();"),
    "runtime-2.30": ("v2.30.3-1", "src/init.cc", 1501, "comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect();"),
    "initproxy-2.30": ("v2.30.3-1", "src/init.cc", 1538, "    // Connect to local net proxy"),
    # cuMem: NCCL_CUMEM_ENABLE (param >= 0 ? param : auto); auto needs GPUDirect RDMA over VMM on 2.19-2.23
    "cumemparam-2.22": ("v2.22.3-1", "src/misc/cudawrap.cc", 13, 'NCCL_PARAM(CuMemEnable, "CUMEM_ENABLE", -2);'),
    "cumemenable-2.22": ("v2.22.3-1", "src/misc/cudawrap.cc", 49, "return  param >= 0 ? param : (param == -2 && ncclCuMemSupported);"),
    "cumemgdr-2.22": ("v2.22.3-1", "src/misc/cudawrap.cc", 39, "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"),
    "cumemgdr-2.23": ("v2.23.4-1", "src/misc/cudawrap.cc", 39, "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"),
    "cumemvmm-2.24": ("v2.24.3-1", "src/misc/cudawrap.cc", 37, "if (!flag) return 0;"),
    "cumemdriver-2.24": ("v2.24.3-1", "src/misc/cudawrap.cc", 31, "if (cudaDriverVersion < 12000) return 0;"),
}

# --- struct ncclProxyOp, field by field as declared (x86-64: pointers, size_t and ssize_t 8 bytes; enums 4;
# ncclPattern_t is `enum : uint8_t` in v2.12.7-1 src/include/info.h:14; union ncclProxyOpSpecifics is
# { struct { size_t; int; int; } collnetDirect; } (and from v2.30 a 12-byte bcast struct): 16 bytes, align 8;
# the anonymous union of 2.13-2.19 is { uint64_t; pointer }).
TYPES = {"ptr": (8, 8), "i64": (8, 8), "i32": (4, 4), "u16": (2, 2), "u8": (1, 1), "bool": (1, 1),
         "specifics": (16, 8)}
OPS_2_21 = ["ptr", "i64", "i64", "i32", "i32", "i32", "i32"] + ["u8"] * 9 + ["ptr"] * 4 + ["specifics", "ptr"]
OPS_2_24_HEAD = ["ptr", "i64", "i64", "i32", "i32", "i32"] + ["i64"] * 5 + ["u8"] * 10 + ["ptr"] * 4 + ["i32", "ptr",
                                                                                                      "specifics"]
PROFILER = ["i32", "ptr", "i32", "i32", "i32", "ptr"]  # eActivationMask, taskEventHandle, rank, peer, pid, profilerContext
PROXY_OP = {  # first version of the row -> (tag, file, first line, last line, fields)
    (2, 12): ("v2.12.7-1", "src/include/proxy.h", 23, 40,
              ["ptr", "i32", "i32", "i64", "i32", "i32", "i64", "i32", "i32", "i32", "i32", "i32", "u8", "u8", "u16"]),
    (2, 16): ("v2.16.2-1", "src/include/proxy.h", 24, 46,
              ["ptr", "i32", "i32", "i64", "i32", "i32", "i64", "i32", "i32", "i32", "u8", "u8", "u8", "u8", "i64"]),
    (2, 20): ("v2.20.3-1", "src/include/proxy.h", 34, 56,
              ["ptr", "ptr", "i64", "i64", "i32", "i32", "i32", "i32"] + ["u8"] * 9 + ["specifics", "ptr"]),
    (2, 21): ("v2.21.5-1", "src/include/proxy.h", 34, 60, OPS_2_21),
    (2, 22): ("v2.22.3-1", "src/include/proxy.h", 50, 76, OPS_2_21),
    (2, 23): ("v2.23.4-1", "src/include/proxy.h", 52, 91, OPS_2_21[:-1] + ["ptr"] + PROFILER + ["ptr"]),
    (2, 24): ("v2.24.3-1", "src/include/proxy.h", 53, 98, OPS_2_24_HEAD + ["ptr"] + PROFILER + ["ptr"]),
    (2, 25): ("v2.25.1-1", "src/include/proxy.h", 53, 98, OPS_2_24_HEAD + ["ptr"] + PROFILER + ["ptr"]),
    (2, 26): ("v2.26.2-1", "src/include/proxy.h", 54, 100, OPS_2_24_HEAD + ["ptr"] + PROFILER + ["i64", "ptr"]),
    (2, 28): ("v2.28.3-1", "src/include/proxy.h", 54, 109,
              [*OPS_2_24_HEAD[:11], *["u8"] * 11, *OPS_2_24_HEAD[21:], "i32", "i32", "ptr", "bool", *PROFILER, "i64", "ptr"]),
}
# 2.27 adds `bool incWorkCounter` (v2.27.3-1 src/include/proxy.h:96) where padding was: 2.26's layout stays.
PROXY_OP_2_27 = ("v2.27.3-1", "src/include/proxy.h", 54, 106, OPS_2_24_HEAD + ["ptr", "bool"] + PROFILER + ["i64", "ptr"])
PROXY_OP_2_30 = ("v2.30.3-1", "src/include/proxy.h", 69, 124, PROXY_OP[(2, 28)][4])
PTHREAD_MUTEX, PTHREAD_COND = (40, 8), (48, 8)  # x86-64 glibc (std::mutex, std::condition_variable: the same)

# --- Per row: MAXCHANNELS, NCCL_MAX_LOCAL_RANKS, MAX_OPS_PER_PEER, refcount, when it connects; citations above.
ROWS = {  # (first, last): (max_channels, max_local_ranks, max_ops_per_peer, refcount, runtime_connect, citations)
    ((2, 12), (2, 15)): (32, 64, 2 * 32 * 16, 0, "never", ["maxchannels-2.12", "localranks-2.12", "opsperpeer-2.12",
                                                           "p2pelems-2.12", "refcount-2.15", "initproxy-2.12"]),
    ((2, 16), (2, 19)): (32, 64, 2 * 32 * 16, 4, "never", ["localranks-2.16", "p2pelems-2.16", "refcount-2.16",
                                                           "initproxy-2.16"]),
    ((2, 20), (2, 20)): (32, 64, 2 * 32 * 16, 4, "never", ["maxchannels-2.20", "localranks-2.20"]),
    ((2, 21), (2, 21)): (32, 64, 2 * 32 * 16, 4, "never", ["opsperpeer-2.21", "p2pelems-2.21", "initproxy-2.21",
                                                           "inittree-2.21"]),
    ((2, 22), (2, 22)): (32, 64, 2 * 32 * 2 * 8, 4, "gdr", ["maxchannels-2.22", "localranks-2.22", "opsperpeer-2.22",
                                                            "p2pbatch-2.22", "runtime-2.22", "initproxy-2.22",
                                                            "cumemgdr-2.22"]),
    ((2, 23), (2, 23)): (32, 64, 2 * 32 * 2 * 8, 4, "gdr", ["runtime-2.23", "cumemgdr-2.23"]),
    ((2, 24), (2, 24)): (32, 64, 2 * 32 * 2 * 8, 4, "cumem", ["maxchannels-2.24", "runtime-2.24", "cumemvmm-2.24"]),
    ((2, 25), (2, 25)): (64, 72, 2 * 64 * 2 * 8, 4, "cumem", ["maxchannels-2.25", "localranks-2.25", "p2pbatch-2.25"]),
    ((2, 26), (2, 27)): (64, 72, 2 * 64 * 2 * 8, 4, "cumem", ["runtime-2.27", "initproxy-2.27", "inittree-2.27"]),
    ((2, 28), (2, 30)): (64, 72, 2 * 64 * 2 * 8, 4, "cumem", ["maxchannels-2.28", "localranks-2.28", "refcount-2.28",
                                                              "maxchannels-2.30", "localranks-2.30", "opsperpeer-2.30",
                                                              "p2pbatch-2.30", "refcount-2.30", "runtime-2.30",
                                                              "initproxy-2.30"]),
}
# Every release tag of NCCL from 2.12 to 2.30 (`git tag` of NVIDIA/nccl), and the row it belongs to.
TAGS = ("v2.12.7-1 v2.12.10-1 v2.12.12-1 v2.13.4-1 v2.14.3-1 v2.15.1-1 v2.15.5-1 v2.16.2-1 v2.16.5-1 v2.17.1-1 "
        "v2.18.1-1 v2.18.3-1 v2.18.5-1 v2.18.6-1 v2.19.1-1 v2.19.3-1 v2.19.4-1 v2.20.3-1 v2.20.5-1 v2.21.5-1 "
        "v2.22.3-1 v2.23.4-1 v2.24.3-1 v2.25.1-1 v2.26.2-1 v2.26.3-1 v2.26.5-1 v2.26.6-1 v2.27.3-1 v2.27.5-1 "
        "v2.27.6-1 v2.27.7-1 v2.28.3-1 v2.28.7-1 v2.28.9-1 v2.29.2-1 v2.29.3-1 v2.29.7-1 v2.30.3-1 v2.30.4-1 "
        "v2.30.7-1").split()


def round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def c_sizeof(fields) -> int:
    """sizeof a C struct of these fields on x86-64: each at its alignment, the whole padded to the largest."""
    offset, widest = 0, 1
    for size, align in (TYPES[f] if isinstance(f, str) else f for f in fields):
        offset = round_up(offset, align) + size
        widest = max(widest, align)
    return round_up(offset, widest)


def pool_sizeof(ops_per_peer: int, local_ranks: int, op_bytes: int) -> int:
    """sizeof(struct ncclProxyOpsPool): the ops, nextOps, nextOpsEnd, freeOps[local_ranks], the mutex, the cond."""
    return c_sizeof([(ops_per_peer * local_ranks * op_bytes, 8), "i32", "i32", (4 * local_ranks, 4),
                     PTHREAD_MUTEX, PTHREAD_COND])


def expected_pool(first) -> int:
    """The pool of the row that starts at `first`, from this file's tables alone."""
    fields = PROXY_OP[first][4]
    _, ranks, per_peer, _, _, _ = next(v for k, v in ROWS.items() if k[0] == first)
    return pool_sizeof(per_peer, ranks, c_sizeof(fields))


def row_of(first):
    return next(r for r in nccl.NCCL_VERSIONS if r.first == first)


def test_the_table_covers_the_same_ranges_as_the_source_table():
    assert [(r.first, r.last) for r in nccl.NCCL_VERSIONS] == list(ROWS)
    for a, b in zip(nccl.NCCL_VERSIONS, nccl.NCCL_VERSIONS[1:]):  # contiguous: no version falls between rows
        assert (b.first[0], b.first[1] - 1) == a.last


@pytest.mark.parametrize("span", list(ROWS), ids=lambda span: "%d.%d" % span[0])
def test_each_row_matches_nccls_source(span):
    channels, ranks, per_peer, refcount, connect, cited = ROWS[span]
    row = row_of(span[0])
    assert (row.max_channels, row.max_local_ranks, row.max_ops_per_peer, row.refcount_bytes, row.runtime_connect) == (
        channels, ranks, per_peer, refcount, connect)
    assert all(name in SOURCES for name in cited)


@pytest.mark.parametrize("first", sorted(PROXY_OP), ids=lambda first: "%d.%d" % first)
def test_proxy_op_and_pool_sizes_are_the_structs_laid_out(first):
    tag, path, start, end, fields = PROXY_OP[first]
    assert tag.startswith(f"v{first[0]}.{first[1]}.") and start < end
    row = nccl.version_row(tag)
    assert row.proxy_op_bytes == c_sizeof(fields)
    assert row.proxy_pool_bytes == pool_sizeof(row.max_ops_per_peer, row.max_local_ranks, c_sizeof(fields))


def test_the_later_tags_of_a_row_lay_out_the_same():
    assert c_sizeof(PROXY_OP_2_27[4]) == c_sizeof(PROXY_OP[(2, 26)][4]) == nccl.version_row("2.27.7").proxy_op_bytes
    assert c_sizeof(PROXY_OP_2_30[4]) == nccl.version_row("2.30.7").proxy_op_bytes == 232


def test_the_ncclworkelemp2p_of_2_12_gives_16_elements_per_work():
    # v2.12.7-1 src/include/devcomm.h:199: { ncclWorkElemHeader (uint16 + uint8 enum + 6 bits: 4 bytes), int32 peer,
    # void* buff, size_t count, int chunkSize, uint8 ngroups, warpStart, nWarps, enum : uint8_t subType }
    assert 512 // c_sizeof([(4, 4), "i32", "ptr", "i64", "i32", "u8", "u8", "u8", "u8"]) == 16


@pytest.mark.parametrize("tag", TAGS)
def test_every_release_tag_has_its_row(tag):
    major, minor = (int(n) for n in tag[1:].split(".")[:2])
    row = nccl.version_row(tag)
    assert row.first <= (major, minor) <= row.last


@pytest.mark.parametrize("version, printed, source", [
    ("2.19.3", 4194660 - 4, "NCCL guide: 'failed to extend /dev/shm/nccl-03v824 to 4194660 bytes' (pool + refcount)"),
    ("2.21.5", 7340384, "hiyouga/EasyR1#228"),
    ("2.24.3", 14156128, "NVIDIA/nccl#1589"),
])
def test_published_pool_sizes(version, printed, source):
    assert nccl.version_row(version).proxy_pool_bytes == printed, source


def test_the_pool_of_each_row():
    pools = {row.name: row.proxy_pool_bytes for row in nccl.NCCL_VERSIONS}
    assert pools == {"2.12-2.15": 4194656, "2.16-2.19": 4194656, "2.20": 5767520, "2.21": 7340384, "2.22": 7340384,
                     "2.23": 10486112, "2.24": 14156128, "2.25": 31850880, "2.26-2.27": 33030528,
                     "2.28-2.30": 34210176}
    assert all(pools[row.name] == expected_pool(row.first) for row in nccl.NCCL_VERSIONS)


# --- The figures of issue 28.2, at 8 ranks, from the table above (not from shmguard.nccl).
MB = 10**6
CONNECTIONS_8 = 2 * (8 + 7)  # 2 channels, ring and tree (shmguard.nccl's docstring; test_nccl.py)


def connection_tmpfs(refcount: int) -> int:
    return round_up(9637888 + refcount, PAGE) + round_up(4096 + refcount, PAGE)


def pool_tmpfs(first) -> int:
    return round_up(expected_pool(first) + ROWS[next(k for k in ROWS if k[0] == first)][3], PAGE)


def eight(version=None, **env):
    return make_job(workers=0, batch_size=1, sample_bytes=1, gpus=8, procs_per_node=8, nccl_version=version,
                    nccl_env=env or None)


def test_issue_figures_pool_per_rank_on_2_26_and_2_28():
    assert pool_tmpfs((2, 26)) == 33034240 and pool_tmpfs((2, 28)) == 34213888
    assert nccl.pool_file_bytes(nccl.version_row("2.27")) == 33034240
    assert nccl.pool_file_bytes(nccl.version_row("2.29.3")) == 34213888


def test_issue_figures_shm_disabled_needs_up_to_274_mb():
    assert nccl.shm_bytes(eight("2.30", NCCL_SHM_DISABLE="1")) == 8 * pool_tmpfs((2, 28)) == 273711104
    assert nccl.shm_bytes(eight(None, NCCL_SHM_DISABLE="1")) == 273711104  # not known: the most
    assert nccl.shm_bytes(eight("2.26.2", NCCL_SHM_DISABLE="1")) == 8 * 33034240
    assert round(8 * round_up(14156128 + 4, PAGE) / MB) == 113  # what a single 2.24 allowance said


def test_issue_figures_cumem_off_connects_at_init_323_to_563_mb():
    shm = CONNECTIONS_8 * connection_tmpfs(4)
    assert shm == 289505280  # the default's 289.5 MB
    low = nccl.shm_bytes(eight("2.19", NCCL_CUMEM_ENABLE="0"))
    high = nccl.shm_bytes(eight("2.30", NCCL_CUMEM_ENABLE="0"))
    assert low == shm + 8 * pool_tmpfs((2, 16)) and round(low / MB) == 323
    assert high == shm + 8 * pool_tmpfs((2, 28)) and round(high / MB) == 563
    assert nccl.shm_bytes(eight(None, NCCL_CUMEM_ENABLE="0")) == high
    # each version in between lies between them, and each is its connections plus a pool per rank
    for row in nccl.NCCL_VERSIONS:
        found = nccl.shm_bytes(eight(f"{row.last[0]}.{row.last[1]}", NCCL_CUMEM_ENABLE="0"))
        assert found == CONNECTIONS_8 * connection_tmpfs(row.refcount_bytes) + 8 * pool_tmpfs(row.first)
        assert 322 * MB < found <= high


def test_issue_figures_2_21_creates_the_pool_at_init_348_mb():
    found = nccl.shm_bytes(eight("2.21.5"))
    assert found == CONNECTIONS_8 * connection_tmpfs(4) + 8 * pool_tmpfs((2, 21)) == 348258304


def test_runtime_connection_needs_no_pool_on_the_shm_path():
    for version in ("2.24.3", "2.25.1", "2.26.2", "2.27.7", "2.28.3", "2.30.7"):
        assert nccl.shm_bytes(eight(version)) == CONNECTIONS_8 * connection_tmpfs(4) == 289505280, version


def test_2_22_and_2_23_count_the_init_connection_unless_cumem_is_said_on():
    assert nccl.shm_bytes(eight("2.23.4")) == 289505280 + 8 * pool_tmpfs((2, 23))
    assert nccl.shm_bytes(eight("2.23.4", NCCL_CUMEM_ENABLE="1")) == 289505280
    assert nccl.shm_bytes(eight("2.22.3", NCCL_CUMEM_ENABLE="1", NCCL_RUNTIME_CONNECT="0")) == (
        289505280 + 8 * pool_tmpfs((2, 22)))


def test_unknown_version_sizes_for_the_version_that_needs_most():
    figures = {row.name: nccl.footprint(eight(), row).total for row in nccl.NCCL_VERSIONS}
    assert nccl.shm_bytes(eight()) == max(figures.values()) == figures["2.23"] == 289505280 + 8 * pool_tmpfs((2, 23))
    assert "sized for 2.23, the most of 2.12-2.30" in nccl.describe(eight())


def test_before_2_16_there_is_no_refcount():
    # 9637888 bytes are 2353 whole pages: without the refcount a connection takes 2354 pages, with it 2356
    assert connection_tmpfs(0) == 2354 * PAGE and connection_tmpfs(4) == 2356 * PAGE
    assert nccl.shm_bytes(eight("2.14.3", NCCL_ALGO="Ring")) == CONNECTIONS_8 * 2354 * PAGE + 8 * pool_tmpfs((2, 12))


def test_at_init_nccl_connects_the_tree_whatever_nccl_algo_says():
    ring_only = eight("2.27.7", NCCL_ALGO="Ring")
    assert nccl.shm_bytes(ring_only) == 16 * connection_tmpfs(4)  # runtime: the ring only
    at_init = eight("2.27.7", NCCL_ALGO="Ring", NCCL_CUMEM_ENABLE="0")
    assert nccl.shm_bytes(at_init) == 30 * connection_tmpfs(4) + 8 * pool_tmpfs((2, 26))
    assert "ring and tree" in nccl.describe(at_init) and "NCCL_CUMEM_ENABLE=0" in nccl.describe(at_init)


def test_p2p_still_makes_the_pools_when_nccl_connects_at_init():
    job = make_job(workers=0, batch_size=1, sample_bytes=1, gpus=8, procs_per_node=8, nccl_transport="p2p",
                   nccl_version="2.21.5")
    assert nccl.shm_bytes(job) == 8 * pool_tmpfs((2, 21))
    assert nccl.shm_bytes(job.replace(nccl_version="2.27.7")) == 0
    assert "one proxy operation pool of 7,340,384 bytes per rank" in nccl.describe(job)


@pytest.mark.parametrize("env, channels", [({"NCCL_MIN_NCHANNELS": "64"}, 32), ({"NCCL_MIN_NCHANNELS": "1000"}, 32)])
def test_maxchannels_was_32_before_2_25(env, channels):
    assert nccl.footprint(eight("2.24.3", **env), nccl.version_row("2.24.3")).channels == channels
    assert nccl.footprint(eight("2.25.1", **env), nccl.version_row("2.25.1")).channels == 64


# --- The version: its forms, where it comes from, and its validation.
@pytest.mark.parametrize("given, kept", [
    ("2.21.5", "2.21.5"), ("2.21", "2.21"), ("v2.21.5-1", "2.21.5"), (" 2.27.7+cuda12.9 ", "2.27.7"),
    ((2, 21, 5), "2.21.5"), ((2, 27, 3, "+cuda12.8"), "2.27.3"), (22105, "2.21.5"), (2708, "2.7.8"), ("2.30.7", "2.30.7"),
])
def test_version_forms(given, kept):
    assert nccl.parse_version(given) == kept


@pytest.mark.parametrize("given", ["", "latest", "2", "1.3.0", "2.x", "2.21.5.1.9", True, (2,), "２.21", "2.-1"])
def test_bad_versions_are_refused_naming_the_option(given):
    with pytest.raises(UsageError, match="--nccl-version must be an NCCL version like 2.21.5"):
        nccl.parse_version(given)


@pytest.mark.parametrize("version, row", [("2.10.3", "2.12-2.15"), ("2.31.1", "2.28-2.30"), ("3.0", "2.28-2.30")])
def test_versions_outside_the_table_take_the_nearest_row(version, row):
    assert nccl.version_row(version).name == row
    assert f"NCCL {version}, sized as {row}, the nearest version shmguard knows" in nccl.describe(eight(version))


@pytest.mark.parametrize("version, row", [("2.19.4", "2.16-2.19"), ("2.26.6", "2.26-2.27"), ("2.12", "2.12-2.15")])
def test_versions_inside_the_table_are_named_as_given(version, row):
    assert nccl.version_row(version).name == row
    assert f"NCCL {version};" in nccl.describe(eight(version)) and "nearest" not in nccl.describe(eight(version))


def test_the_job_carries_the_version_to_the_container_and_back():
    job = eight("v2.21.5-1")
    assert job.nccl_version == "2.21.5" and job.to_env()["SHMGUARD_NCCL_VERSION"] == "2.21.5"
    assert "SHMGUARD_NCCL_VERSION" not in eight().to_env()
    back = job_from_env(job.to_env())
    assert back.nccl_version == "2.21.5" and nccl.shm_bytes(back) == nccl.shm_bytes(job)


def test_a_bad_environment_version_names_the_variable():
    env = eight().to_env() | {"SHMGUARD_NCCL_VERSION": "newest"}
    with pytest.raises(UsageError, match="SHMGUARD_NCCL_VERSION must be an NCCL version like 2.21.5, not 'newest'"):
        job_from_env(env)


def test_the_annotation_says_the_version():
    container = {"name": "train", "env": [{"name": "SHMGUARD_NCCL_VERSION", "value": "2.30.3"}]}
    defaults = {"workers": 0, "batch_size": 1, "sample_bytes": 1, "gpus": 8, "procs_per_node": 8}
    assert container_job(container, (), defaults).job.nccl_version == "2.30.3"
    job = container_job(container, ({"shmguard.io/nccl-version": "2.21.5"},), defaults).job
    assert job.nccl_version == "2.21.5" and nccl.shm_bytes(job) == 348258304
