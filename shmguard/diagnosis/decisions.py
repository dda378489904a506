"""The decisions of the diagnosis: what a log line is (its `where` reader) and what a rule answers on the facts.

A rule with a fixed verdict needs no code here: the table (shmguard.diagnosis.rules) gives its summary and
fix. What lives here is what depends on the line around it (where an ENOSPC wrote, what a df line says) or on
the facts (a /dev/shm peak, the OOM flag, what NCCL said of its failure, the platform). Pure functions on
the Context; standard library only.
"""

from __future__ import annotations

import os
import re
from typing import Any

from shmguard import fixes, sizing
from shmguard.diagnosis import advice
from shmguard.diagnosis.advice import memory_advice, nofile_advice, peak_full, peak_low, peak_of, shm_advice
from shmguard.diagnosis.machinery import CONTEXT_LINES, Context
from shmguard.diagnosis.platforms import CONTAINED, seen_in
from shmguard.diagnosis.records import (
    LIKELY,
    NO_FAILURE,
    NOT_SHARED_MEMORY,
    SHARED_MEMORY,
    SIGBUS_EXIT,
    SIGKILL_EXIT,
    UNDETERMINED,
    Diagnosis,
    Signal,
)
from shmguard.fixes import Want, shm_fixes
from shmguard.units import GIB, format_size, parse_quantity, parse_size, slurm_size

# --- what a line is: its `where` readers ---------------------------------------------------------------------

ENOSPC = re.compile(r"[Nn]o space left on device|\[Errno 28\]|\bENOSPC\b|\berror 28\b|"
                    # the errno as a bare number (round 9: "failed with error code 28")
                    r"\berror code:? 28\b|\berrno(?::| ?=)? ?28\b")
# What the lines around an ENOSPC say about the write that failed (a traceback reads upwards; some logs print
# the error first and its frames after it).
SHM_CALL = re.compile(r"_new_shared|share_memory_|_share_fd|_share_filename|multiprocessing/shared_memory|"
                      r"SharedMemory\(|shm_open|/dev/shm|<torch_|shared memory segment|"
                      # Open MPI's [sys call fail] (help-opal-shmem-mmap.txt, help-btl-vader.txt; round 7)
                      r"during (?:vader )?shared memory (?:BTL )?initialization|"
                      # multiprocessing's shared ctypes (heap.py's Arena: a file in /dev/shm), torch's reducers
                      r"multiprocessing/heap\.py|torch/multiprocessing/reductions\.py|"
                      # pandarallel's memory file system is /dev/shm (its MEMORY_FS_ROOT, unless set otherwise)
                      r"[Pp]andarallel[/ ]|[Mm]emory [Ff]ile [Ss]ystem")
# multiprocessing's semaphores (a SemLock is a file in /dev/shm); joblib tries one at import and warns
# "[Errno 28] …  joblib will operate in serial mode" when it cannot.
SEMLOCK_CALL = re.compile(r"\bSemLock\b|multiprocessing/synchronize\.py|joblib will operate in serial mode")
# torch's own segment names, as its allocator prints them: `</torch_57_3981_1>` (file_system) or `<torch_…>`.
TORCH_SEGMENT = re.compile(r"/?torch_\d{1,10}_\d{1,20}(?:_\d{1,20})?")
TORCH_SEGMENT_IN_LINE = re.compile(r"</?torch_\d{1,10}_")
CHECKPOINT_CALL = re.compile(r"torch/serialization\.py|\btorch\.save\(")
# Writers of files on a disk (their caches under ~/.cache or $HF_HOME, the temporary directory): an ENOSPC in
# their frames, with no shared-memory call near, is that disk (round 2, from round 1's held-out misses).
DISK_CALL = re.compile(r"(?P<writer>datasets/arrow_writer\.py|datasets/builder\.py|fsspec/implementations/local\.py|"
                       r"/tempfile\.py|/shutil\.py|huggingface_hub/|torch/utils/tensorboard/|/zipfile\.py|"
                       r"pyarrow\.lib\._CRecordBatchWriter|"
                       # installers and image builders (round 8): packages, SDKs, layers are written to a disk
                       r"preparing SDK package|Could not install packages|npm ERR!|\bdpkg\b|failed to register layer|"
                       r"\bpip install\b|\bapt-get\b|cannot create temp file for here-document)")
PATH = re.compile(r"(?<![\w.])/[\w.@+~/-]{1,1024}")
# A POSIX shared-memory name (shm_open's "/NAME", a file in /dev/shm) as the message around it says it is.
SHM_NAME = re.compile(r"shared memory (?:segment|object|region|key)s? [\"'<]?(/[^\"'>\s]{1,256})")
# A source file a warning or a frame cites (`…/_multiprocessing_helpers.py:46:`): where the code is, not what it
# wrote to.
SOURCE_FILE = re.compile(r"\.(?:py|pyx|c|cc|cpp|cu|h|hpp)(?::\d{1,9})?:?$")
# A frame: Python's (`File "…"`), Java's and gdb's (`at …`), pybind11's after its `At:` (`/path.py(61): name`).
FRAME = re.compile(r"^\s{1,16}(?:File \"|at |\w|/[^\s(]{1,300}\(\d{1,9}\): )")
SHM_PATHS = ("/dev/shm", "/run/shm")
# A runtime's mount of a container's filesystem (runc's rootfs_linux.go): its ENOSPC is mount(2)'s, not a tmpfs's.
MOUNTING = re.compile(r"\bto rootfs\b|rootfs_linux\.go|\berror mounting\b")
# Shared memory named in the lines around an ENOSPC that nothing else places (round 9: "I created a new container
# with 5G of shared memory", "fill all /run/shm"): the likeliest space is that one.
SHM_MENTION = re.compile(r"/dev/shm|/run/shm|[Ss]hared [Mm]emory|\bshm[-_ ]size\b|--shm\b")
# What stands between an error and its frames printed after it: pybind11's `At:` (Triton's Python backend), and
# Python's own header when a title or a summary states the error first (round 7: AlphaPose's SemLock).
FRAMES_HEADERS = ("At:", "Traceback (most recent call last):")


def place_enospc(line: str, before: list[str], after: list[str] = ()) -> tuple[str, dict]:  # type: ignore[assignment]
    """ENOSPC, placed: a semaphore (SemLock, in /dev/shm), /dev/shm (a path, a shared-memory name or call), another
    path, torch.save, or nowhere known."""
    if MOUNTING.search(line):  # the runtime's mount(2) refused: an engine's failure, whatever it mounted (round 9)
        return "enospc-mount", {}
    near = " ".join([*before[-1:], line])  # a message wrapped over two lines ("…segment "/X"\n to N bytes: …")
    shm_names = SHM_NAME.findall(near)
    paths = [p.rstrip("/'\":,") for p in PATH.findall(line)
             if not TORCH_SEGMENT.fullmatch(p.rstrip("/'\":,>")) and not SOURCE_FILE.search(p)]
    shm_paths = [p for p in paths if p.startswith(SHM_PATHS)]
    other = [p for p in paths if not p.startswith(SHM_PATHS) and p not in shm_names]
    if shm_paths or TORCH_SEGMENT_IN_LINE.search(line) or shm_names:
        segment = re.search(r"<[^>]{0,200}torch_[^>]{0,200}>", line)
        where = shm_paths[0] if shm_paths else segment.group() if segment else shm_names[0] if shm_names else None
        return "enospc-shm", {"path": where}
    if other:
        return "enospc-elsewhere", {"path": other[0]}
    frames: list[str] = []
    for number, following in enumerate(after):  # the frames printed after the error, when the log has it first
        if number == 0 and following.strip() in FRAMES_HEADERS:  # a title, then the traceback it names (round 7)
            continue
        if not FRAME.match(following):
            break
        frames.append(following)
    context = "\n".join([*before[-CONTEXT_LINES:], line, *frames])
    if CHECKPOINT_CALL.search(context):
        return "enospc-checkpoint", {}
    if SEMLOCK_CALL.search(context):
        return "enospc-semlock", {}
    if SHM_CALL.search(context):
        return "enospc-shm", {"path": "a shared-memory segment"}
    writer = DISK_CALL.search(context)
    if writer:
        return "enospc-elsewhere", {"path": f"what {writer.group('writer')} writes (a cache or a temporary file)"}
    beside = next((text for text in [*before[-3:], line, *after[:3]]
                   if SHM_MENTION.search(text) and not DF_SHM.search(text)), None)  # df's line is read as a size
    return "enospc-unplaced", ({"shm_beside": beside.strip()} if beside is not None else {})


def enospc_is(kind: str):
    def where(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict | None:
        placed, details = place_enospc(line, before, after)
        return details if placed == kind else None
    return where


def groups(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    """The named groups, with `size` (and `requested`, `available`) as whole bytes."""
    details: dict[str, Any] = {k: v for k, v in match.groupdict().items() if v is not None}
    for key in ("size", "requested", "available"):
        if key in details:
            try:
                details[key] = int(details[key])
            except ValueError:  # "$N": the log does not state it
                del details[key]
    return details


def pool(library: str, what: str = "pool"):
    """The where reader of one library's shared-memory pool message: its groups, and who said it."""
    def where(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
        return {**groups(match, line, before, after), "library": library, "what": what}
    return where


OMPI_REQUESTED = re.compile(r"^\s{0,16}Space Requested: (?P<requested>\d{1,20}) B\b")


def ompi_backing_file(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict | None:
    """Open MPI's backing file without room: the space it asked for (its `Space Requested:` line, below), when
    the file is in /dev/shm (elsewhere it is that directory's disk, not this rule's)."""
    key = match.group("key")
    if not key.startswith(SHM_PATHS):
        return None
    details: dict[str, Any] = {"key": key, "library": "Open MPI", "what": "backing file", "reason": "not enough space"}
    for following in after[:8]:
        if m := OMPI_REQUESTED.match(following):
            details["requested"] = int(m.group("requested"))
            break
    return details


def errno_pool(library: str, what: str):
    """A pool message that gives its errno as a number (MPICH's): the number read as its reason."""
    def where(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
        details = {**groups(match, line, before, after), "library": library, "what": what}
        details["reason"] = os.strerror(int(details.pop("errno", "0")))  # NO_ROOM reads ENOSPC's and ENOMEM's words
        return details
    return where


def stated_size(number: str | None, unit: str) -> int | None:
    """A size a message states (`674.7` and `MB`), in bytes as parse_size reads it (MB as MiB: the larger); None
    when it is not one."""
    try:
        return parse_size(f"{number}{unit}") if number else None
    except ValueError:
        return None


def desktop_vm_ram(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    """Docker Desktop's check of /dev/shm against its VM's RAM, in MB."""
    return {"library": "Docker Desktop", "what": "VM memory", "reason": "not enough space",
            "available": stated_size(match.group("available_mb"), "mb"),
            "requested": stated_size(match.group("required_mb"), "mb")}


def shm_wanted(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    """The /dev/shm a program's own check asks for (`at least 674.7MB`), in bytes as `requested`."""
    requested = stated_size(match.groupdict().get("want"), match.groupdict().get("unit") or "")
    return {"requested": requested} if requested is not None else {}


def ray_asked(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    """What Ray's message says /dev/shm should hold: its `--shm-size=N.NNgb` (GiB: Ray divides by 2**30), the
    object store it was configured with (GB: it divides by 1e9), or the plasma store's request in bytes."""
    details = groups(match, line, before, after)
    asked = details.get("requested")
    if details.get("gb"):
        asked = int(float(details["gb"]) * GIB)
    elif details.get("store"):
        asked = int(float(details["store"]) * 10**9)
    return {**details, "asked": asked}


DF_SHM = re.compile(r"^\s{0,16}(?:shm|tmpfs|none)\s{1,40}(?P<size>[\d.,]{1,20}[KMGT]?)\s{1,40}\S{1,20}\s{1,40}"
                    r"\S{1,20}\s{1,40}(?P<use>\d{1,3})%\s{1,40}/dev/shm\s{0,16}$")


def df_size(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict | None:
    """A `df` (or `df -h`) line of /dev/shm: its size, and whether it is full."""
    size = parse_df_size(match.group("size"))
    if size is None:
        return None
    return {"size": size, "full": int(match.group("use")) >= 98}


DF_UNITS = {"": 1024, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_df_size(text: str) -> int | None:
    """`64M`, `1.0G` (df -h, powers of 1024) or `65536` (df's 1K blocks) in bytes."""
    m = re.fullmatch(r"(\d{1,20}(?:[.,]\d{1,6})?)([KMGT]?)", text)
    if not m:
        return None
    return int(float(m.group(1).replace(",", ".")) * DF_UNITS[m.group(2)])


def job_memory(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict | None:
    """Slurm's memory for the job (`#SBATCH --mem=256M`, scontrol's `MinMemoryNode=256M`): M is MiB there."""
    try:
        return {"bytes": parse_size(match.group("mem").upper())}
    except ValueError:
        return None


def exit_code_of(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict | None:
    """The exit status a line states; a negative one (Python's and torchrun's -N for signal N) as a shell's 128+N.
    None for what no exit status can be (above 255, below -64)."""
    code = int(match.group("code"))
    if not -64 <= code <= 255:
        return None
    return {"code": 128 - code if code < 0 else code}


def oom_by(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    if "slurm" in line or "srun" in line or "OUT_OF_ME" in line:
        return {"by": "slurm"}
    return {"by": "ray" if RAY_OOM.search(line) else ""}


# Ray's memory monitor (src/ray/raylet/node_manager.cc, python/ray/exceptions.py): it kills a task or actor when the
# node's memory goes above its threshold, before the kernel's OOM killer would.
RAY_OOM = re.compile(r"killed due to memory pressure \(OOM\)|ray\.exceptions\.OutOfMemoryError|node running low on memory")


def cuda_size(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    size = match.groupdict().get("size")
    return {"size_text": f", tried to allocate {size}" if size else ""}


def timeout_seconds(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    return {"seconds": float(match.group("seconds"))}


def eviction_resource(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    """The resource a kubelet eviction names (its node condition read as the resource: DiskPressure is disk), and
    for an emptyDir over its sizeLimit, the volume and the limit (in bytes as `requested`: the fix gives more)."""
    found = match.groupdict()
    resource = found.get("resource") or "ephemeral-storage"
    details: dict[str, Any] = {
        "resource": {"DiskPressure": "ephemeral-storage", "MemoryPressure": "memory"}.get(resource, resource)}
    if found.get("volume"):
        details["volume"] = found["volume"]
        try:
            details["requested"] = parse_quantity(found.get("limit") or "")
        except ValueError:
            pass
    return details


# The names manifests give the memory emptyDir they mount at /dev/shm, and kubectl describe's line for the mount.
SHM_VOLUME = re.compile(r"(?:d|dev-?)?shm|shared-?mem(?:ory)?|shmem")
SHM_MOUNT = re.compile(r"^\s{0,40}/dev/shm from (?P<volume>[\w.-]{1,253}) \(r[wo]")


def worker_pids(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    return {"pids": match.group("pids").strip()}


# The reason a library gives for a shared-memory call that failed: ENOSPC, ENOMEM and EBUSY are a tmpfs
# without room (a full /dev/shm, or its size reached); the others (EEXIST, EROFS, EACCES, EPERM, ENOENT) are
# not a question of size.
# shm_open(3) of a new name answering ENOENT: no /dev/shm (or none usable) to create it in.
NO_SHM = re.compile(r"No such file or directory|\bENOENT\b")
CREATED = re.compile(r"Unable to initialize shared memory key|could not create shared memory segment")
NO_ROOM = re.compile(r"No space left on device|Cannot allocate memory|Device or resource busy|\bENOSPC\b|"
                     r"\bENOMEM\b|\bEBUSY\b|[Oo]ut of memory|[Nn]ot enough (?:memory|space)|exceeds memory available")


# --- the decisions on the facts ------------------------------------------------------------------------------

def ended_well(ctx: Context, _: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if ev.exit_code != 0 or ev.oom_killed or ctx.first("oom-kill") is not None:  # OOMKilled with exit 0 happens
        return None
    noted = ctx.signals[0] if ctx.signals else None
    return ctx.make(NO_FAILURE, "none", "The container ended well (exit 0)" +
                    (", though its log shows the message below; it did not end the job." if noted else
                     " and its log shows no shared-memory failure."), None, noted)


def worker_bus_error(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    fix, needed = shm_advice(ctx)
    who = f"DataLoader worker {s.details['pid']}" if s.details.get("pid") else "A DataLoader worker"
    return ctx.make(SHARED_MEMORY, "worker-bus-error",
                    f"{who} died of SIGBUS (Bus error): it wrote to shared memory that the full /dev/shm tmpfs "
                    f"could not back with a page.", fix, s, needed)


SHM_POOL_KINDS = ("shm-pool",)


def shm_pool(ctx: Context, s: Signal | None) -> Diagnosis:
    """A library's shared-memory pool, segment, region or key (in /dev/shm) that could not be created or grown:
    for want of room (ENOSPC, ENOMEM, EBUSY, or a message that says so) it is /dev/shm's size, with the size the
    log states; for another reason (EEXIST, EROFS, EACCES) it is not."""
    assert s is not None
    library = s.details.get("library", "A library")
    reason = (s.details.get("reason") or "").strip().rstrip(";.")
    size = s.details.get("requested")
    what = f"its shared-memory {s.details.get('what', 'pool')}" + (f" of {format_size(size)}" if size else "")
    if reason and NO_SHM.search(reason) and CREATED.search(s.line):
        # shm_open(O_CREAT) of a key in /dev/shm answered ENOENT: the container has no usable /dev/shm for the
        # library's pool (round 6); the platform's /dev/shm, at least the size asked, is the knob.
        fix, needed = shm_advice(ctx)
        return ctx.make(SHARED_MEMORY, "shm-pool",
                        f"{library} could not create {what}: the container's /dev/shm was not there to hold it "
                        f"({reason}).", fix, s, needed)
    if reason and not NO_ROOM.search(reason):
        return ctx.make(NOT_SHARED_MEMORY, "shm-file",
                        f"{library} could not create {what} in /dev/shm, and not for want of room: {reason}.",
                        fixes.shm_file_fix() + ".", s)
    fix, needed = shm_advice(ctx)
    why = f" ({reason})" if reason else ""
    return ctx.make(SHARED_MEMORY, "shm-pool",
                    f"{library} could not create or grow {what}: /dev/shm had no room for it{why}.", fix, s, needed)


NCCL_SPACE_KINDS = ("nccl-call", "nccl-extend", "nccl-create", "nccl-file")


def nccl(ctx: Context, _: Signal | None) -> Diagnosis | None:
    """NCCL's shared-memory transport: a segment that did not fit (ENOSPC) is /dev/shm; others are not its size."""
    ev = ctx.ev
    said = [s for s in ctx.all(*NCCL_SPACE_KINDS) if s.details.get("error")]
    space = [s for s in said if ENOSPC.search(s.details["error"])]
    create = ctx.first("nccl-create", "nccl-extend")
    cuda = ctx.first("nccl-cuda-failure")
    other_reason = next((s for s in said if not ENOSPC.search(s.details["error"])), None)
    if space or (create and not cuda and other_reason is None):
        segment = create or space[0]
        size = segment.details.get("size")
        where = " " + segment.details["path"] if segment.details.get("path") else ""
        had = f"the {format_size(ev.shm_size)} of /dev/shm" if ev.shm_size is not None else "/dev/shm"
        if ev.job is not None:
            needed: int | None = sizing.shm_size(ev.job)
            assert needed is not None
            room = (f" on top of the {format_size(needed)} the DataLoader needs: "
                    f"{shm_fixes(Want(size=needed), ctx.platforms, sizing.slurm_memory_needed(ev.job))}")
        else:
            needed = None
            want = advice.evidence_want(ctx, size)
            room = f": {shm_fixes(want, ctx.platforms)}. {advice.DESCRIBE}"
        fix = ("give /dev/shm room for NCCL's segments (one per pair of local ranks and channel"
               + (f", {format_size(size)} each here" if size else "") + f"){room} Or set NCCL_SHM_DISABLE=1 "
               f"(NCCL then goes through the network or P2P, slower).")
        return ctx.make(SHARED_MEMORY if space else LIKELY, "nccl-shm",
                        f"NCCL could not create its shared-memory segment{where}"
                        + (f" of {format_size(size)}" if size else "") + f": {had} had no room for it"
                        + ("" if space else " (the message gives no reason; a full /dev/shm is the usual one)") + ".",
                        fix, segment if not space else space[0], needed)
    if create and cuda:  # a CUDA failure: not a question of space
        return ctx.make(UNDETERMINED, "nccl-shm-cuda",
                        "NCCL could not create a shared-memory segment, and it says why: a CUDA failure "
                        f"({cuda.details.get('error')}), not a full /dev/shm.",
                        "see NCCL's troubleshooting guide; NCCL_SHM_DISABLE=1 avoids the shared-memory transport.",
                        create)
    if create and other_reason is not None:  # shm_open, open, mmap refused, not for want of space
        return ctx.make(UNDETERMINED, "nccl-shm-file",
                        f"NCCL could not create its shared-memory segment, and not for want of space: "
                        f"{other_reason.details.get('call', 'a call')} failed with "
                        f"{other_reason.details['error'].strip()}: /dev/shm is not writable, missing or out of "
                        f"inodes, so a bigger one would not help.",
                        "make /dev/shm a writable tmpfs for the job's user (its mode is 1777), or set "
                        "NCCL_SHM_DISABLE=1.", other_reason)
    if s := ctx.first("nccl-file"):
        return ctx.make(UNDETERMINED, "nccl-shm-file",
                        f"NCCL could not create its file {s.details.get('path')} in /dev/shm, and not for want of "
                        f"space: /dev/shm is missing, read-only or out of inodes.",
                        "mount a writable tmpfs at /dev/shm, or set NCCL_SHM_DISABLE=1.", s)
    if s := ctx.first("nccl-attach"):
        return ctx.make(UNDETERMINED, "nccl-shm-attach",
                        "An NCCL rank could not attach to another rank's shared-memory segment "
                        f"({s.details.get('error', 'no reason given')}): the segment was missing, not too big, so "
                        f"the size of /dev/shm is not the cause (ranks in different IPC namespaces, or a segment "
                        f"removed).", "run the ranks of a node in one container (one /dev/shm), or set "
                        "NCCL_SHM_DISABLE=1.", s)
    if s := ctx.first("nccl-unlink"):
        return ctx.make(UNDETERMINED, "nccl-shm-removed",
                        f"NCCL's segment {s.details.get('path', '')} was removed from /dev/shm under it (its unlink "
                        f"failed: it was gone): something cleans /dev/shm while the job runs. Not its size.",
                        "set RemoveIPC=no in /etc/systemd/logind.conf (systemd removes a user's segments when the "
                        "user's last session ends), and clean /dev/shm only after the job (shmguard clean in the "
                        "Epilog).", s)
    return None


SHM_IN_LOG = re.compile(r"/dev/shm|</?torch_\d{1,10}_")


def oom(ctx: Context, _: Signal | None) -> Diagnosis | None:
    """An OOM kill (the flag, or the kernel's, Slurm's or the kubelet's words in the log): did /dev/shm's pages
    take the memory? Only when its peak, its size, or the log says it could have."""
    ev = ctx.ev
    said = ctx.first("oom-kill")
    if not ev.oom_killed and said is None:
        return None
    slurm = "slurm" in ctx.platforms or (said is not None and "slurm" in said.details.get("by", ""))
    if said is not None and said.details.get("by") == "ray" and not ev.oom_killed:
        return ctx.make(UNDETERMINED, "oom",
                        "Ray's memory monitor killed a task or actor: the node's memory was above its threshold "
                        "(the processes', and /dev/shm's pages, Ray's object store among them; nothing here says "
                        "which filled it). Not /dev/shm's size.", fixes.ray_oom_fix() + ".", said)
    fix, needed = memory_advice(ev, ctx.platforms)
    large_tmpfs = ev.shm_unbounded or (ev.memory_limit is not None and ev.shm_size is not None
                                       and ev.shm_size * 2 >= ev.memory_limit)
    shm_filled = (ev.shm_peak is not None and ev.memory_limit is not None and ev.shm_peak * 2 >= ev.memory_limit)
    shm_line = next((Signal("shm-use", line) for line in ctx.marks.get("shm-use", ())
                     if not DF_SHM.search(line) and (said is None or line != said.line)), None)
    limit = (f"its memory limit of {format_size(ev.memory_limit)}" if ev.memory_limit is not None
             else "the job's memory (--mem)" if slurm else "its memory")
    who = "Slurm's cgroup out-of-memory handler ended the job" if slurm else "The kernel's OOM killer ended the container"
    if shm_filled or large_tmpfs or (slurm and shm_line is not None):
        if slurm and shm_line is not None and not shm_filled:
            why = (f"the log shows the job using /dev/shm ({advice.quote(shm_line.line, 120)}), and Slurm charges "
                   f"its pages to the job; the tmpfs's own size does not limit it")
        else:
            tmpfs = ("/dev/shm has no size limit" if ev.shm_unbounded else
                     f"/dev/shm ({format_size(ev.shm_size or 0)}) can hold half the limit or more")
            why = (f"/dev/shm held {format_size(ev.shm_peak or 0)} of it" if shm_filled else tmpfs)
        shm_fix = ""
        if ev.job is not None and not slurm:  # under Slurm the tmpfs's size caps nothing: no cap to give
            shm_needed = sizing.shm_size(ev.job)
            if ev.shm_unbounded or (ev.shm_size is not None and ev.shm_size > shm_needed):
                shm_fix = (f" Cap /dev/shm at what the job needs, {format_size(shm_needed)} "
                           f"({shm_fixes(Want(size=shm_needed), ctx.platforms)}), so that leaked segments fail as "
                           f"a clear shm error and not as an OOM kill.")
        if slurm:
            above = f" above {slurm_size(ev.memory_limit)}" if ev.memory_limit is not None else "=…"
            default = (f"#SBATCH --mem{above}, with room for what the job keeps in /dev/shm on top of its processes, "
                       f"or keep less there. {advice.DESCRIBE}")
        else:
            default = ("raise the memory limit so it holds /dev/shm's pages and the processes, or describe the job "
                       "(--workers, --batch-size, --sample-shape) to get the size.")
        return ctx.make(SHARED_MEMORY if shm_filled else LIKELY, "oom-shm",
                        f"{who}: {limit} was full, and tmpfs pages count against it: {why}.",
                        ((fix or default) + shm_fix).strip(), said or ctx.first("worker-killed") or shm_line,
                        memory_needed=needed)
    small = (ev.shm_peak is not None) or (ev.shm_size is not None and ev.memory_limit is not None)
    above = f" above {slurm_size(ev.memory_limit)}" if ev.memory_limit is not None else "=…"
    default = (f"#SBATCH --mem{above}, or lower what the processes hold; /dev/shm's pages count against it "
               f"too." if slurm else
               "raise the memory limit, or lower what the processes hold (batch size, workers, caches).")
    return ctx.make(NOT_SHARED_MEMORY if small else UNDETERMINED, "oom",
                    f"{who}: {limit} was full"
                    + (f", with /dev/shm at {format_size(ev.shm_peak)}: the processes' own memory filled it"
                       if ev.shm_peak is not None else
                       (f"; /dev/shm ({format_size(ev.shm_size or 0)}) is too small to be what filled it"
                        if small else "; nothing here says whether /dev/shm's pages were part of it")) + ".",
                    fix or default, said or ctx.first("worker-killed"), memory_needed=needed)


SIGSEGV_EXIT = 128 + 11


def segfault(ctx: Context, s: Signal | None) -> Diagnosis | None:
    """SIGSEGV, by its name or its number in any form: a crash in native code, not /dev/shm's size."""
    if s is None and ctx.ev.exit_code != SIGSEGV_EXIT:
        return None
    how = "exit status 139: SIGSEGV" if s is None else "a segmentation fault"
    return ctx.make(NOT_SHARED_MEMORY, "segfault",
                    f"A process died of SIGSEGV ({how}): a crash in native code (a library, a mismatched wheel) or "
                    f"corrupt input, not /dev/shm's size.", fixes.segfault_fix() + ".", s)


def evicted(ctx: Context, s: Signal | None) -> Diagnosis:
    """A kubelet eviction: for disk, not /dev/shm; for memory, /dev/shm's pages (a memory emptyDir) count in the
    pod's usage the kubelet ranks by, so nothing here says whether they were part of it."""
    assert s is not None
    resource = s.details.get("resource", "ephemeral-storage")
    volume = s.details.get("volume")
    mounted = {m.group("volume") for line in ctx.marks.get("shm-mount", ()) if (m := SHM_MOUNT.search(line))}
    if volume is not None and (SHM_VOLUME.fullmatch(volume) or volume in mounted):
        fix, needed = shm_advice(ctx, "the pod")
        limit = s.details.get("requested")
        return ctx.make(SHARED_MEMORY, "shm-evicted",
                        f"The kubelet evicted the pod: its emptyDir \"{volume}\", its /dev/shm, held more than its "
                        f"sizeLimit" + (f" ({format_size(limit)})" if isinstance(limit, int) else "") +
                        ": the job's shared memory outgrew the size it was given.", fix, s, needed)
    if resource == "memory":
        return ctx.make(UNDETERMINED, "evicted",
                        "The kubelet evicted the pod: the node ran short of memory, and the pod used more than it "
                        "asked for (its processes, and /dev/shm's pages when /dev/shm is a memory emptyDir; nothing "
                        "here says which). Not /dev/shm's size.", fixes.eviction_fix(resource) + ".", s)
    return ctx.make(NOT_SHARED_MEMORY, "evicted",
                    f"The kubelet evicted the pod: the node ran short of {resource}, and the pod used more of it "
                    f"than it asked for. Not /dev/shm's size.", fixes.eviction_fix(resource) + ".", s)


def command_not_found(ctx: Context, s: Signal | None) -> Diagnosis | None:
    if ctx.ev.exit_code != 127:
        return None
    command = ctx.ev.command or "its command"
    return ctx.make(NOT_SHARED_MEMORY, "command-not-found",
                    f"The container's command was not found in the image (exit 127): {command}.",
                    "check the command after `--` and the image's PATH.", s)


def disk_full(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    where = (f"on the filesystem of {s.details['path']}" if s.kind == "enospc-elsewhere"
             else "while torch.save wrote a checkpoint")
    return ctx.make(NOT_SHARED_MEMORY, "disk-full",
                    f"A disk filled up {where} (No space left on device); that is not /dev/shm, so a bigger shm "
                    f"would not help.", "free space on that filesystem or write elsewhere (df -h shows which is full).", s)


# Where /dev/shm is small enough to run out: a container or a cluster's job. DataLoader workers gone without a word
# are likely shared memory only when the log shows one, or says it used shared memory (round 8, from held-out-7's
# misses: a dataset's bug and an OOM said in the same words). A bare SIGBUS is not gated so: the answered threads
# of held-out-4 and held-out-7 showing only `Bus error (core dumped)` were /dev/shm in a container the log did not
# name.


def contained(ctx: Context) -> bool:
    """The evidence or the log shows a container or a cluster's job, or the log names /dev/shm or torch's segments."""
    ev = ctx.ev
    return (ev.platform is not None or ev.shm_size is not None or ev.shm_peak is not None or ev.shm_unbounded
            or bool(seen_in(ctx.marks) & set(CONTAINED))
            or bool(ctx.marks.get("container-words")) or bool(ctx.marks.get("shm-use")))


def sigbus(ctx: Context, _: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    bus = ctx.first("bus-error")
    if ev.exit_code != SIGBUS_EXIT and bus is None:
        return None
    container = ev.platform is not None or (ev.exit_code is not None and "exit_code" not in ctx.seen)
    what = ("The container " if container else "A process ") + (
        "died of SIGBUS (exit 135)" if ev.exit_code == SIGBUS_EXIT else "reported a Bus error")
    if peak_low(ev):
        return ctx.make(NOT_SHARED_MEMORY, "sigbus",
                        f"{what}, but /dev/shm never ran out (peak {peak_of(ev)}): the SIGBUS came "
                        f"from elsewhere (a memory-mapped file that was truncated, an unaligned access, a hardware "
                        f"fault).", "look at the process that crashed (a core dump, or run it under faulthandler).",
                        bus)
    fix, needed = shm_advice(ctx)
    confirmed = ev.shm_peak is not None
    return ctx.make(SHARED_MEMORY if confirmed else LIKELY, "sigbus",
                    f"{what}. In a container that is most often a process touching shared memory "
                    f"that the full /dev/shm tmpfs cannot back" +
                    (f" (/dev/shm peaked at {peak_of(ev)})." if confirmed else
                     "; nothing here proves it (a truncated memory-mapped file does the same)."), fix, bus, needed)


def workers(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    ev = ctx.ev
    if s.kind == "worker-killed":
        fix, needed = memory_advice(ev, ctx.platforms)
        return ctx.make(NOT_SHARED_MEMORY if not ev.shm_unbounded else LIKELY, "worker-killed",
                        f"DataLoader worker {s.details['pid']} was killed by SIGKILL: the kernel's OOM killer, most "
                        f"likely, inside a memory limit that cannot hold the workers" +
                        (" and the unbounded /dev/shm" if ev.shm_unbounded else "") + ".",
                        fix or "raise the memory limit, or lower num_workers or batch_size.", s, memory_needed=needed)
    if peak_low(ev):
        return ctx.make(UNDETERMINED, "workers-exited",
                        f"DataLoader workers ({s.details['pids']}) exited unexpectedly, while /dev/shm stayed low "
                        f"(peak {peak_of(ev)}): not shared memory; the workers' own error is in the log above this "
                        f"line, or they were killed.", None, s)
    if not ctx.dev_shm:
        return ctx.make(UNDETERMINED, "workers-exited",
                        f"DataLoader workers ({s.details['pids']}) exited unexpectedly on a platform without "
                        f"/dev/shm: their own error (often the script started again by spawn, without an "
                        f"`if __name__ == '__main__':` guard) is lost.",
                        fixes.no_dev_shm_fix("run the loop under `if __name__ == '__main__':`") + ".", s)
    if not contained(ctx):
        return ctx.make(UNDETERMINED, "workers-exited",
                        f"DataLoader workers ({s.details['pids']}) exited unexpectedly without a Python error, and "
                        f"nothing here shows a container or shared memory in use: a worker killed for memory, an "
                        f"error in the dataset that killed the process, or a SIGBUS; in a container, most often a "
                        f"full /dev/shm.", fixes.workers_exited_fix() + ".", s)
    fix, shm_needed = shm_advice(ctx)
    return ctx.make(LIKELY, "workers-exited",
                    f"DataLoader workers ({s.details['pids']}) exited unexpectedly without a Python error: most often "
                    f"a worker that died of SIGBUS in a full /dev/shm, sometimes a worker killed for memory.",
                    fix, s, shm_needed)


# A line that says /dev/shm (or shared memory) was full, in any words a person or a tool puts it (round 7:
# "/dev/shm 如果满了" beside an unplaced ENOSPC); df's own line is DF_SHM.
SHM_SAID_FULL = re.compile(
    r"/dev/shm\b[^\n]{0,80}?(?:\b(?:is|was|gets|got|became|becomes|being|are) (?:full|filled|exhausted)\b|满|"
    r"\bran out\b|\bout of (?:space|room)\b|\bno (?:space|room) left\b|\b(?:1|9[89])\d?% (?:full|used)\b)|"
    r"\b(?:[Ff]ull|[Ff]illed up|[Ee]xhausted|[Oo]ut of space|[Rr]an out)[^\n]{0,40}?/dev/shm\b|"
    r"\b(?:shm|[Ss]hared memory) (?:is|was|gets|got|became|becomes) (?:full|filled up|exhausted)\b")


# A traceback through multiprocessing's pickling for a queue or a pipe (ForkingPickler), or torch's reducers: torch
# moves each tensor it sends into /dev/shm there, so an ENOSPC the log cannot place is that (round 7, from
# held-out's nnunet-2331).
SHM_PICKLING = re.compile(r"\b_ForkingPickler\.dumps\(|multiprocessing/reduction\.py\W{1,4}(?:line \d{1,6}, in dumps|\d{1,6})|"
                          r"torch/multiprocessing/reductions\.py")


UNPLACED_SHM_WITNESSES = (
    ("shm-beside", "and the lines around it name shared memory ({}): most likely it is /dev/shm that had no room "
                   "left."),
    ("shm-pickling", "while multiprocessing pickled data for another process ({}): torch moves each tensor it sends "
                     "into /dev/shm there, so most likely /dev/shm had no room left."),
    ("shm-said-full", "and the log says /dev/shm was full ({}): most likely it is /dev/shm that had no room left."),
)


def enospc_unplaced(ctx: Context, s: Signal | None) -> Diagnosis:
    ev = ctx.ev
    if peak_full(ev):  # watched full (run held at its ceiling): the space that ran out is /dev/shm's
        fix, needed = shm_advice(ctx)
        return ctx.make(SHARED_MEMORY, "shm-enospc",
                        f"Something ran out of space (No space left on device) while /dev/shm was full (peak "
                        f"{peak_of(ev)}): it is /dev/shm that had no room left.", fix, s, needed)
    full = next((df for df in ctx.all("df-shm") if df.details.get("full")), None)
    if full is not None and not peak_low(ev):  # the log's own df shows /dev/shm full
        fix, needed = shm_advice(ctx)
        return ctx.make(LIKELY, "shm-enospc",
                        f"Something ran out of space (No space left on device), and df in the log shows /dev/shm "
                        f"full ({format_size(full.details['size'])}, 98% used or more): most likely it is /dev/shm "
                        f"that had no room left.", fix, s, needed)
    disk = next((line for line in ctx.marks.get("df-full-disk", ())), None)
    if disk is not None and not any(df.details.get("full") for df in ctx.all("df-shm")):
        return ctx.make(NOT_SHARED_MEMORY, "disk-full",
                        f"Something ran out of space (No space left on device), and df in the log shows a disk full "
                        f"({advice.quote(disk.strip(), 120)}), not /dev/shm.",
                        "free space on that filesystem or write elsewhere.", s)
    roomy = any(not df.details.get("full") for df in ctx.all("df-shm"))  # df says /dev/shm had room: not it
    beside = (s.details["shm_beside"],) if s is not None and s.details.get("shm_beside") else ()
    for mark, why in () if roomy else UNPLACED_SHM_WITNESSES:  # a line that places it in /dev/shm (rounds 7, 9)
        witness = beside if mark == "shm-beside" else ctx.marks.get(mark, ())
        if witness and not peak_low(ev):
            fix, needed = shm_advice(ctx)
            return ctx.make(LIKELY, "shm-enospc", "Something ran out of space (No space left on device) "
                            + why.format(advice.quote(witness[0].strip(), 120)), fix, s, needed)
    if peak_low(ev):
        return ctx.make(NOT_SHARED_MEMORY, "disk-full",
                        f"Something ran out of space (No space left on device), but not /dev/shm: it stayed under "
                        f"half full (peak {peak_of(ev)}).",
                        "find the full filesystem with df -h in the container and free space there.", s)
    return ctx.make(UNDETERMINED, "enospc",
                    "Something ran out of space (No space left on device), and nothing in the log says it was "
                    "/dev/shm" + (f" (its peak was {peak_of(ev)})"
                                  if ev.shm_peak is not None and ev.shm_size is not None else "") + ".",
                    "find the full filesystem with df -h in the container; if it is /dev/shm, give it more.", s)


def loader_timeout(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    ev = ctx.ev
    waited = f"no batch came within {s.details['seconds']:g} s"
    if not ctx.dev_shm:
        return ctx.make(NOT_SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}) on a platform without /dev/shm (the log shows Windows "
                        f"or macOS): a slow or stuck worker (its data source, a lock, spawn's start-up), not "
                        f"shared memory's size.",
                        fixes.no_dev_shm_fix("raise DataLoader(timeout=…) if the workers are only slow") + ".", s)
    if peak_full(ev):
        fix, needed = shm_advice(ctx)
        return ctx.make(SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}) while /dev/shm was full (peak {peak_of(ev)}): a "
                        f"worker's batch that could not be written to it was lost, and the trainer waited for it.",
                        fix, s, needed)
    if peak_low(ev):
        return ctx.make(NOT_SHARED_MEMORY, "loader-timeout",
                        f"The DataLoader timed out ({waited}), but /dev/shm stayed under half full (peak "
                        f"{peak_of(ev)}): a slow or stuck worker (its data source, a lock), not shared memory.",
                        "look at what the workers wait on (py-spy dump --pid of a worker).", s)
    fix, needed = shm_advice(ctx)
    return ctx.make(LIKELY if ev.shm_peak is None else UNDETERMINED, "loader-timeout",
                    f"The DataLoader timed out ({waited}). A full /dev/shm does that when a worker's batch cannot "
                    f"be written and is lost; so does a slow or stuck worker" +
                    ("; nothing here says which." if ev.shm_peak is None else f" (/dev/shm peaked at {peak_of(ev)})."),
                    fix, s, needed)


def ray_object_store(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    # Ray's own figure is the store it wants; with the job described, its DataLoader's shm comes on top.
    asked = s.details.get("asked")
    needed = None
    want = advice.evidence_want(ctx)
    if ctx.ev.job is not None and isinstance(asked, int):
        needed = sizing.pod_shm_size(ctx.ev.job, extra=asked)
        want = Want(size=needed, at_least=True)
    platforms = ctx.platforms if "ray" in ctx.platforms else ("ray", *ctx.platforms)
    fix = shm_fixes(want, platforms) + "."
    if s.kind == "ray-object-store-crash":
        summary = ("Ray refused to start: the object store it was configured with does not fit in /dev/shm"
                   + (f" ({s.details['shm']} GB)" if s.details.get("shm") else "") + ".")
    elif s.kind == "ray-store-full":
        summary = (f"Ray's object store had no room for an object of {format_size(asked or 0)}: the store (in "
                   f"/dev/shm) is smaller than what the job keeps in it at once (objects in use cannot be spilled "
                   f"to disk), or than the object itself.")
    elif s.kind == "ray-plasma-request":
        summary = (f"Ray's object store (plasma) asked for {format_size(asked or 0)} of /dev/shm and only "
                   f"{format_size(s.details.get('available') or 0)} was free: it stops, or runs with a smaller store "
                   f"that fills up (objects then spill to disk, or a put fails).")
    else:
        available = s.details.get("available")
        summary = ("Ray put its object store in /tmp instead of /dev/shm, because /dev/shm had only "
                   + (format_size(int(available)) if available else "a little") + " free. This is a warning, "
                   "not a crash: the job runs, slower (objects go through the disk). If it died, the cause is "
                   "elsewhere in the log.")
    return ctx.make(SHARED_MEMORY, "ray-object-store", summary, fix, s, needed)


def open_files(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    named = ctx.first("open-files")
    if named is None:  # torch's shm_open failed and said no more: most often the open-files limit
        return ctx.make(UNDETERMINED, "open-files",
                        "PyTorch could not open a shared-memory segment and does not say why; with /dev/shm "
                        "mounted, that is most often the open-files limit (each tensor shared by descriptor holds "
                        "one), not /dev/shm's size.", nofile_advice(ctx), s)
    return ctx.make(NOT_SHARED_MEMORY, "open-files",
                    "The processes ran out of open files (EMFILE): each tensor a DataLoader worker shares by "
                    "descriptor holds one until the trainer takes it. Not /dev/shm's size.", nofile_advice(ctx), named)


def shm_full(ctx: Context, s: Signal | None) -> Diagnosis | None:
    """/dev/shm filled up: watched by `run` at its ceiling before a failure, or a df line in the log at 98% or
    more (a log that shows nothing else failing: the full tmpfs is then the likeliest trouble)."""
    ev = ctx.ev
    if peak_full(ev) and ev.exit_code not in (None, 0):
        fix, needed = shm_advice(ctx)
        return ctx.make(LIKELY, "shm-full",
                        f"The container exited {ev.exit_code} after /dev/shm filled up (peak {peak_of(ev)}); its log "
                        f"names no shared-memory error, but a full /dev/shm is the likeliest cause.", fix, None, needed)
    full = next((d for d in ctx.all("df-shm") if d.details.get("full")), None)
    if full is None or ev.exit_code == 0 or ev.running:
        return None
    fix, needed = shm_advice(ctx)
    return ctx.make(LIKELY, "shm-full",
                    f"df in the log shows /dev/shm full ({format_size(full.details['size'])}, 98% used or more): "
                    f"whatever puts its segments there (PyTorch's workers, an inference server's pool, NCCL) "
                    f"fails or hangs for want of room.", fix, full, needed)


def killed(ctx: Context, s: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if s is None and ev.exit_code != SIGKILL_EXIT:
        return None
    report = ctx.first("kernel-memory")
    if report is not None:  # the kernel's memory report beside the SIGKILL: its OOM killer (round 6)
        fix, _ = memory_advice(ev, ctx.platforms)
        what = f"killed by SIGKILL ({s.line.strip()[:120]})" if s is not None else "killed (exit 137, SIGKILL)"
        return ctx.make(UNDETERMINED, "oom",
                        f"A process was {what}, and the kernel printed its memory report ({report.line.strip()[:120]})"
                        f": the kernel's OOM killer, which prints it when it kills. The memory ran out (the "
                        f"processes', and /dev/shm's pages count in it); nothing here says /dev/shm's size did it.",
                        fix, report)
    if ev.exit_code == SIGKILL_EXIT and s is None and "exit_code" not in ctx.seen:
        return ctx.make(UNDETERMINED, "killed",
                        "The container was killed (SIGKILL, exit 137) but not by the OOM killer: docker kill or "
                        "stop, an eviction, or an engine restart. Not shared memory.", None)
    what = (f"A process was killed by SIGKILL ({s.line.strip()[:120]})" if s is not None
            else "The container ended with exit code 137 (SIGKILL)")
    return ctx.make(UNDETERMINED, "killed",
                    f"{what}: most often the kernel's OOM killer (the host's memory, or a memory limit, which "
                    f"/dev/shm's pages count against), else a kill from outside (docker kill, an eviction, a "
                    f"scheduler's time limit). Nothing here says it was /dev/shm's size.",
                    "look for the OOM kill (dmesg -T | grep -i oom, kubectl describe pod, sacct -j JOB) and raise "
                    "the memory limit if it is one.", s)


def unknown_failure(ctx: Context, s: Signal | None) -> Diagnosis | None:
    ev = ctx.ev
    if s is not None:
        return ctx.make(UNDETERMINED, "unknown",
                        "The log shows a failure (below), and nothing in it points at shared memory: no SIGBUS, no "
                        "shared-memory message, no OOM kill.", None, s)
    if ev.running or ev.exit_code is None:
        return ctx.make(NO_FAILURE, "none", "The container is still running and its log shows no failure."
                        if ev.running else "The log shows no failure.")
    return ctx.make(UNDETERMINED, "unknown",
                    f"The container exited {ev.exit_code}, and nothing in the evidence points at shared memory: no "
                    f"SIGBUS, no shared-memory message, no OOM kill. Its own error is in the log.")


# Chrome and Chromium keep their renderers' shared memory in /dev/shm (base's shared-memory regions on Linux); with
# Docker's 64 MB it fails to map one and dies as out of memory, and the driver sees a crashed tab
# (docs/design/explain-signals.md). The docker-selenium images ask for 2 GB ("known to work well").
BROWSER_SHM = 2 * GIB


def browser(ctx: Context, s: Signal | None) -> Diagnosis:
    """A browser's renderer or tab that crashed, or Chrome's own out-of-memory at a shared-memory allocation: in a
    container that is /dev/shm, most of the time; a real memory limit does the same, hence likely."""
    assert s is not None
    if not ctx.dev_shm:
        return ctx.make(UNDETERMINED, "unknown",
                        "A browser's page or renderer crashed on a platform without /dev/shm (the log shows Windows "
                        "or macOS): its own crash report says why, not /dev/shm's size.", None, s)
    asked = s.details.get("requested")
    size = max(BROWSER_SHM, sizing.shm_size_for(asked + 1)) if isinstance(asked, int) else BROWSER_SHM
    shm = shm_fixes(Want(size=size, at_least=True), ctx.platforms)
    what = (f"Chrome could not allocate {format_size(asked)} (its shared memory for a renderer)" if asked
            else f"The browser's page or renderer crashed ({advice.quote(s.line.strip(), 120)})")
    return ctx.make(LIKELY, "browser-shm",
                    f"{what}. In a container that is most often /dev/shm: Chrome keeps its renderers' shared memory "
                    f"there, and Docker's 64 MB fills with one busy page; a memory limit that is too low does the "
                    f"same.", fixes.chrome_shm_fix(shm) + ".", s)


# NCCL's ncclSystemError, said with no reason (its WARN lines not in the log): a system call failed. In a
# container the usual one is its shared-memory transport's segment in a small /dev/shm (the NCCL troubleshooting
# guide's "Shared memory" section); a reason the log does give (its "Last error:", a WARN line) decides instead.
NCCL_NETWORK_REASON = re.compile(r"[Ss]ocket|[Cc]onnect|NET/|[Aa]ddress family|[Nn]etwork|bootstrap")
NCCL_SHM_REASON = re.compile(r"shared memory|/dev/shm|posix_fallocate|shm_open|[Nn]o space left|\bshm\b")


def nccl_system_error(ctx: Context, s: Signal | None) -> Diagnosis:
    assert s is not None
    reasons = [line for line in (s.details.get("last", ""), *ctx.marks.get("nccl-warn", ()))
               if line and not NCCL_SHM_REASON.search(line)]
    # the network's reason first: NCCL warns of an InfiniBand library it did not find before the socket that failed
    network = next((line for line in reasons if NCCL_NETWORK_REASON.search(line)), None)
    if network is not None:
        return ctx.make(NOT_SHARED_MEMORY, "connection",
                        f"NCCL failed with a system error, and says it was the network: "
                        f"{advice.quote(network.strip(), 160)}. Not /dev/shm.",
                        "check the interfaces NCCL may use (NCCL_SOCKET_IFNAME, docker run --network host for a "
                        "container's), and that the ranks reach each other on them.", s)
    if reasons:
        return ctx.make(UNDETERMINED, "unknown",
                        f"NCCL failed with a system error, and says which call failed: "
                        f"{advice.quote(reasons[0].strip(), 160)}. Not /dev/shm's size.",
                        "follow that call's error (NCCL_DEBUG=INFO prints each rank's; NCCL's troubleshooting guide "
                        "lists them).", s)
    fix, needed = shm_advice(ctx)
    return ctx.make(LIKELY, "nccl-shm",
                    "NCCL failed with an unhandled system error and the log keeps no reason: in a container the "
                    "usual one is its shared-memory transport, whose segments did not fit in /dev/shm (NCCL_DEBUG=INFO "
                    "names the call that failed).",
                    f"{fix} Or set NCCL_SHM_DISABLE=1 (slower: NCCL then goes through P2P or the network); "
                    f"docker run --ipc=host shares the host's /dev/shm.", s, needed)


def nccl_last_error(match: re.Match[str], line: str, before: list[str], after: list[str]) -> dict:
    """NCCL 2.13+ prints `Last error:` and the call's message on the lines after ncclSystemError's text."""
    for number, following in enumerate(after[:4]):
        if following.strip() == "Last error:" and number + 1 < len(after):
            return {"last": after[number + 1]}
    return {}
