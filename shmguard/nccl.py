"""NCCL's own /dev/shm: what GPUs on one node use to talk when they talk through host memory.

When NCCL's ranks on one node cannot (or may not) reach each other's GPU memory
directly (no P2P over NVLink/PCIe: consumer GPUs, GPUs under different CPU
sockets, NCCL_P2P_DISABLE=1, many containers), NCCL's SHM transport connects
them through /dev/shm. Each connection is two files /dev/shm/nccl-XXXXXX:

- the receive side: a 4 KiB header (struct ncclRecvMem) plus one buffer per
  protocol, LL + LL128 + Simple: 4096 + 524288 + 4915200 + 4194304 = 9637888
  bytes with the defaults, the size NCCL prints when it fails;
- the send side: a 4 KiB header (struct ncclSendMem).

From 2.16 NCCL adds a 4-byte reference count to each file, and tmpfs holds whole
pages, so a default connection takes 9641984 + 8192 bytes. All three protocol
buffers are allocated whatever NCCL_PROTO says (src/transport/shm.cc adds every
buffSizes[p]).

Connections on a node, per channel: every rank receives from its ring
predecessor; the tree (within one node a chain in ring order, as NCCL's logs
show: "Ring 00 : 3 -> 0 -> 1", "Trees [0] 1/-1/-1->0->-1") adds one from each
rank's child, except with two ranks, where the child is the ring predecessor.
So 2 ranks: 2 per channel; L >= 3 ranks: 2L - 1. NCCL uses 2 channels on such
paths (one search channel, duplicated: "2 coll channels" in NVIDIA/nccl#1518,
"Channel 00/02" in vllm-project/vllm#18831); NCCL_MIN/MAX_NCHANNELS change that.
That is the most a job's collectives (all_reduce, broadcast, all_gather, …)
connect over its life. ncclSend/ncclRecv and all_to_all connect every pair of
ranks on their own channels and are not counted; nor are extra communicators
(each process group over the same ranks connects again).

What changes with NCCL's version (NCCL_VERSIONS, each figure with its tag, file
and line):

- The proxy's operation pool (struct ncclProxyOpsPool), one /dev/shm file per
  rank, grew from 4 MiB (2.12-2.19) to 32.6 MiB (2.28-2.30). NCCL creates it
  when a rank first connects to its proxy for a transport that needs proxy
  progress (sockets/IB), and also at init in "Connect to local net proxy"
  (src/init.cc), which every rank runs unless NCCL connects at runtime.
- When NCCL connects. Up to 2.21 it connects ring and tree on every channel at
  init (whatever NCCL_ALGO says) and creates the pool on every rank. From 2.22 it
  connects at the first collective that needs a connection ("runtime connect",
  src/init.cc `comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect()`)
  unless NCCL_RUNTIME_CONNECT=0 or cuMem is off: NCCL_CUMEM_ENABLE=0 (vLLM sets
  it), a driver older than CUDA 12.0, and on 2.22-2.23 a GPU without GPUDirect
  RDMA over cuMem (src/misc/cudawrap.cc), which GeForce cards, the usual SHM
  case, lack; shmguard counts 2.22-2.23 as connecting at init unless
  NCCL_CUMEM_ENABLE=1. A driver older than CUDA 12.0 cannot be seen from here:
  set NCCL_CUMEM_ENABLE=0 in the job's environment to size for it.
- MAXCHANNELS (the most NCCL_MIN_NCHANNELS can ask for): 32 before 2.25, then 64.

The version comes from the job (--nccl-version, SHMGUARD_NCCL_VERSION,
shmguard.io/nccl-version) or, inside the container, from what torch would load
(shmguard.probe.nccl_version). Unknown, shmguard sizes for the version of the
table that needs the most for this job.

Which transport NCCL picks depends on the topology, which shmguard cannot see
from outside, so the model sizes for SHM unless told otherwise:
`--nccl-transport p2p` (the GPUs reach each other over NVLink/PCIe: NCCL's
buffers live in GPU memory, nothing in /dev/shm but the pools NCCL makes at
init). With NCCL_SHM_DISABLE=1 the ranks use P2P where the GPUs allow it, else
sockets through NCCL's proxy thread: its operation pool on every rank.

Every size here is derived from NCCL's source and published error messages,
not measured on this (GPU-less) machine: benchmarks/nccl_shm.py measures the
real use on a GPU node. The pool's size is x86-64 Linux's (glibc's 40-byte
pthread_mutex_t and 48-byte pthread_cond_t). NCCL 2.24+ can put the SHM buffers
between processes in cuMem host memory instead of /dev/shm (NCCL_CUMEM_HOST_ENABLE,
on by default with a driver >= 12.6, src/misc/cudawrap.cc) where the container
allows NUMA calls; Docker's default seccomp profile does not ("Docker in
particular is known to disable get_mempolicy", same file; from 2.27 NCCL then
falls back to /dev/shm). On nodes where cuMem host memory works, the figure is
an upper bound.

Standard library only: `shmguard health` imports the model, which imports this.
"""

from __future__ import annotations

from shmguard.errors import UsageError
from shmguard.record import Record
from shmguard.segments import round_up  # tmpfs holds whole pages

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (health must not); type checkers read it so
if TYPE_CHECKING:
    from shmguard.job import Job

# --- NCCL's constants that every version since 2.12 shares. Sources: github.com/NVIDIA/nccl at tag v2.28.3-1
# --- (the same values at v2.12.12-1, v2.14.3-1, v2.16.5-1, v2.19.3-1, v2.21.5-1, v2.24.3-1, v2.30.7-1).
NCCL_STEPS = 8  # src/include/device.h: #define NCCL_STEPS 8
LL_LINES_PER_THREAD = 8  # src/include/device.h: NCCL_LL_LINES_PER_THREAD
LL_MAX_NTHREADS = 512  # src/include/device.h: NCCL_LL_MAX_NTHREADS
LL_LINE_BYTES = 16  # src/include/device.h: sizeof(union ncclLLFifoLine) (4 x uint32_t)
LL128_ELEMS_PER_THREAD = 120  # src/include/device.h: NCCL_LL128_ELEMS_PER_THREAD
LL128_MAX_NTHREADS = 640  # src/include/device.h: NCCL_LL128_MAX_NTHREADS
LL128_ELEM_BYTES = 8  # sizeof(uint64_t)
# src/init.cc: DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE (1 << 22, "4MiB");
# overridden by NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE, NCCL_BUFFSIZE (computeBuffSizes).
DEFAULT_LL_BUFFSIZE = LL_LINES_PER_THREAD * LL_MAX_NTHREADS * NCCL_STEPS * LL_LINE_BYTES  # 524288
DEFAULT_LL128_BUFFSIZE = LL128_ELEMS_PER_THREAD * LL128_MAX_NTHREADS * NCCL_STEPS * LL128_ELEM_BYTES  # 4915200
DEFAULT_BUFFSIZE = 1 << 22  # 4194304, the Simple protocol's buffer
# src/include/comm.h: struct ncclSendMem / ncclRecvMem are unions padded to MEM_ALIGN (4096).
SEND_MEM_BYTES = 4096
RECV_MEM_BYTES = 4096
# src/misc/shmutils.cc ncclShmOpen (src/os/linux.cc ncclOsShmOpen from v2.30): realShmSize = shmSize + refSize,
# the reference count after the buffer ("failed to extend … to 5967876 bytes" for size 5967872); from v2.16
# (v2.16.2-1 src/misc/shmutils.cc:54); none before (v2.15.5-1 src/misc/shmutils.cc:20 allocates shmSize bytes).
REFCOUNT_BYTES = 4
DEFAULT_CHANNELS = 2  # one search channel, duplicated (src/graph/connect.cc "Duplication"); see the docstring
# The pool's fields after its ops (src/include/proxy.h struct ncclProxyOpsPool): int nextOps, int nextOpsEnd,
# int freeOps[NCCL_MAX_LOCAL_RANKS], then pthread_mutex_t (40 bytes) and pthread_cond_t (48) on x86-64 glibc
# (std::mutex and std::condition_variable from v2.30.3-1, the same sizes in libstdc++).
POOL_MUTEX_BYTES = 40
POOL_COND_BYTES = 48

# When NCCL connects ring and tree: "never" at runtime (always at init, pools included); "gdr": at runtime
# only where cuMem is on, which 2.22-2.23 enable only on GPUs with GPUDirect RDMA over cuMem (counted as at
# init unless NCCL_CUMEM_ENABLE=1); "cumem": at runtime where cuMem is on (off with NCCL_CUMEM_ENABLE=0).
CONNECT_RULES = ("never", "gdr", "cumem")


class NcclVersion(Record):
    """A range of NCCL versions whose /dev/shm figures are the same; every field cited in NCCL_VERSIONS."""

    first: tuple  # (major, minor), inclusive
    last: tuple
    max_channels: int  # MAXCHANNELS
    max_local_ranks: int  # NCCL_MAX_LOCAL_RANKS: the pool holds ops for this many peers
    max_ops_per_peer: int  # MAX_OPS_PER_PEER
    proxy_op_bytes: int  # sizeof(struct ncclProxyOp) on x86-64
    refcount_bytes: int  # what ncclShmOpen adds after every segment
    runtime_connect: str  # one of CONNECT_RULES

    @property
    def name(self) -> str:
        first, last = (f"{major}.{minor}" for major, minor in (self.first, self.last))
        return first if first == last else f"{first}-{last}"

    @property
    def proxy_pool_bytes(self) -> int:
        """sizeof(struct ncclProxyOpsPool): the ops of every local peer, then the pool's own fields."""
        ops = self.max_ops_per_peer * self.max_local_ranks * self.proxy_op_bytes
        tail = round_up(8 + 4 * self.max_local_ranks, 8) + POOL_MUTEX_BYTES + POOL_COND_BYTES
        return ops + tail


# NCCL's versions, oldest first. Sources: github.com/NVIDIA/nccl, file:line at the tag that starts each range
# (each later tag of the range checked to give the same figures). Pool = MAX_OPS_PER_PEER x NCCL_MAX_LOCAL_RANKS
# x sizeof(struct ncclProxyOp) + its fields; sizeof(struct ncclProxyOp) is the x86-64 layout of the struct's
# fields (tests/unit/test_nccl_versions.py lays them out again from the field lists).
NCCL_VERSIONS: tuple[NcclVersion, ...] = (
    # v2.12.7-1: src/include/devcomm.h:49 MAXCHANNELS 32; src/include/proxy.h:91 MAX_OPS_PER_PEER
    # (2*MAXCHANNELS*NCCL_MAX_WORK_ELEMENTS_P2P), devcomm.h:222 NCCL_MAX_WORK_ELEMENTS_P2P = NCCL_WORK_SIZE (512,
    # devcomm.h:159) / sizeof(struct ncclWorkElemP2p) (32) = 16; proxy.h:92 NCCL_MAX_LOCAL_RANKS 64; proxy.h:23-40
    # struct ncclProxyOp, 64 bytes; proxy.h:93 the pool: 4194656 bytes; init.cc:833 "Connect to local net proxy"
    # at init; no refcount (src/misc/shmutils.cc).
    NcclVersion(first=(2, 12), last=(2, 15), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=64, refcount_bytes=0, runtime_connect="never"),
    # v2.16.2-1: src/misc/shmutils.cc:54 realShmSize = shmSize + refSize (a 4-byte int); proxy.h:24 the same
    # 64-byte ncclProxyOp through v2.19.4-1 (proxy.h:27). NCCL's troubleshooting guide's "failed to extend
    # /dev/shm/nccl-03v824 to 4194660 bytes" is this pool plus its refcount.
    NcclVersion(first=(2, 16), last=(2, 19), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=64, refcount_bytes=4, runtime_connect="never"),
    # v2.20.3-1: src/include/proxy.h:34-56 ncclProxyOp gains a buffer pointer and a 16-byte union
    # ncclProxyOpSpecifics: 88 bytes; src/include/info.h:16 NCCL_MAX_LOCAL_RANKS 64; init.cc:1324.
    NcclVersion(first=(2, 20), last=(2, 20), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=88, refcount_bytes=4, runtime_connect="never"),
    # v2.21.5-1: src/include/proxy.h:34-60 ncclProxyOp with send/recv handles and buffers: 112 bytes; pool
    # 7340384 (hiyouga/EasyR1#228); init.cc:1367 "Connect to local net proxy", the last version that always does.
    NcclVersion(first=(2, 21), last=(2, 21), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=112, refcount_bytes=4, runtime_connect="never"),
    # v2.22.3-1: src/init.cc:1153 comm->runtimeConn = comm->cuMemSupport && ncclParamRuntimeConnect(), init.cc:1185
    # the net proxy only in the else branch; src/misc/cudawrap.cc:39 cuMem needs
    # CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED; src/include/device.h:62-63 MAXCHANNELS 32,
    # NCCL_MAX_LOCAL_RANKS 64; device.h:342 NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8, proxy.h:145 MAX_OPS_PER_PEER
    # (2*MAXCHANNELS*2*NCCL_MAX_DEV_WORK_P2P_PER_BATCH) = 1024; proxy.h:50 ncclProxyOp still 112 bytes.
    NcclVersion(first=(2, 22), last=(2, 22), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=112, refcount_bytes=4, runtime_connect="gdr"),
    # v2.23.4-1: src/include/proxy.h:52-91 ncclProxyOp gains the profiler's fields: 160 bytes; init.cc:1190;
    # cudawrap.cc:39 (the GPUDirect RDMA check still there).
    NcclVersion(first=(2, 23), last=(2, 23), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=160, refcount_bytes=4, runtime_connect="gdr"),
    # v2.24.3-1: src/include/proxy.h:53-98 ncclProxyOp with size_t chunk/slice/loop sizes: 216 bytes, pool
    # 14156128 (NVIDIA/nccl#1589, "(size 14156128)"); src/misc/cudawrap.cc:21-41 cuMem needs only VMM now.
    NcclVersion(first=(2, 24), last=(2, 24), max_channels=32, max_local_ranks=64, max_ops_per_peer=1024,
                proxy_op_bytes=216, refcount_bytes=4, runtime_connect="cumem"),
    # v2.25.1-1: src/include/device.h:62 MAXCHANNELS 64, device.h:63 NCCL_MAX_LOCAL_RANKS 72: MAX_OPS_PER_PEER
    # (proxy.h:182) 2048; ncclProxyOp (proxy.h:53) 216 bytes: pool 31850880.
    NcclVersion(first=(2, 25), last=(2, 25), max_channels=64, max_local_ranks=72, max_ops_per_peer=2048,
                proxy_op_bytes=216, refcount_bytes=4, runtime_connect="cumem"),
    # v2.26.2-1: src/include/proxy.h:97 uint64_t workCounter: ncclProxyOp 224 bytes (v2.27.3-1 proxy.h:96 adds a
    # bool in padding: still 224); pool 33030528, 33034240 bytes of tmpfs with its refcount.
    NcclVersion(first=(2, 26), last=(2, 27), max_channels=64, max_local_ranks=72, max_ops_per_peer=2048,
                proxy_op_bytes=224, refcount_bytes=4, runtime_connect="cumem"),
    # v2.28.3-1: src/include/proxy.h:85-86 int nChannels, nPeers (and uint8_t collAPI): 232 bytes through v2.30.7-1
    # (proxy.h:69-124 at v2.30.3-1); pool 34210176, 34213888 bytes of tmpfs.
    NcclVersion(first=(2, 28), last=(2, 30), max_channels=64, max_local_ranks=72, max_ops_per_peer=2048,
                proxy_op_bytes=232, refcount_bytes=4, runtime_connect="cumem"),
)
OLDEST, NEWEST = NCCL_VERSIONS[0], NCCL_VERSIONS[-1]
SUPPORTED = f"{OLDEST.first[0]}.{OLDEST.first[1]}-{NEWEST.last[0]}.{NEWEST.last[1]}"
MAX_CHANNELS = NEWEST.max_channels  # the most NCCL_MIN_NCHANNELS can ask of any version in the table

TRANSPORTS = ("shm", "p2p")

# The NCCL_* variables that change the footprint (NCCL also reads /etc/nccl.conf and NCCL_CONF_FILE; shmguard does not).
# NCCL_PROTO does not change it (every protocol's buffer is allocated); NCCL_NCHANNELS_PER_NET_PEER is for
# network peers only. NCCL_CUMEM_ENABLE and NCCL_RUNTIME_CONNECT decide when NCCL connects (2.22+).
ENV_NAMES = (
    "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE",
    "NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS",
    "NCCL_ALGO", "NCCL_CUMEM_ENABLE", "NCCL_RUNTIME_CONNECT",
)
_NUMERIC = ("NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE",
            "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS",
            "NCCL_CUMEM_ENABLE", "NCCL_RUNTIME_CONNECT")
_UNSET = -2  # NCCL's "not set" for its integer parameters (NCCL_PARAM(…, -2))

def env_of(environ) -> tuple[tuple[str, str], ...]:
    """The footprint-changing NCCL_* variables set in an environment mapping, as sorted (name, value) pairs."""
    if not environ:
        return ()
    return tuple(sorted((name, str(environ[name]).strip()) for name in ENV_NAMES
                        if name in environ and str(environ[name]).strip() != ""))


def _integer(name: str, text: str) -> int:
    try:
        return int(text, 0)  # NCCL reads them with strtoll(…, 0): 0x… and 0… are hex and octal
    except ValueError:
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"{name} must be a whole number, not {text!r}") from None


def validate_env(pairs) -> tuple[tuple[str, str], ...]:
    """Check the NCCL_* values shmguard reads (UsageError naming the variable); returns them as sorted pairs."""
    env = tuple(sorted((str(k), str(v).strip()) for k, v in dict(pairs).items() if k in ENV_NAMES and str(v).strip()))
    for name, text in env:
        if name in _NUMERIC:
            value = _integer(name, text)
            if value < 0 and value != _UNSET:
                raise UsageError(f"{name} must be 0 or more, not {text!r}")
    return env


def parse_version(value) -> str:
    """An NCCL version as shmguard keeps it, `2.21.5` (or `2.21`), from what people and tools write:
    `2.21.5`, `v2.21.5-1` (a tag), `2.21.5+cuda12.4`, `(2, 21, 5)` (torch.cuda.nccl.version()), or NCCL's
    version code (22105; 2708 before 2.9). UsageError otherwise."""
    numbers = version_numbers(value)
    if numbers is None:
        raise UsageError(f"--nccl-version must be an NCCL version like 2.21.5, not {value!r}")
    return ".".join(str(n) for n in numbers)


def version_numbers(value) -> tuple[int, ...] | None:
    """(major, minor[, patch]) of an NCCL version in any of parse_version's forms; None: not one."""
    if isinstance(value, bool):
        return None
    numbers: tuple[int, ...]
    if isinstance(value, int):
        code = value  # NCCL_VERSION_CODE: major*10000 + minor*100 + patch from 2.9, major*1000 + minor*100 + patch before
        numbers = (code // 10000, code // 100 % 100, code % 100) if code >= 10000 else (code // 1000, code // 100 % 10, code % 100)
    elif isinstance(value, (tuple, list)):
        if not 2 <= len(value) <= 4 or not all(isinstance(n, int) and not isinstance(n, bool) for n in value[:3]):
            return None
        numbers = tuple(value[:3])
    else:
        text = str(value).strip().lower().removeprefix("v")
        for mark in "+-~ ":
            text = text.split(mark, 1)[0]  # 2.21.5-1 (a tag's release), 2.21.5+cuda12.4
        parts = text.split(".")
        if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() and len(p) <= 4 for p in parts):
            return None
        numbers = tuple(int(p) for p in parts)
    if numbers[0] < 2 or any(n < 0 for n in numbers):
        return None
    return numbers


def version_row(version: str | None) -> NcclVersion | None:
    """The table's row for a version (older than the table: its first row; newer: its last); None: not known."""
    if not version:
        return None
    numbers = version_numbers(version)
    if numbers is None:
        return None
    key = numbers[:2]
    if key < OLDEST.first:
        return OLDEST
    for row in NCCL_VERSIONS:
        if row.first <= key <= row.last:
            return row
    return NEWEST


def _env(job: Job) -> dict[str, str]:
    return dict(getattr(job, "nccl_env", None) or ())


def _param(env: dict, name: str, default: int) -> int:
    if name not in env:
        return default
    value = _integer(name, env[name])
    return default if value == _UNSET else value


def buff_sizes(env: dict) -> tuple[int, int, int]:
    """(LL, LL128, Simple) buffer bytes per connection, as src/init.cc computeBuffSizes."""
    return (_param(env, "NCCL_LL_BUFFSIZE", DEFAULT_LL_BUFFSIZE),
            _param(env, "NCCL_LL128_BUFFSIZE", DEFAULT_LL128_BUFFSIZE),
            _param(env, "NCCL_BUFFSIZE", DEFAULT_BUFFSIZE))


def segment_size(sizes: tuple[int, int, int] = (DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE)) -> int:
    """The receive segment's size as NCCL prints it ("… (size 9637888)"): header plus the three buffers."""
    return RECV_MEM_BYTES + sum(sizes)


def simple_buffsize_of(segment: int) -> int | None:
    """The NCCL_BUFFSIZE behind a printed receive segment size, with default LL/LL128 buffers (None: not one)."""
    simple = segment - segment_size((DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, 0))
    return simple if simple > 0 else None


def connection_bytes(sizes: tuple[int, int, int], refcount: int = REFCOUNT_BYTES) -> int:
    """tmpfs bytes of one SHM connection: the receive and send segments, each with its refcount, in whole pages."""
    return round_up(segment_size(sizes) + refcount) + round_up(SEND_MEM_BYTES + refcount)


def pool_file_bytes(row: NcclVersion) -> int:
    """tmpfs bytes of one rank's proxy operation pool: the pool and its refcount, in whole pages."""
    return round_up(row.proxy_pool_bytes + row.refcount_bytes)


def channels(env: dict, most_channels: int = MAX_CHANNELS) -> int:
    """Channels NCCL connects: the default, capped by NCCL_MAX_NCHANNELS and raised to NCCL_MIN_NCHANNELS,
    within the version's MAXCHANNELS (src/graph/connect.cc ncclMaxNchannels/ncclMinNchannels; the *_NRINGS
    names are the old spellings)."""
    count = DEFAULT_CHANNELS
    most = _param(env, "NCCL_MAX_NCHANNELS", _param(env, "NCCL_MAX_NRINGS", most_channels))
    count = min(count, max(1, min(most, most_channels)))
    least = _param(env, "NCCL_MIN_NCHANNELS", _param(env, "NCCL_MIN_NRINGS", 0))
    return max(count, min(least, most_channels))


def uses_tree(env: dict) -> bool:
    """Whether NCCL_ALGO leaves the tree algorithm on (unset: on). Forms: `Ring,Tree`, `^Tree`,
    and since 2.24 `allreduce:tree;broadcast:ring` (tree counts if any collective may use it)."""
    text = env.get("NCCL_ALGO", "").strip().lower()
    if not text:
        return True
    for part in text.split(";"):
        spec = part.split(":", 1)[-1].strip()
        excluded = spec.startswith("^")
        names = {t.strip() for t in spec.lstrip("^").split(",")}
        if ("tree" in names) != excluded:
            return True
    return False


def shm_disabled(env: dict) -> bool:
    return _param(env, "NCCL_SHM_DISABLE", 0) == 1  # src/transport/shm.cc: ncclParamShmDisable() == 1


def p2p_disabled(env: dict) -> bool:
    """NCCL_P2P_DISABLE=1, or NCCL_P2P_LEVEL=LOC/0 (src/graph/paths.cc: P2P only within the same GPU)."""
    level = env.get("NCCL_P2P_LEVEL", "").strip().upper()
    return _param(env, "NCCL_P2P_DISABLE", 0) == 1 or level in ("LOC", "0")


def connects_at_init(row: NcclVersion, env: dict) -> str:
    """Why NCCL connects ring and tree on every channel at init and makes every rank's proxy pool there
    ("" when it connects at runtime instead): see NcclVersion.runtime_connect."""
    if row.runtime_connect == "never":
        return f"NCCL {row.name} connects at init"
    if _param(env, "NCCL_RUNTIME_CONNECT", 1) == 0:
        return "NCCL_RUNTIME_CONNECT=0: NCCL connects at init"
    cumem = _param(env, "NCCL_CUMEM_ENABLE", _UNSET)  # src/misc/cudawrap.cc ncclCuMemEnable: param >= 0 ? param : auto
    if cumem == 0:
        return "NCCL_CUMEM_ENABLE=0 turns off runtime connection: NCCL connects at init"
    if cumem == _UNSET and row.runtime_connect == "gdr":
        return f"NCCL {row.name} connects at init unless the GPUs have GPUDirect RDMA over cuMem: NCCL_CUMEM_ENABLE=1 says they do"
    return ""


def local_ranks(job: Job) -> int:
    """NCCL ranks on this node: one per training process, each on its own GPU (NCCL refuses two ranks on one
    GPU); 0 below two ranks or without GPUs (Gloo and CPU jobs use no NCCL)."""
    ranks = min(job.procs_per_node, job.gpus)
    return ranks if ranks >= 2 else 0


def receive_connections(ranks: int, channel_count: int, tree: bool = True) -> int:
    """SHM connections on the node: per channel, one per rank for the ring, plus one per rank with a child
    in the tree that is not its ring predecessor (ranks - 1 of them, none with two ranks)."""
    if ranks < 2:
        return 0
    extra = ranks - 1 if tree and ranks > 2 else 0
    return channel_count * (ranks + extra)


def transport(job: Job) -> str:
    """How the local ranks talk, as far as shmguard can tell: shm (the default assumption), p2p (said so),
    or net (NCCL_SHM_DISABLE=1: sockets through the proxy, or P2P where the GPUs allow it)."""
    if getattr(job, "nccl_transport", "shm") == "p2p":
        return "p2p"
    return "net" if shm_disabled(_env(job)) else "shm"


class NcclFootprint(Record):
    """NCCL's /dev/shm for one job at one version, and what it is made of."""

    row: NcclVersion
    ranks: int
    transport: str  # shm, p2p or net
    at_init: str  # why NCCL connects at init ("" at runtime)
    connections: int  # SHM connections on the node
    channels: int
    tree: bool
    connection_bytes: int
    pools: int  # proxy operation pools on the node
    pool_bytes: int  # tmpfs bytes of one

    @property
    def total(self) -> int:
        return self.connections * self.connection_bytes + self.pools * self.pool_bytes


def footprint(job: Job, row: NcclVersion) -> NcclFootprint:
    """NCCL's /dev/shm on the node at one version (the job has two or more local GPU ranks)."""
    ranks, env, way = local_ranks(job), _env(job), transport(job)
    at_init = connects_at_init(row, env)
    # A rank makes its pool at init when NCCL connects there, or with its first socket connection (net).
    pools = ranks if at_init or way == "net" else 0
    count = most = 0
    tree = False
    if way == "shm":
        tree = True if at_init else uses_tree(env)  # at init NCCL connects the tree whatever NCCL_ALGO says
        most = channels(env, row.max_channels)
        count = receive_connections(ranks, most, tree)
    return NcclFootprint(row=row, ranks=ranks, transport=way, at_init=at_init, connections=count, channels=most,
                         tree=tree, connection_bytes=connection_bytes(buff_sizes(env), row.refcount_bytes),
                         pools=pools, pool_bytes=pool_file_bytes(row))


def sized_footprint(job: Job) -> NcclFootprint | None:
    """The footprint shmguard sizes for: at the job's NCCL version, or, unknown, the version of the table that
    needs the most for this job (the newest of equals). None without two local GPU ranks."""
    if local_ranks(job) == 0:
        return None
    row = version_row(getattr(job, "nccl_version", None))
    if row is not None:
        return footprint(job, row)
    best = footprint(job, NCCL_VERSIONS[0])
    for candidate in NCCL_VERSIONS[1:]:
        found = footprint(job, candidate)
        if found.total >= best.total:
            best = found
    return best


def shm_bytes(job: Job) -> int:
    """NCCL's /dev/shm for the whole node (bytes, whole pages): 0 without two local GPU ranks."""
    found = sized_footprint(job)
    return found.total if found else 0


def _version_text(job: Job, found: NcclFootprint) -> str:
    version = getattr(job, "nccl_version", None)
    if not version:
        return (f"NCCL's version not known: sized for {found.row.name}, the most of {SUPPORTED} for this job; "
                f"--nccl-version says which")
    numbers = version_numbers(version) or (0, 0)
    if numbers[:2] < OLDEST.first or numbers[:2] > NEWEST.last:
        return f"NCCL {version}, sized as {found.row.name}, the nearest version shmguard knows"
    return f"NCCL {version}"


def describe(job: Job) -> str:
    """One line on how the NCCL figure is made, for `check` (empty when NCCL adds nothing)."""
    found = sized_footprint(job)
    if found is None:
        return ""
    env = _env(job)
    version = _version_text(job, found)
    pools = (f"one proxy operation pool of {found.row.proxy_pool_bytes:,} bytes per rank"
             + (f" ({found.at_init})" if found.at_init else ""))
    mib = found.total / (1 << 20)
    if found.transport == "p2p":
        if not found.pools:
            return (f"NCCL between {found.ranks} local ranks over P2P (NVLink/PCIe, --nccl-transport p2p): no /dev/shm "
                    f"for its buffers ({version})")
        return (f"NCCL between {found.ranks} local ranks over P2P (NVLink/PCIe, --nccl-transport p2p): {mib:.1f} MiB "
                f"of /dev/shm, {pools}; {version}")
    if found.transport == "net":
        also = "" if p2p_disabled(env) else " (or P2P where the GPUs allow it)"
        return (f"NCCL between {found.ranks} local ranks: {mib:.1f} MiB of /dev/shm (NCCL_SHM_DISABLE=1: sockets "
                f"through NCCL's proxy{also}, {pools}; {version})")
    sizes = buff_sizes(env)
    extra = f", plus {pools}" if found.pools else ""
    return (f"NCCL between {found.ranks} local ranks: {mib:.1f} MiB of /dev/shm ({found.connections} SHM connections "
            f"over {found.channels} channels, ring{' and tree' if found.tree else ''}, each a "
            f"{segment_size(sizes):,}-byte receive segment plus a 4 KiB send segment{extra}; {version}; sized for the "
            f"SHM transport, derived from NCCL's source; --nccl-transport p2p if the GPUs talk over NVLink/PCIe)")


def parse_transport(value) -> str:
    text = "shm" if value is None else str(value).strip().lower() or "shm"
    if text not in TRANSPORTS:
        raise UsageError(f"--nccl-transport must be shm or p2p, not {value!r}")
    return text
