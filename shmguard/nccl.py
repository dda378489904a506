"""NCCL's own /dev/shm: what GPUs on one node use to talk when they talk through host memory.

When NCCL's ranks on one node cannot (or may not) reach each other's GPU memory
directly (no P2P over NVLink/PCIe: consumer GPUs, GPUs under different CPU
sockets, NCCL_P2P_DISABLE=1, many containers), NCCL's SHM transport connects
them through /dev/shm. Each connection is two files /dev/shm/nccl-XXXXXX:

- the receive side: a 4 KiB header (struct ncclRecvMem) plus one buffer per
  protocol, LL + LL128 + Simple: 4096 + 524288 + 4915200 + 4194304 = 9637888
  bytes with the defaults, the size NCCL prints when it fails;
- the send side: a 4 KiB header (struct ncclSendMem).

NCCL adds a 4-byte reference count to each file and tmpfs holds whole pages, so
a default connection takes 9641984 + 8192 bytes. All three protocol buffers are
allocated whatever NCCL_PROTO says (src/transport/shm.cc adds every buffSizes[p]).

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

Which transport NCCL picks depends on the topology, which shmguard cannot see
from outside, so the model sizes for SHM unless told otherwise:
`--nccl-transport p2p` (the GPUs reach each other over NVLink/PCIe: NCCL's
buffers live in GPU memory, nothing in /dev/shm). With NCCL_SHM_DISABLE=1 the
ranks use P2P where the GPUs allow it, else sockets through NCCL's proxy
thread, whose operation pool is one /dev/shm file per rank; that pool is sized
with the largest published figure (an allowance, its size varies by version).

Every size here is derived from NCCL's source and published error messages,
not measured on this (GPU-less) machine: benchmarks/nccl_shm.py measures the
real use on a GPU node. NCCL 2.24+ can put the SHM buffers between processes in
cuMem host memory instead of /dev/shm (NCCL_CUMEM_HOST_ENABLE, on by default with
a driver >= 12.6, src/misc/cudawrap.cc) where the container allows NUMA calls;
Docker's default seccomp profile does not ("Docker in particular is known to
disable get_mempolicy", same file; from 2.27 NCCL then falls back to /dev/shm).
On nodes where cuMem host memory works, the figure is an upper bound.

Standard library only: `shmguard health` imports the model, which imports this.
"""

from shmguard.errors import UsageError
from shmguard.segments import round_up  # tmpfs holds whole pages

# --- NCCL's constants. Sources: github.com/NVIDIA/nccl at tag v2.28.3-1 (the same values at the tags
# --- v2.12.12-1, v2.14.3-1, v2.18.3-1, v2.21.5-1, v2.25.1-1, v2.27.7-1, v2.30.7-1, where they were checked).
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
# src/misc/shmutils.cc ncclShmOpen (src/os/linux.cc ncclOsShmOpen from v2.30): realShmSize = shmSize + sizeof(int),
# the reference count after the buffer ("failed to extend … to 5967876 bytes" for size 5967872).
REFCOUNT_BYTES = 4
DEFAULT_CHANNELS = 2  # one search channel, duplicated (src/graph/connect.cc "Duplication"); see the docstring
MAX_CHANNELS = 64  # src/include/device.h: MAXCHANNELS (32 before v2.25)
# The proxy's operation pool (src/include/proxy.h struct ncclProxyOpsPool; one /dev/shm file per rank that
# has a connection needing proxy progress: sockets/IB, not SHM or P2P). Its size varies by version; the
# largest published: 14156128 bytes (NVIDIA/nccl#1589, NCCL 2.24, "Error while attaching to shared memory
# segment … (size 14156128)"). Smaller ones: 4194656 (the NCCL troubleshooting guide's "failed to extend
# /dev/shm/nccl-03v824 to 4194660 bytes"), 7340384 (hiyouga/EasyR1#228, with NCCL_SHM_DISABLE=1 and
# NCCL_P2P_DISABLE=1). An allowance, not an exact figure: newer versions (64 channels, 72 local ranks) may be larger.
PROXY_POOL_BYTES = 14156128

TRANSPORTS = ("shm", "p2p")

# The NCCL_* variables that change the footprint (NCCL also reads /etc/nccl.conf and NCCL_CONF_FILE; shmguard does not).
# NCCL_PROTO does not change it (every protocol's buffer is allocated); NCCL_NCHANNELS_PER_NET_PEER is for
# network peers only.
ENV_NAMES = (
    "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE",
    "NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS",
    "NCCL_ALGO",
)
_NUMERIC = ("NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE",
            "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS")
_UNSET = -2  # NCCL's "not set" for its integer parameters (NCCL_PARAM(…, -2))

# NCCL's warnings when /dev/shm is too small or its segments vanish, for `shmguard explain`
# (NCCL's guide: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#shared-memory):
# (id, regular expression on one log line, what it means, source). Sizes and paths are named groups.
# Strings, not compiled: `health` imports this module and must not pay for `re`.
NCCL_SHM_ERRORS: tuple[tuple[str, str, str, str], ...] = (
    ("nccl.shm.create",
     r"Error while creating shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)",
     "NCCL could not create a /dev/shm segment for a connection between two local GPUs: /dev/shm is too small",
     "src/include/shm.h (v2.7-2.11), src/misc/shmutils.cc (v2.12-2.29), src/os/linux.cc (v2.30+)"),
    ("nccl.shm.extend",
     r"Error: failed to extend (?P<path>\S+) to (?P<size>\d+) bytes",
     "fallocate of a /dev/shm/nccl-* segment failed (No space left on device): /dev/shm is too small",
     "src/misc/shmutils.cc (v2.12-2.29), src/os/linux.cc (v2.30+); NCCL troubleshooting guide, 'Shared memory'"),
    ("nccl.shm.fallocate",
     r"Call to posix_fallocate failed ?: ?(?P<error>.+)",
     "NCCL 2.7-2.11 could not allocate a /dev/shm segment: /dev/shm is too small",
     "src/include/shm.h shm_allocate + src/include/checks.h SYSCHECK (v2.7.8-1)"),
    ("nccl.shm.attach",
     r"Error while attaching to shared memory segment (?P<path>\S+) \(size (?P<size>\d+)\)",
     "a peer's /dev/shm/nccl-* segment was gone or could not be mapped (a peer failed first, or something removed it)",
     "src/misc/shmutils.cc (v2.12-2.29), src/os/linux.cc (v2.30+)"),
    ("nccl.shm.mkstemp",
     r"Error: failed to create shared memory file (?P<path>\S+)",
     "NCCL could not create a file in /dev/shm (missing, read-only or out of inodes)",
     "src/misc/shmutils.cc (v2.22-2.29), src/os/linux.cc (v2.30+)"),
    ("nccl.shm.unlink",
     r"unlink shared memory (?P<path>\S+) failed",
     "a /dev/shm/nccl-* segment was removed under NCCL (systemd RemoveIPC, a cleanup job)",
     "NCCL troubleshooting guide, 'Systemd'; src/misc/shmutils.cc, src/os/linux.cc"),
)


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


def _env(job) -> dict[str, str]:
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


def connection_bytes(sizes: tuple[int, int, int]) -> int:
    """tmpfs bytes of one SHM connection: the receive and send segments, each with its refcount, in whole pages."""
    return round_up(segment_size(sizes) + REFCOUNT_BYTES) + round_up(SEND_MEM_BYTES + REFCOUNT_BYTES)


def channels(env: dict) -> int:
    """Channels NCCL connects: the default, capped by NCCL_MAX_NCHANNELS and raised to NCCL_MIN_NCHANNELS
    (src/graph/connect.cc ncclMaxNchannels/ncclMinNchannels; the *_NRINGS names are the old spellings)."""
    count = DEFAULT_CHANNELS
    most = _param(env, "NCCL_MAX_NCHANNELS", _param(env, "NCCL_MAX_NRINGS", MAX_CHANNELS))
    count = min(count, max(1, min(most, MAX_CHANNELS)))
    least = _param(env, "NCCL_MIN_NCHANNELS", _param(env, "NCCL_MIN_NRINGS", 0))
    return max(count, min(least, MAX_CHANNELS))


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


def local_ranks(job) -> int:
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


def transport(job) -> str:
    """How the local ranks talk, as far as shmguard can tell: shm (the default assumption), p2p (said so),
    or net (NCCL_SHM_DISABLE=1: sockets through the proxy, or P2P where the GPUs allow it)."""
    if getattr(job, "nccl_transport", "shm") == "p2p":
        return "p2p"
    return "net" if shm_disabled(_env(job)) else "shm"


def shm_bytes(job) -> int:
    """NCCL's /dev/shm for the whole node (bytes, whole pages): 0 without two local GPU ranks."""
    ranks = local_ranks(job)
    if ranks == 0:
        return 0
    env = _env(job)
    way = transport(job)
    if way == "p2p":
        return 0
    if way == "net":
        return ranks * round_up(PROXY_POOL_BYTES + REFCOUNT_BYTES)
    return receive_connections(ranks, channels(env), uses_tree(env)) * connection_bytes(buff_sizes(env))


def describe(job) -> str:
    """One line on how the NCCL figure is made, for `check` (empty when NCCL adds nothing)."""
    ranks = local_ranks(job)
    if ranks == 0:
        return ""
    env = _env(job)
    way = transport(job)
    if way == "p2p":
        return f"NCCL between {ranks} local ranks over P2P (NVLink/PCIe, --nccl-transport p2p): no /dev/shm for its buffers"
    total = shm_bytes(job)
    mib = total / (1 << 20)
    if way == "net":
        also = "" if p2p_disabled(env) else " (or P2P where the GPUs allow it)"
        return (f"NCCL between {ranks} local ranks: {mib:.1f} MiB of /dev/shm (NCCL_SHM_DISABLE=1: sockets through "
                f"NCCL's proxy{also}, one operation pool of up to {PROXY_POOL_BYTES:,} bytes per rank)")
    sizes = buff_sizes(env)
    count = receive_connections(ranks, channels(env), uses_tree(env))
    return (f"NCCL between {ranks} local ranks: {mib:.1f} MiB of /dev/shm ({count} SHM connections over "
            f"{channels(env)} channels, ring{' and tree' if uses_tree(env) else ''}, each a {segment_size(sizes):,}-byte "
            f"receive segment plus a 4 KiB send segment; sized for the SHM transport, derived from NCCL's "
            f"published buffer sizes; --nccl-transport p2p if the GPUs talk over NVLink/PCIe)")


def parse_transport(value) -> str:
    text = "shm" if value is None else str(value).strip().lower() or "shm"
    if text not in TRANSPORTS:
        raise UsageError(f"--nccl-transport must be shm or p2p, not {value!r}")
    return text

