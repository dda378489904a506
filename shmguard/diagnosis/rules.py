"""The signatures: one ordered table of rules, each with its patterns, its verdict, its fix and where it came from.

RULES is one ordered table. Its order is the diagnosis's priority: the first rule
that fires gives the answer, so messages that can only mean a full /dev/shm come
first, then the facts (an OOM kill), then the look-alikes, then the symptoms that are
typical of shared memory but prove nothing. The same order classifies each log line:
a line is the kind of the first rule whose pattern matches it.

A new signature is one entry here and one log it came from (its `case`: a log in
tests/data/explain/, or the test that holds it), and, when it reproduces a library's
own message, that library's source (`source`). An entry with a fixed verdict needs no
code: `summary` is formatted with the pattern's named groups, `fix` is a text or a
function of the context. Verdicts that depend on the facts have a decide function in
shmguard.diagnosis.decisions; the machinery that reads a log is
shmguard.diagnosis.machinery. Every pattern is linear by construction (its repeats
bounded, none nested: machinery.pattern_faults), and tests/unit/diagnosis/test_rules.py
holds each to it.
"""

from __future__ import annotations

from shmguard import fixes
from shmguard.diagnosis import decisions as d
from shmguard.diagnosis.advice import shm_advice
from shmguard.diagnosis.machinery import Rule, compile_all, wrapped
from shmguard.diagnosis.records import (
    CRASH_ALLOC,
    CRASH_BUS,
    CRASH_ENOSPC,
    CRASH_TIMEOUT,
    LIKELY,
    NOT_SHARED_MEMORY,
    SHARED_MEMORY,
    UNDETERMINED,
)

PUBLIC = "tests/data/explain/public/"
JUDGED = "tests/data/explain/judged/development/"
# Round 1's held-out logs: written from in round 2 only (tests/data/explain/judged/SPLIT.md).
ROUND_1 = "tests/data/explain/judged/held-out/"
# Round 3's held-out logs: written from in round 4 only.
ROUND_3 = "tests/data/explain/judged/held-out-3/"
# Round 4's held-out logs: written from in round 5 only.
ROUND_4 = "tests/data/explain/judged/held-out-4/"
TESTS = "tests/unit/diagnosis/test_init.py::"
RULE_TESTS = "tests/unit/diagnosis/test_rules.py::"

ENOSPC = (d.ENOSPC,)


def signalled(number: int) -> str:
    """A signal by its number in a runner's words: GNU time's and make's `Command terminated by signal 9`, `killed
    by signal 15` (round 11)."""
    return rf"\b(?:terminated|killed|died|exited) (?:by|with|on|from) signal {number}\b"
# Lines the rules look for beside the signals: where the job used /dev/shm (for an OOM kill under Slurm).
MARKERS = {"shm-use": (d.SHM_IN_LOG,), "shm-mount": (d.SHM_MOUNT,), "shm-said-full": (d.SHM_SAID_FULL,),
           "shm-pickling": (d.SHM_PICKLING,),
           # df's line of a disk 98-100% used (not /dev/shm's, not a snap's squashfs, always full; round 11)
           "df-full-disk": compile_all(r"^\s{0,16}/dev/\S{1,60}\s{1,40}\S{1,20}\s{1,40}\S{1,20}\s{1,40}\S{1,20}\s{1,40}"
                                       r"(?:9[89]|100)% {1,8}/(?!snap/|dev/shm)\S{0,200}\s{0,8}$"),
           # NCCL's WARN lines, in its format since 2.x (`NCCL WARN …`) and before it (`host:pid:tid [0] file:line WARN …`)
           "nccl-warn": compile_all(r"NCCL WARN [^\n]{1,300}", r"\] \S{1,200}:\d{1,6} WARN [^\n]{1,300}"),
           # words that place a job in a container (round 8): the gate of decisions.contained
           "container-words": compile_all(r"\b(?:[Dd]ocker|DOCKER|[Pp]odman|[Cc]ontainers?|[Kk]ubernetes|k8s)\b",
                                          r"/\.dockerenv\b|\bnvcr\.io/",
                                          # docker compose's log prefix and its exit line (round 10)
                                          r"^[\w.-]{1,80}_\d{1,3}\s{1,8}\| ", r"\b[\w.-]{1,80}_\d{1,3} exited with code \d")}
# Round 7's rules were written from held-out-6's misses and from the sources (docs/design/explain-signals.md).
ROUND_6 = "tests/data/explain/judged/held-out-6/"

# --- the table ---------------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule("none", decide=d.ended_well, case="completed-1g/logs.txt"),
    # 1. Messages that can only mean a full /dev/shm.
    Rule("shm-enospc", SHARED_MEMORY, kind="torch-shm-enospc", crash=CRASH_ALLOC,
         patterns=compile_all(r"unable to allocate shared memory\(shm\)(?: for file <?(?P<file>[^>:\s]{1,200})>?)?"),
         summary="PyTorch could not allocate a tensor in /dev/shm (No space left on device): a DataLoader "
                 "worker's batch, or a tensor moved to shared memory, did not fit in what /dev/shm had left.",
         fix=shm_advice, case="dataloader-enospc-64m/logs.txt"),
    # torch's writer of a segment (THAllocator/MapAllocator): with the reason, or without it, as PyTorch before
    # 1.12 printed it (the write of the segment's last byte fails when the tmpfs is full).
    Rule("shm-enospc", SHARED_MEMORY, kind="torch-shm-write", crash=CRASH_ALLOC,
         patterns=compile_all(r"unable to write to file <(?P<file>/?torch[^>]{0,200})>(?:: (?P<reason>No space left on "
                              r"device)| at |\s{0,4}$|[^:\[]{0,80}$)"),
         summary="PyTorch could not write its shared-memory segment <{file}> in /dev/shm: the write of the "
                 "segment's last byte fails when the tmpfs is full.",
         fix=shm_advice, case=PUBLIC + "nnunet-1910-unable-to-write.log"),
    # torch's DataLoader (torch/csrc/DataLoader.cpp, torch/utils/data/_utils/signal_handling.py): the worker's
    # SIGBUS, its handler's message, and the hint it adds; wrapped by terminals and pastes.
    # Its sentences in any letter case (titles and prose quote them lower-cased, round 5; retyped posts in mixed
    # case, round 10), PaddlePaddle's copy of them ("in DataLoader worker", python/paddle/io/dataloader/worker.py;
    # round 7), and the pid glued to its words.
    Rule("worker-bus-error", kind="worker-bus-error", decide=d.worker_bus_error, crash=CRASH_BUS, wraps=True,
         any_case=True,
         patterns=wrapped(r"dataloader worker \(pid (?P<pid>\d{1,10})\)\s{0,3}is killed by signal: bus error",
                          r"unexpected bus error encountered in (?:dataloader )?worker",
                          r"insufficient shared memory \(shm\)", r"dataloader's workers are out of shared memory"),
         source="torch/csrc/DataLoader.cpp", case=JUDGED + "mdtvsfa-10-docker-bus-error.log"),
    # A SIGBUS said in words beside shared memory having run out (titles, prose; round 6).
    Rule("", kind="worker-bus-error", wraps=True,
         patterns=wrapped(r"\b[Bb]us [Ee]rror\b[^\n]{0,40}?\b(?:out of|insufficient|not enough|no more) shared "
                          r"memory\b")),
    # System V shared memory (shmget) refused: its own limits (kernel.shmmni, shmall, shmmax), not a tmpfs's
    # size. Before the ENOSPC rules, which would read its "No space left on device" as a disk.
    Rule("sysv-shm", NOT_SHARED_MEMORY, kind="sysv-shm",
         patterns=compile_all(r"\bshmget\b.{0,200}(?:No space left on device|error 28|ENOSPC)"),
         summary="System V shared memory could not be allocated (shmget: No space left on device): that is the "
                 "kernel's System V limits (the number or total size of segments, ipcs -l), not /dev/shm's "
                 "tmpfs, which System V segments do not use.",
         fix=fixes.sysv_shm_fix() + ".", source="UCX src/uct/sm/mm/sysv/mm_sysv.c, src/ucs/sys/sys.c",
         case=JUDGED + "ucx-9347-sysv-shmget.log"),
    # PostgreSQL's main segment is System V (sysv_shmem.c): its ENOSPC names shmget only on the DETAIL line after.
    Rule("sysv-shm", NOT_SHARED_MEMORY, kind="sysv-shm-postgres", wraps=True,
         patterns=compile_all(r"could not create shared memory segment: (?P<error>[^\n]{1,80})\n[^\n]{0,40}DETAIL: "
                              r"{1,4}Failed system call was shmget\("),
         summary="PostgreSQL could not create its main shared-memory segment ({error}), a System V one (shmget): the "
                 "kernel's System V limits (shmmax, shmall, shmmni), not /dev/shm's tmpfs.",
         fix=fixes.sysv_shm_fix() + ".", source="postgres src/backend/port/sysv_shmem.c",
         case=RULE_TESTS + "test_postgres_other_shared_memory_messages"),
    # System V limits and semaphores in other programs' words (round 9): the kernel's shm* knobs, Apache's mutexes.
    Rule("sysv-shm", NOT_SHARED_MEMORY, kind="sysv-limits",
         patterns=compile_all(r"/proc/sys/kernel/(?:shmmax|shmall|shmmni|sem)\b[^\n]{0,80}?(?:Read-only file system|"
                              r"Permission denied|Operation not permitted)",
                              # (Apache's "(28)" before it is a decoration the reader drops)
                              r"No space left on device: (?:AH\d{5}: )?Couldn't create (?:the )?(?:accept lock|"
                              r"\S{1,60} mutex)"),
         summary="System V IPC was short or refused ({line}): its kernel limits (kernel.shmmax, shmall, shmmni; "
                 "semaphores: kernel.sem), which a container cannot raise itself, not /dev/shm's tmpfs.",
         fix=fixes.sysv_shm_fix() + "; semaphores: ipcs -s lists them, ipcrm -s removes stale ones, kernel.sem raises "
             "the limit (docker run --sysctl kernel.sem=…).",
         source="httpd's proc_mutex (APR sysvsem); the kernel's ipc/ sysctls",
         case=RULE_TESTS + "test_system_v_limits_and_semaphores_in_other_words"),
    # A shared-memory allocation refused with EINVAL: a System V segment above kernel.shmmax (POSIX shared memory
    # has no such limit; round 10: OSRM's datastore, through boost::interprocess's xsi segments).
    Rule("sysv-shm", NOT_SHARED_MEMORY, kind="shm-einval", wraps=True,
         patterns=compile_all(r"allocating shared memory of (?P<requested>\d{1,20}) bytes\n[^\n]{0,120}?Invalid argument"),
         summary="A shared-memory allocation was refused with Invalid argument (EINVAL): a System V segment larger "
                 "than kernel.shmmax, not /dev/shm's tmpfs.",
         fix=fixes.sysv_shm_fix() + ".", case=RULE_TESTS + "test_round_10s_look_alikes"),
    # shmget refused for another reason (EPERM: huge pages without CAP_IPC_LOCK; EACCES; EINVAL: above shmmax).
    Rule("sysv-shm", NOT_SHARED_MEMORY, kind="sysv-shm-refused",
         patterns=compile_all(r"\bshmget\b.{0,200}?(?P<error>Operation not permitted|Permission denied|Invalid "
                              r"argument|\bEPERM\b|\bEACCES\b|\bEINVAL\b)",
                              # a System V segment's identifier or attach refused, in a program's words (round 8)
                              r"\b(?:\w{0,30}[Ss]hm[Ii]d|shmat|shared-memory segment identifier)\b.{0,200}?"
                              r"(?P<error>Operation not permitted|Permission denied|Invalid argument)"),
         summary="System V shared memory was refused (shmget: {error}): a permission or a System V limit (huge "
                 "pages, the segment's owner, kernel.shmmax), not /dev/shm's tmpfs, which System V segments do not "
                 "use.",
         fix=fixes.sysv_shm_refused_fix() + ".", source="UCX src/ucs/sys/sys.c (ucs_sysv_alloc); shmget(2)",
         case=ROUND_4 + "ucx-3023-shmget-eperm.log"),
    # A library's pool, region, key or segment in /dev/shm that could not be created or grown, with the size
    # it wanted and its reason. One rule decides on them all (decisions.shm_pool); the others mark their lines.
    Rule("shm-pool", kind="shm-pool", decide=d.shm_pool, gives=("shm-pool", "shm-file"),
         where=d.pool("Triton's Python backend"),
         patterns=compile_all(
             r"Failed to increase the shared memory pool size(?: for key '(?P<key>[^']{1,200})')? to "
             r"(?P<requested>\d{1,20}) bytes\.(?:.{0,300}? Error: (?P<reason>[^;\n]{1,200}))?",
             r"Unable to initialize shared memory key '(?P<key>[^']{1,200})' to requested size "
             r"\((?P<requested>\d{1,20}) bytes\)\.(?:.{0,400}? Error: (?P<reason>[^;\n]{1,200}))?"),
         source="triton-inference-server/python_backend src/shm_manager.cc",
         case=JUDGED + "triton-6156-pool-671m.log"),
    Rule("", kind="shm-pool", where=d.pool("A program using boost::interprocess", "region"),
         patterns=compile_all(r"'boost::interprocess::interprocess_exception'\s{0,8}what\(\):\s{0,8}"
                              r"(?P<reason>[^\n]{1,200})"),
         source="boost/interprocess/shared_memory_object.hpp (Triton's Python backend uses it)",
         case=JUDGED + "kserve-1937-triton-readonly-shm.log"),
    Rule("", kind="shm-pool", where=d.pool("UCX's posix transport", "allocation"),
         patterns=compile_all(r"Not enough memory to write total of (?P<requested>\d{1,20}) bytes"),
         source="openucx/ucx src/uct/sm/mm/posix/mm_posix.c", case=JUDGED + "ucx-1037-posix-not-enough.log"),
    # Open MPI's shared-memory backing file (opal/mca/shmem/mmap, help-opal-shmem-mmap.txt [target full]): the
    # space it asked for, said on a later line of the message.
    Rule("", kind="shm-pool", where=d.ompi_backing_file,
         patterns=compile_all(r"not enough space for (?P<key>\S{1,300}) \(the shared-memory backing"),
         source="open-mpi opal/mca/shmem/mmap/help-opal-shmem-mmap.txt (v4.1.8, v5.0.10)",
         case=RULE_TESTS + "test_open_mpis_backing_file_without_room_is_sized_from_its_request"),
    # MPICH's shared-memory object (src/mpi/errhan/errnames.txt **ftruncate, v5.0.1): its errno said as a number.
    Rule("", kind="shm-pool", where=d.errno_pool("MPICH", "shared-memory object"),
         patterns=compile_all(r"unable to resize the shared memory object (?P<key>\S{1,200}) to size "
                              r"(?P<requested>\d{1,20}) \(errno (?P<errno>\d{1,4})\)"),
         source="pmodels/mpich src/mpi/errhan/errnames.txt (v5.0.1)",
         case=RULE_TESTS + "test_mpichs_object_resized_for_want_of_room_is_shared_memory"),
    # Chrome's own line when it cannot create a region's file in /dev/shm (base/memory/
    # platform_shared_memory_region_posix.cc): PLOG adds the reason; without room it is /dev/shm's size, with
    # another reason (permissions, read-only, missing) it is not.
    Rule("", kind="shm-pool", where=d.pool("Chrome", "region"),
         patterns=compile_all(r"Creating shared memory in (?P<key>\S{1,300}) failed: (?P<reason>[^\n]{1,200})"),
         source="chromium base/memory/platform_shared_memory_region_posix.cc",
         case=RULE_TESTS + "test_chromes_region_refused_is_decided_by_its_reason"),
    Rule("shm-file", NOT_SHARED_MEMORY, kind="chrome-shm-permissions",
         patterns=compile_all(r"This is frequently caused by incorrect permissions on /dev/shm\.",
                              r"Unable to access\(W_OK\|X_OK\) /dev/shm\b"),
         summary="Chrome could not create its shared memory in /dev/shm: the directory is not writable for it "
                 "(permissions, read-only, or missing), which a bigger /dev/shm does not change.",
         fix=fixes.shm_file_fix() + "; or start Chrome with --disable-dev-shm-usage.",
         source="chromium base/memory/platform_shared_memory_region_posix.cc",
         case=RULE_TESTS + "test_chromes_region_refused_is_decided_by_its_reason"),
    # Aeron's media driver keeps its log buffers in /dev/shm (its storage check before a new log; round 8).
    Rule("", kind="shm-pool", where=d.pool("Aeron's media driver", "log buffer"),
         patterns=compile_all(r"[Ii]nsufficient usable storage for new log of length=(?P<requested>\d{1,20})"
                              r"(?: usable=(?P<available>\d{1,20}))?(?: in (?P<key>\S{1,300}))?"),
         source="real-logic/aeron aeron-driver (the Java driver's checkStorage, the C driver's conductor); its "
                "directory is /dev/shm/aeron-USER on Linux",
         case=RULE_TESTS + "test_aerons_log_buffer_without_room_is_sized_from_its_length"),
    # Docker Desktop for Linux checks /dev/shm against its VM's RAM before it starts the VM (round 9).
    Rule("", kind="shm-pool", where=d.desktop_vm_ram,
         patterns=compile_all(r"/dev/shm has only (?P<available_mb>[\d.]{1,20}) ?MB free space, out of "
                              r"(?P<required_mb>[\d.]{1,20}) ?MB required"),
         case=RULE_TESTS + "test_docker_desktops_check_of_dev_shm_is_sized_from_what_it_required"),
    # A program's own shared-memory function (its name holds "shm") saying what it required (round 8: ForgeRock's
    # am_shm_create(), which checks /dev/shm with statfs).
    Rule("", kind="shm-pool", where=d.pool("A program", "shared-memory segment"),
         patterns=compile_all(r"\b\w{0,40}shm\w{0,40}\(\)[^\n]{0,200}? only (?P<available>\d{1,20}) bytes, required "
                              r"(?P<requested>\d{1,20}) bytes"),
         case=RULE_TESTS + "test_a_programs_shm_function_short_of_room_is_sized_from_what_it_required"),
    Rule("", kind="shm-pool", where=d.pool("PostgreSQL", "segment"), wraps=True,
         patterns=wrapped(r"could not (?:resize|create) shared memory segment \"(?P<key>[^\"]{1,200})\" to "
                          r"(?P<requested>\S{1,20}) bytes: (?P<reason>[^\n]{1,200})"),
         source="postgres src/backend/storage/ipc/dsm_impl.c", case=JUDGED + "concourse-5348-postgres-resize.log"),
    # NCCL's shared-memory transport (include/shm.h up to 2.11, src/misc/shmutils.cc up to 2.29, src/os/linux.cc
    # from 2.30; NCCL's troubleshooting guide, "Shared memory" and "Systemd"). The lines are marked here, and
    # one rule decides on all of them: a segment that did not fit (ENOSPC) is /dev/shm, other reasons are not.
    Rule("", kind="nccl-call", where=d.groups, source="include/shm.h shm_allocate + include/checks.h SYSCHECK",
         patterns=compile_all(r"NCCL WARN Call to (?P<call>(?!ibv_)\w{1,40}) failed ?: ?(?P<error>[^\n]{1,200})")),
    Rule("", kind="nccl-extend", where=d.groups, source="src/misc/shmutils.cc, src/os/linux.cc",
         patterns=compile_all(r"Error: failed to extend (?P<path>\S{1,200}) to (?P<size>\d{1,20}) bytes"
                              r"(?:, error: (?P<error>[^\n]{1,200}))?")),
    Rule("", kind="nccl-create", where=d.groups, source="include/shm.h, src/misc/shmutils.cc, src/os/linux.cc",
         patterns=compile_all(r"Error while creating shared memory segment (?P<path>\S{1,200}) \(size "
                              r"(?P<size>\d{1,20})\)(?:, error: (?P<error>[^\n]{1,200}))?")),
    Rule("", kind="nccl-attach", where=d.groups, source="src/misc/shmutils.cc, src/os/linux.cc",
         patterns=compile_all(r"Error while attaching to shared memory segment (?P<path>\S{1,200}) \(size "
                              r"(?P<size>\d{1,20})\)(?:, error: (?P<error>[^\n]{1,200}))?")),
    Rule("", kind="nccl-file", where=d.groups, source="src/misc/shmutils.cc (2.22+), src/os/linux.cc",
         patterns=compile_all(r"Error: failed to create shared memory file (?P<path>\S{1,200})"
                              r"(?:.{0,200}?error: (?P<error>[^\n]{1,200}))?")),
    Rule("", kind="nccl-unlink", where=d.groups, source="NCCL's guide, 'Systemd'; src/misc/shmutils.cc",
         patterns=compile_all(r"unlink shared memory (?P<path>\S{1,200}) failed(?:, error: (?P<error>[^\n]{1,200}))?")),
    Rule("", kind="nccl-cuda-failure", where=d.groups,
         patterns=compile_all(r"NCCL WARN Cuda failure '(?P<error>[^']{1,200})'")),
    Rule("nccl-shm", decide=d.nccl, fires_on=("nccl-call", "nccl-extend", "nccl-create", "nccl-attach", "nccl-file",
                                              "nccl-unlink"),
         gives=("nccl-shm", "nccl-shm-cuda", "nccl-shm-file", "nccl-shm-attach", "nccl-shm-removed"),
         case=PUBLIC + "nccl-525-posix-fallocate.log"),
    Rule("shm-enospc", SHARED_MEMORY, kind="enospc-shm", crash=CRASH_ENOSPC, patterns=ENOSPC,
         where=d.enospc_is("enospc-shm"),
         summary="A write to {path} failed with No space left on device: /dev/shm was full.",
         fix=shm_advice, case=PUBLIC + "nnunet-2162-unable-to-write-enospc.log"),
    Rule("shm-enospc", SHARED_MEMORY, kind="enospc-semlock", crash=CRASH_ENOSPC, patterns=ENOSPC,
         where=d.enospc_is("enospc-semlock"),
         summary="multiprocessing could not create a semaphore (SemLock: a small file in /dev/shm) for a Lock, "
                 "Queue or Event: /dev/shm was full (No space left on device).",
         fix=shm_advice, case=PUBLIC + "cpython-93253-semlock-docker.log"),
    # ENOMEM or EBUSY on a file in /dev/shm (issue 41 item 1): a tmpfs at its size refuses to grow a file so
    # too; a memory limit can also be the cause, hence likely, not shown. Not a mapping that fails (`unable to
    # mmap … Cannot allocate memory`): that is the count of mappings or the address space, which comes with
    # `Too many open files` (public/pointcept-61-mmap-and-open-files.log).
    Rule("shm-enospc", LIKELY, kind="shm-nomem", crash=CRASH_ENOSPC,
         patterns=compile_all(r"^(?![^\n]{0,300}\bmmap\b)[^\n]{0,300}(?:Cannot allocate memory|\[Errno 12\]|"
                              r"Device or resource busy|\[Errno 16\])[^\n]{0,300}/dev/shm/",
                              r"^(?![^\n]{0,300}\bmmap\b)[^\n]{0,300}/dev/shm/[^\n]{0,300}(?:Cannot allocate memory|"
                              r"Device or resource busy)"),
         summary="A file in /dev/shm could not be created or grown (Cannot allocate memory, or busy): a /dev/shm at "
                 "its size refuses more pages so, and so does a memory limit that cannot hold them.",
         fix=shm_advice, case=RULE_TESTS + "test_enomem_on_a_file_in_dev_shm_is_likely_shared_memory"),
    # Oracle's automatic memory management keeps its SGA in /dev/shm and checks its size at start (round 8).
    Rule("shm-pool", SHARED_MEMORY, kind="oracle-memory-target",
         patterns=compile_all(r"\bORA-00845\b"),
         summary="Oracle refused MEMORY_TARGET (ORA-00845): it keeps its shared memory in /dev/shm and needs /dev/shm "
                 "at least as large as MEMORY_TARGET (or SGA_MAX_SIZE).",
         fix=shm_advice, source="Oracle's error reference, ORA-00845",
         case="tests/data/explain/judged/held-out-7/puerto53-dev-shm-ora-00845-memory-target.log"),
    # A program's own check that its /dev/shm is too small, in any case (round 11: Frigate's "The current SHM size
    # of 268.4MB is too small, recommend increasing it to at least 674.7MB").
    Rule("shm-full", SHARED_MEMORY, kind="shm-too-small", any_case=True, where=d.shm_wanted,
         patterns=compile_all(r"\bshm size (?:of )?[\d.]{1,20} ?[kmgt]?i?b is too small\b[^\n]{0,120}?"
                              r"at least (?P<want>[\d.]{1,30}) ?(?P<unit>[kmgt]?i?b)",
                              r"\bshm size (?:of )?[\d.]{1,20} ?[kmgt]?i?b is too small\b"),
         summary="The program says its /dev/shm is too small ({line}).", fix=shm_advice,
         case=RULE_TESTS + "test_a_programs_own_shm_check_and_ucx_without_resources_are_shared_memory"),
    # UCX could not create a worker for want of resources: its shared-memory transports in a small /dev/shm
    # (round 11: MPICH over UCX on Kubernetes with 24 MB of /dev/shm).
    Rule("shm-full", LIKELY, kind="ucx-no-resource", any_case=True,
         patterns=compile_all(r"\binit_worker\b[^\n]{0,160}?no resources are available to initiate the operation"),
         summary="UCX could not create its worker (No resources are available): in a container that is most often "
                 "its shared-memory transports, whose segments did not fit in /dev/shm.",
         fix=shm_advice, source="openucx/ucx UCS_ERR_NO_RESOURCE",
         case=RULE_TESTS + "test_a_programs_own_shm_check_and_ucx_without_resources_are_shared_memory"),
    # pandarallel's own message (pandarallel/core.py): its memory file system is /dev/shm.
    Rule("shm-enospc", SHARED_MEMORY, kind="pandarallel-shm",
         patterns=compile_all(r"you use Memory File System and you don't have enough available space in `?/?dev/shm"),
         summary="pandarallel's memory file system (/dev/shm) had no room for the data it passes to its workers.",
         fix=shm_advice, source="nalepae/pandarallel core.py (MEMORY_FS_ROOT)",
         case=JUDGED + "pandarallel-143-kubeflow-memory-fs.log"),
    # Chrome and Chromium in a container (headless, under Selenium, Puppeteer, Playwright, Cypress): Chrome's own
    # FATAL out of memory at a shared-memory allocation (base/process/memory.cc, the size it could not map), and
    # the crashed tab as each driver reports it (round 7; docs/design/explain-signals.md).
    Rule("browser-shm", kind="browser-crash", decide=d.browser, where=d.groups, gives=("browser-shm", "unknown"),
         # (the line's `[pid:tid:time:FATAL:memory.cc(38)]` prefix is a decoration the reader drops)
         patterns=compile_all(r"\bOut of memory\. size=(?P<requested>\d{1,20})\b",
                              r":FATAL:(?:\w{1,40}/){0,4}memory(?:_linux)?\.cc\(\d{1,6}\)\] Out of memory\.",
                              r"session deleted because of page crash", r"\bfrom tab crashed\b",
                              # (not Playwright's "Target crashed": it starts Chromium with --disable-dev-shm-usage)
                              r"\bPage crashed!",
                              r"We detected that the (?:Chrom(?:e|ium)|Electron) (?:Renderer )?process just crashed",
                              # Chromium's crashed page and its SIGTRAP (round 9; Kasm's troubleshooting guide: a
                              # Chromium SIGTRAP is /dev/shm exhausted)
                              r"\bAw, Snap!", r"\bError code: SIGTRAP\b",
                              # Firefox's content process gone under its parent (ipc_channel_posix.cc; docker-selenium
                              # asks Firefox for --shm-size=2g too; round 11)
                              r"\bpipe error[^\n]{0,300}?ipc_channel_posix\.cc"),
         source="chromium base/process/memory.cc (TerminateBecauseOutOfMemory), chromedriver, puppeteer, playwright, "
                "cypress", case=ROUND_6 + "rebirth-6-chrome-memory-fatal.log"),
    Rule("ray-object-store", kind="ray-object-store-crash", decide=d.ray_object_store, where=d.ray_asked,
         patterns=compile_all(
             r"The configured object store size \((?P<store>[\d.]{1,20}) GB\) exceeds /dev/shm size "
             r"\((?P<shm>[\d.]{1,20}) GB\)",
             r"The configured object store size exceeds the capacity of /dev/shm"),
         case=PUBLIC + "kiirkirjutaja-5-ray-object-store-exceeds.log"),
    Rule("ray-object-store", kind="ray-plasma-request", decide=d.ray_object_store, where=d.ray_asked,
         patterns=compile_all(
             r"System memory request exceeds memory available in \S{1,200} The request is for (?P<requested>\d{1,20}) "
             r"bytes, and the amount available is (?P<available>\d{1,20}) bytes"),
         source="ray src/ray/object_manager/plasma/store_runner.cc (Arrow's plasma store before it)",
         case=RULE_TESTS + "test_ray_plasma_request_is_sized_from_the_request"),
    # The store full when an object is put (ObjectStoreFullError): what it holds in use cannot be spilled, or the
    # object is larger than the whole store.
    Rule("ray-object-store", kind="ray-store-full", decide=d.ray_object_store, where=d.ray_asked,
         patterns=compile_all(r"Failed to put object \S{1,100} in object store because it is full\. Object size is "
                              r"(?P<requested>\d{1,20}) bytes"),
         source="ray src/ray/core_worker/store_provider/plasma_store_provider.cc",
         case=ROUND_3 + "ray-22176-plasma-full-200g.log"),
    # 2. The OOM killer: Docker's flag, the kernel's words, Slurm's, the kubelet's.
    Rule("", kind="oom-kill", where=d.oom_by,
         patterns=compile_all(r"Memory cgroup out of memory|\boom-kill:|Out of memory: Kill(?:ed)? process",
                              r"\binvoked oom-killer\b|\boom_kill_process\b",
                              r"\"OOMKilled\": true|Reason:\s{1,40}OOMKilled|\breason: '?OOMKilled\b|Reason \[OOMKilled\]",
                              # kubectl get pods: READY, then STATUS (round 8)
                              r"\s\d{1,3}/\d{1,3}\s{1,40}OOMKilled\b",
                              # docker events (round 9)
                              r"\bcontainer oom [0-9a-f]{12,64}\b",
                              # schedulers' and hosted notebooks' own words for a memory kill (round 9): Slurm's
                              # older accounting, HTCondor, AWS Batch and ECS, SageMaker, Colab, Kaggle
                              r"\bexceeded (?:job )?memory limit \(\d{1,20} > \d{1,20}\), being killed",
                              r"\bkilled by the cgroup out-of-memory handler\b",
                              r"\bJob has gone over memory limit of\b",
                              r"\bContainer killed due to memory usage\b",
                              r"\bPlease use an instance type with more memory\b",
                              r"\bYour session crashed after using all available RAM\b",
                              r"\bYour notebook tried to allocate more memory than is available\b",
                              r"slurmstepd(?:-\S{1,40})?: error: Detected \d{1,9} oom[-_]kill event",
                              r"\bExitCode=0:125\b",
                              r"srun: error: .{0,200}: task \d{1,9}: Out Of Memory",
                              r"\bOUT_OF_ME(?:MORY|\+)",
                              # Ray's memory monitor (raylet's node_manager.cc, ray.exceptions; round 5)
                              r"Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)",
                              r"\bray\.exceptions\.OutOfMemoryError\b",
                              r"Task was killed due to the node running low on memory",
                              # LSF's, PBS's and YARN's (round 7)
                              r"\bTERM_MEMLIMIT\b", r"PBS: job killed: v?mem \S{1,40} exceeded limit",
                              r"killed by YARN for exceeding (?:physical )?memory limits")),
    Rule("oom", decide=d.oom, gives=("oom", "oom-shm"), case=PUBLIC + "arjuna-52-slurm-oom-kill.log"),
    # 3. Failures that are not shared memory, whatever else the log shows.
    Rule("command-not-found", kind="command-not-found", decide=d.command_not_found,
         patterns=compile_all(r"exec .{0,200} failed: No such file or directory|executable file not found"),
         case="tests/unit/engine/test_plan.py::test_post_mortem_does_not_blame_shm_for_other_deaths"),
    # A file in /dev/shm that is gone (ENOENT): removed, or made in another IPC namespace; not its size (round 8).
    # Before the engine's rule: its "Error response from daemon" may carry it.
    Rule("shm-file", NOT_SHARED_MEMORY, kind="shm-gone",
         patterns=compile_all(r"\b[Ss]hared memory is invalid or freed\b",  # slsDetectorPackage's (round 10)
                              r"(?<![\w/])/?dev/shm/\S{1,300}[^\n]{0,80}?(?:No such file or directory|\bENOENT\b)",
                              r"(?:No such file or directory|\bENOENT\b)[^\n]{0,80}?['\"]/dev/shm/\S",
                              r"\bNo shared memory (?:block|segment|region|object) '?[^'\n]{0,200}'? found",
                              r"\bshared memory (?:block|segment|region|object) '?[^'\n]{0,200}'? (?:does not exist|not "
                              r"found)"),
         summary="A shared-memory file or block the process looked for is not there ({line}): removed under it, or "
                 "made by a process in another IPC namespace or container. Not /dev/shm's size.",
         fix=fixes.shm_file_fix() + "; run the processes that share it in one IPC namespace (docker run --ipc "
             "container:NAME or --ipc host).",
         case=RULE_TESTS + "test_a_shared_memory_file_that_is_gone_is_not_its_size"),
    Rule("shm-file", NOT_SHARED_MEMORY, kind="postgres-segment-gone",
         patterns=compile_all(r"could not open shared memory segment \"(?P<key>[^\"]{1,200})\": No such file or "
                              r"directory"),
         summary="PostgreSQL's dynamic shared-memory segment {key} was gone from /dev/shm when a process opened it: "
                 "something removed it (systemd's RemoveIPC=yes when the postgres user's last session ends, a cleaner "
                 "of /dev/shm). Not /dev/shm's size.",
         fix="set RemoveIPC=no in /etc/systemd/logind.conf (or run PostgreSQL as a system user), and do not clean "
             "/dev/shm under a running server.", source="postgres src/backend/storage/ipc/dsm_impl.c",
         case=RULE_TESTS + "test_postgres_other_shared_memory_messages"),
    Rule("oom", NOT_SHARED_MEMORY, kind="postgres-anonymous",
         patterns=compile_all(r"could not map anonymous shared memory: (?P<error>[^\n]{1,120})"),
         summary="PostgreSQL could not map its main shared memory ({error}): anonymous memory (shared_buffers, huge "
                 "pages), charged to the RAM or the memory limit, not /dev/shm.",
         fix="lower shared_buffers (or huge_pages=off when huge pages are short), or give the server more memory.",
         source="postgres src/backend/port/sysv_shmem.c", case=RULE_TESTS + "test_postgres_other_shared_memory_messages"),
    Rule("engine", UNDETERMINED, kind="engine-error",
         patterns=compile_all(r"Error response from daemon: (?P<error>[^\n]{1,300})",
                              # dockerd's own log (round 8)
                              r"\bHandler for [A-Z]{3,7} \S{1,300} returned error: (?P<error>[^\n]{1,300})",
                              r"msg=\"HTTP Error\" err=\"(?P<error>[^\"\n]{1,300})\" statusCode=5\d\d"),
         summary="The engine could not create or start the container ({error}): it never ran, so the size of its "
                 "/dev/shm is not the cause.",
         fix="read the engine's own log (journalctl -u docker, or dockerd's output) for why it refused.",
         case=PUBLIC + "coreos-2427-mounting-shm-tmpfs.log"),
    Rule("engine", UNDETERMINED, kind="enospc-mount", patterns=ENOSPC, where=d.enospc_is("enospc-mount"),
         summary="The runtime could not mount the container's filesystems ({line}): mount(2) refused with No space "
                 "left on device, which is the kernel's mount table (thousands of leaked mounts) or a full tmpfs at the "
                 "mount's source (/run), not the container's /dev/shm.",
         fix="count the mounts (wc -l /proc/self/mountinfo; fs.mount-max) and unmount what leaked, or free the tmpfs "
             "the source lies on (df -h /run); read the engine's own log for which mount failed.",
         case=RULE_TESTS + "test_a_runtimes_mount_refused_is_the_engines"),
    Rule("engine", UNDETERMINED, kind="engine-shim",
         patterns=compile_all(r"\binit shim died\b", r"\bshim (?:died|disconnected|reaped)\b"),
         summary="The engine lost its containers' shims ({line}): dockerd or containerd crashed or restarted and "
                 "killed what they ran. Not /dev/shm.",
         fix="read the engine's own log around that time (journalctl -u docker -u containerd) for why it went down.",
         source="containerd's shim reaper (its log lines)", case=RULE_TESTS + "test_the_engines_own_failures"),
    Rule("disk-full", kind="enospc-elsewhere", patterns=ENOSPC, where=d.enospc_is("enospc-elsewhere"),
         decide=d.disk_full, case=TESTS + "test_enospc_is_placed_by_its_path"),
    Rule("disk-full", kind="enospc-checkpoint", patterns=ENOSPC, where=d.enospc_is("enospc-checkpoint"),
         decide=d.disk_full, case="checkpoint-disk-full/logs.txt"),
    Rule("disk-full", NOT_SHARED_MEMORY, kind="checkpoint-write",
         patterns=compile_all(r"PytorchStreamWriter failed writing file (?P<file>\S{1,300}): file write failed",
                              # the writer could not even open it (round 7, from held-out-3's ronin-51)
                              r"\bFile (?P<file>\S{1,300}) cannot be opened\."),
         summary="torch.save could not write its checkpoint ({file}): the disk it writes to is full (or gone); "
                 "that is not /dev/shm, so a bigger shm would not help.",
         fix="free space on that filesystem or write elsewhere (df -h shows which is full).",
         case=PUBLIC + "llamafactory-1223-streamwriter.log"),
    Rule("disk-full", NOT_SHARED_MEMORY, kind="file-write",
         patterns=compile_all(r"\bwrite\(\): fd \d{1,9} failed with (?P<error>[^\n]{1,120})"),
         summary="torch could not write a file to disk (write() failed with {error}): the disk it writes to is "
                 "full or failing; that is not /dev/shm.",
         fix="free space on that filesystem or write elsewhere (df -h shows which is full; dmesg shows a failing disk).",
         source="torch/csrc/serialization.cpp", case="tests/data/explain/judged/held-out-2/pytorch-10577-save-eio.log"),
    # Windows and macOS start DataLoader workers by spawn, which imports the script again: without an
    # `if __name__ == '__main__':` guard it starts its loader again (CPython Lib/multiprocessing/spawn.py).
    Rule("spawn-main", NOT_SHARED_MEMORY, kind="spawn-main",
         patterns=compile_all(r"in _fixup_main_from_path\b", r"current process has finished its bootstrapping phase",
                              r"\bfreeze_support\(\)", r"\b_check_not_importing_main\b"),
         summary="A DataLoader worker started by spawn (Windows, macOS) imported the script again and ran its "
                 "training code: the script has no `if __name__ == '__main__':` guard. Not /dev/shm.",
         fix=fixes.spawn_main_fix() + ".", source="cpython Lib/multiprocessing/spawn.py",
         case="tests/data/explain/judged/held-out-2/sskd-3-windows-broken-pipe.log"),
    # A framework's CPU allocator refused (torch's c10 alloc_cpu.cpp, TensorFlow's on the CPU device; round 7).
    Rule("oom", NOT_SHARED_MEMORY, kind="cpu-alloc",
         patterns=compile_all(r"\bDefaultCPUAllocator: (?:can't allocate memory|not enough memory)",
                              r"\bTorch: not enough memory: you tried to allocate",  # TH, before ATen (round 9)
                              r"\bOOM when allocating tensor[^\n]{0,400}(?:device:CPU:|by allocator cpu\b)",
                              # numpy's, C++'s, the JVM's and Node's own (round 7)
                              r"\b_ArrayMemoryError\b", r"\bstd::bad_alloc\b", r"\bjava\.lang\.OutOfMemoryError\b",
                              r"JavaScript heap out of memory"),
         summary="The framework could not allocate memory on the CPU ({line}): the process's own memory (the RAM, "
                 "or a memory limit) ran out, not /dev/shm.",
         fix=fixes.memory_error_fix() + ".", source="pytorch c10/core/impl/alloc_cpu.cpp; tensorflow bfc_allocator",
         case=RULE_TESTS + "test_a_cpu_allocator_that_ran_out_is_memory"),
    Rule("cuda-oom", NOT_SHARED_MEMORY, kind="cuda-oom", where=d.cuda_size,
         patterns=compile_all(r"CUDA out of memory\. Tried to allocate (?P<size>[\d.]{1,20} [KMGT]?i?B)",
                              r"torch\.cuda\.OutOfMemoryError",  # (CUDA's own words: the any-case rule below)
                              r"cuda runtime error \(2\) : out of memory", r"THCudaCheck FAIL .{0,300} : out of memory",
                              r"\bCUDA_ERROR_OUT_OF_MEMORY\b",
                              # the GPU memory of other frameworks and devices (round 7): TensorFlow's GPU
                              # allocator, XLA's (JAX), ROCm's, Apple's, Intel's
                              r"Allocator \(GPU_\d{1,3}_bfc\) ran out of memory",
                              r"\bOOM when allocating tensor\b",
                              r"\bRESOURCE_EXHAUSTED: Out of memory while trying to allocate",
                              r"\b(?:HIP|XPU) out of memory\b", r"\bMPS backend out of memory\b",
                              r"\bCUBLAS_STATUS_ALLOC_FAILED\b", r"\bcudaMalloc\b[^\n]{0,80}? out of memory\b"),
         summary="The GPU ran out of memory (CUDA out of memory{size_text}): that is the GPU's own memory, not "
                 "/dev/shm, so a bigger shm would not help.",
         fix="lower the batch size or what the model keeps on the GPU (mixed precision, activation checkpointing); "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when memory is reserved but unallocated.",
         case=PUBLIC + "atacworks-251-cuda-oom.log"),
    # The same in any letter case (round 10: titles and retyped posts).
    Rule("", kind="cuda-oom", where=d.cuda_size, any_case=True,
         patterns=compile_all(r"cuda out of memory", r"cuda error: out of memory")),
    # The GPU's other errors (c10's "CUDA error: …", THC's check before 1.x, the driver API's names).
    Rule("cuda-error", NOT_SHARED_MEMORY, kind="cuda-error",
         patterns=compile_all(r"\bCUDA error: (?P<error>[^\n]{1,200})",
                              r"\bcuda runtime error \(\d{1,4}\) : (?P<error>[^\n]{1,200})",
                              r"THCudaCheck FAIL file=\S{1,300} line=\d{1,6} error=\d{1,4} : (?P<error>[^\n]{1,200})",
                              r"\b(?P<error>CUDA_ERROR_(?!OUT_OF_MEMORY)\w{1,60})",
                              # NCCL's ncclUnhandledCudaError (src/misc/utils.cc's error strings; round 9)
                              r"\b(?P<error>unhandled cuda error)\b"),
         summary="The GPU reported an error ({error}): a fault in a kernel or its inputs, or a driver and build that "
                 "do not match, not /dev/shm.",
         fix=fixes.cuda_error_fix() + ".", source="pytorch c10/cuda/CUDAException.h, aten/src/THC/THCGeneral",
         case=ROUND_3 + "crnn-241-thcudacheck-77.log"),
    # Python's MemoryError: the process's own memory (a full /dev/shm gives SIGBUS or ENOSPC, never this).
    Rule("oom", NOT_SHARED_MEMORY, kind="memory-error",
         patterns=compile_all(r"^\s{0,16}MemoryError\b", r"\bMemoryError: Unable to allocate\b"),
         summary="Python could not allocate memory (MemoryError): the process's own memory (the RAM, a memory limit, "
                 "or on Windows the page file) ran out, not /dev/shm.",
         fix=fixes.memory_error_fix() + ".", source="cpython Objects/obmalloc.c (PyErr_NoMemory)",
         case=ROUND_3 + "controlnet-276-save-memoryerror.log"),
    # A process pool's worker that died under it (joblib's loky, concurrent.futures): most often killed for
    # memory, which the pool cannot see (round 10).
    Rule("oom", UNDETERMINED, kind="pool-worker-lost",
         patterns=compile_all(r"A process in the (?:executor|process pool) was terminated abruptly",
                              r"A worker process managed by the executor was unexpectedly terminated"),
         summary="A worker of a process pool died under it ({line}): most often the kernel's OOM killer (the workers' "
                 "memory, or a container's limit), sometimes a crash in native code. Nothing here says /dev/shm.",
         fix="look for the OOM kill (dmesg -T | grep -i oom) and run fewer workers or smaller tasks; "
             "python -X faulthandler shows a native crash.",
         source="joblib/loky process_executor.py; cpython Lib/concurrent/futures/process.py",
         case=RULE_TESTS + "test_round_10s_look_alikes"),
    # Dask's nanny restarts a worker over its memory budget; a fork or a thread refused memory (round 8).
    Rule("oom", NOT_SHARED_MEMORY, kind="process-memory",
         patterns=compile_all(r"Worker exceeded \d{1,3}% memory budget",
                              r"^(?![^\n]{0,300}(?:\bmmap\b|/dev/shm|<torch_))[^\n]{0,300}\[Errno 12\] Cannot allocate memory"),
         summary="A process could not get memory ({line}): the RAM, the memory limit or the kernel's overcommit "
                 "refused it, not /dev/shm.",
         fix=fixes.memory_error_fix() + ".", source="dask distributed/nanny.py; fork(2), ENOMEM",
         case=RULE_TESTS + "test_more_words_of_known_look_alikes"),
    # Jupyter's kernel that died without a word: most often the OOM killer (round 9).
    Rule("oom", UNDETERMINED, kind="kernel-died",
         patterns=compile_all(r"The kernel appears to have died\. It will restart automatically",
                              r"\bKernel Restarting\b", r"\b[Kk]ernel (?:has )?died\b"),
         summary="Jupyter's kernel died without an error of its own ({line}): most often the kernel's OOM killer (the "
                 "notebook's memory, or a container's limit, which /dev/shm's pages count against too); a native crash "
                 "does the same. Nothing here says /dev/shm's size.",
         fix="look for the OOM kill (dmesg -T | grep -i oom; docker inspect's OOMKilled) and give the notebook more "
             "memory; run the cell as a script to see a native crash.",
         source="jupyter notebook / jupyterlab's kernel restart dialog", case=RULE_TESTS + "test_more_words_of_known_look_alikes"),
    # Windows' shared file mapping (torch's libshm on Windows) refused with error 1455: the page file is full.
    Rule("oom", NOT_SHARED_MEMORY, kind="page-file",
         patterns=compile_all(r"Couldn't open shared file mapping: <[^>]{0,200}>, error code: <1455>",
                              r"The paging file is too small for this operation to complete"),
         summary="Windows could not commit memory for a shared tensor (error 1455: the paging file is too small): "
                 "the page file and RAM are full. Windows has no /dev/shm.",
         fix=fixes.page_file_fix() + ".", source="pytorch aten/src/ATen/MapAllocator.cpp (Windows); WinError 1455",
         case=RULE_TESTS + "test_windows_page_file_is_memory"),
    # NCCL's InfiniBand verbs (src/misc/ibvwrap.cc): registering memory with the NIC refused.
    Rule("nccl-ib", NOT_SHARED_MEMORY, kind="nccl-ib",
         patterns=compile_all(r"NCCL WARN Call to (?P<call>ibv_\w{1,60}) failed(?: with error)? ?:? ?(?P<error>[^\n]{1,200})"),
         summary="NCCL could not use the InfiniBand NIC ({call} failed: {error}): registering memory with it needs "
                 "locked memory (ulimit -l), which a large NCCL_BUFFSIZE raises. Not /dev/shm.",
         fix=fixes.nccl_ib_fix() + ".", source="nccl src/misc/ibvwrap.cc",
         case=ROUND_3 + "vllm-19613-nccl-ibv-enomem.log"),
    # UCX's posix transport opens a peer's segment through /proc/PID/fd (UCX_POSIX_USE_PROC_LINK): the peer gone,
    # or in another PID namespace, refuses it — not a question of room.
    Rule("shm-file", NOT_SHARED_MEMORY, kind="ucx-proc-link",
         patterns=compile_all(r"open\(file_name=(?P<path>/proc/\d{1,10}/fd/\d{1,10}) flags=\S{1,20}\) failed: "
                              r"(?P<error>[^\n]{1,200})"),
         summary="UCX's posix transport could not open a peer's shared-memory segment through {path} ({error}): the "
                 "peer process was gone or in another PID namespace. Not /dev/shm's size.",
         fix=fixes.ucx_proc_link_fix() + ".", source="openucx/ucx src/uct/sm/mm/posix/mm_posix.c (proc link)",
         case=ROUND_3 + "ucx-8511-proc-link-enoent.log"),
    # EMFILE by its number or name, however the sentence after it is worded (round 6: "Too many files open").
    Rule("", kind="open-files", patterns=compile_all(r"Too many open files", r"received (?:\d{1,9}|%d) items of ancdata",
                                                     r"\[Errno 24\]", r"\bEMFILE\b")),
    Rule("open-files", kind="shm-open", decide=d.open_files, fires_on=("open-files", "shm-open"),
         patterns=compile_all(r"unable to open shared memory object (?:<[^>]{0,200}>|\S{1,200}) in read-write mode"),
         case=PUBLIC + "maskrcnn-158-too-many-open-files.log"),
    Rule("nccl-timeout", UNDETERMINED, kind="nccl-timeout",
         patterns=compile_all(r"Watchdog caught collective operation timeout: WorkNCCL\(.{0,400}?\) ran for "
                              r"(?P<ms>\d{1,15}) milliseconds"),
         summary="An NCCL collective timed out (the watchdog waited {ms} ms): some rank stopped taking part, "
                 "crashed, hung, or fell far behind. That is a symptom; the first rank to fail says why, and "
                 "nothing here points at /dev/shm.",
         fix="find the first rank's own error (its log, or TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and NCCL_DEBUG=INFO); "
             "raise the process group's timeout only when a step is slow on purpose.",
         case=PUBLIC + "basicsr-737-nccl-watchdog.log"),
    Rule("connection", NOT_SHARED_MEMORY, kind="connection",
         patterns=compile_all(r"Connection refused|ConnectionRefusedError",
                              r"The client socket has timed out after \S{1,40} while trying to connect to",
                              r"RendezvousConnectionError|connect\(\) timed out"),
         summary="A process could not connect to another (the rendezvous store, or another rank): nothing "
                 "listened at that address, or it was not reachable. A network or launch problem, not /dev/shm.",
         fix="check MASTER_ADDR/MASTER_PORT (or --rdzv-endpoint) on every node, that rank 0 started first and "
             "listens, and that the port is open between the nodes.",
         case=PUBLIC + "pytorch-108732-gloo-connection-refused.log"),
    # Slurm's and the kubelet's own ends of a job: not a crash of the job's making.
    Rule("time-limit", NOT_SHARED_MEMORY, kind="time-limit",
         patterns=compile_all(r"CANCELLED AT \S{1,40} DUE TO TIME LIMIT"),
         summary="Slurm cancelled the job at its time limit (the scheduler's kill, not a crash): not /dev/shm.",
         fix=fixes.time_limit_fix() + ".", source="slurm src/slurmd/slurmstepd/req.c",
         case=JUDGED + "zetta-671-slurm-time-limit.log"),
    Rule("evicted", kind="evicted", decide=d.evicted,
         patterns=compile_all(r"The node was low on resource: (?P<resource>ephemeral-storage|memory)",
                              r"The node had condition: \[(?P<resource>DiskPressure|MemoryPressure)\]",
                              r"Pod ephemeral local storage usage exceeds the total limit of containers",
                              r"exceeded its local ephemeral storage limit",
                              r"Usage of EmptyDir volume \\?\"?(?P<volume>[\w.-]{1,253})\\?\"? exceeds the limit"
                              r"(?: \\?\"?(?P<limit>[\w.]{1,40}))?"),
         where=d.eviction_resource, gives=("evicted", "shm-evicted"),
         source="kubernetes pkg/kubelet/eviction/helpers.go, eviction_manager.go",
         case=RULE_TESTS + "test_an_eviction_for_disk_is_its_own_cause"),
    # Slurm's other cancellations (slurmstepd's req.c: scancel, preemption, a node failure), and srun's word for a
    # task it terminated; the time limit's own line is the rule above.
    Rule("terminated", UNDETERMINED, kind="slurm-cancelled",
         patterns=compile_all(r"\*\*\* (?:JOB|STEP) \S{1,60} ON \S{1,200} CANCELLED AT \S{1,40}(?: DUE TO (?:PREEMPTION|NODE "
                              r"FAILURE))?", r"\bsrun: error: \S{1,200}: tasks? [\d,-]{1,60}: Terminated\b"),
         summary="Slurm cancelled the job or its step (scancel, a preemption, a node failure, or srun ending a step "
                 "after a task failed): its tasks were terminated. Not a crash of the job's own, and not /dev/shm's "
                 "size.",
         fix=fixes.slurm_cancelled_fix() + ".", source="slurm src/slurmd/slurmstepd/req.c, src/srun",
         case=ROUND_3 + "myria3d-123-slurm-step-cancelled.log"),
    # DataLoader workers that died of something other than a full /dev/shm (torch/csrc/DataLoader.cpp).
    # Signals by name or number in the forms launchers, shells, debuggers and torch print them (round 3).
    Rule("segfault", kind="segfault", decide=d.segfault, always=True,
         # (not Ray's boilerplate "crashed unexpectedly due to SIGSEGV or other unexpected errors")
         patterns=compile_all(r"[Ss]egmentation [Ff]ault", r"\bSIGSEGV received\b|\bwith signal SIGSEGV\b|\bSIGSEGV\)",
                              r"\bsignal 11\b", r"Unexpected segmentation fault encountered", r"\bwas sent SIGSEGV!",
                              # Windows' STATUS_ACCESS_VIOLATION as an exit code (round 9)
                              r"\b0xC0000005\b", r"-1073741819\b", r"\b3221225477\b"),
         source="torch/csrc/DataLoader.cpp; the kernel's signal 11", case=JUDGED + "db-94-worker-segfault.log"),
    # SIGABRT and SIGILL (round 7): a process that aborted itself, or ran an instruction its CPU lacks.
    Rule("aborted", NOT_SHARED_MEMORY, kind="aborted",
         patterns=compile_all(r"^\s{0,16}Aborted \(core dumped\)", r"\bis killed by signal: Aborted\b",
                              r"\bFatal Python error: Aborted\b", r"\bline \d{1,9}: {1,8}\d{1,10} Aborted\b",
                              r"\bSIGABRT\b", r"\bsignal 6 \(SIGABRT\)", r"<Signals\.SIGABRT: 6>",
                              # Open MPI's and glog's own words (round 8)
                              r"\bSignal: Aborted \(6\)", r"\*\*\* Check failure stack trace: \*\*\*",
                              # round 11: glibc's heap checks, a CHECK of glog or Ray, a signal 6 in a runner's words
                              r"\bdouble free or corruption\b", r"\bfree\(\): invalid (?:pointer|size)\b",
                              r"\bmalloc\(\): (?:corrupted|memory corruption)\b", r"\bCheck failed: ",
                              signalled(6)),
         summary="A process aborted itself (SIGABRT: {line}): a C++ exception nothing caught, a failed assertion, or "
                 "a corrupt heap, said just above. Not /dev/shm's size.",
         fix=fixes.aborted_fix() + ".",
         source="torch/csrc/DataLoader.cpp; abort(3); open-mpi opal/util/stacktrace.c; glog's LOG(FATAL)",
         case=RULE_TESTS + "test_sigabrt_and_sigill_are_their_own"),
    Rule("illegal-instruction", NOT_SHARED_MEMORY, kind="illegal-instruction",
         patterns=compile_all(r"\bIllegal instruction\b", r"\bSIGILL\b", r"\billegal hardware instruction\b",
                              # Windows' STATUS_ILLEGAL_INSTRUCTION as an exit code (round 9)
                              r"\b0xC000001D\b", r"-1073741795\b", r"\b3221225501\b"),
         summary="A process ran an instruction its CPU does not have (SIGILL: {line}): a build for newer CPUs. "
                 "Not /dev/shm.", fix=fixes.illegal_instruction_fix() + ".", source="the kernel's signal 4",
         case=RULE_TESTS + "test_sigabrt_and_sigill_are_their_own"),
    Rule("terminated", UNDETERMINED, kind="terminated",
         patterns=compile_all(r"is killed by signal: Terminated", r"\bsignal 15 \(SIGTERM\) received",
                              # torchrun's agent, told to stop (SIGTERM, SIGINT, a hangup), and what it passes on
                              # to its workers; PBS's delete; a shell's Terminated after a spinner (round 10)
                              r"\bReceived (?:1|2|15) death signal\b", r"\bclosing signal SIG(?:HUP|INT)\b",
                              r"\bJob deleted at request of \S{1,200}", r"[\\|/-]Terminated\s{0,16}$",
                              signalled(15),
                              r"^\s{0,16}Terminated\s{0,16}$"),
         summary="A DataLoader worker was stopped by SIGTERM, sent from outside it: the scheduler, the kubelet, "
                 "or the launcher stopping the job after another failure. Not /dev/shm's size.",
         fix=fixes.terminated_fix() + ".", source="torch/csrc/DataLoader.cpp",
         case=JUDGED + "mmseg-2085-worker-terminated.log"),
    # Open MPI's shared-memory transport (opal/mca/btl/vader/btl_vader_get.c, opal/mca/smsc/cma): its single-copy
    # read between ranks (process_vm_readv) refused: a container without ptrace, not /dev/shm's size.
    # UCX's CMA transport (src/uct/sm/scopy/cma/cma_ep.c): the same single-copy read refused (round 11).
    Rule("mpi-cma", NOT_SHARED_MEMORY, kind="ucx-cma",
         patterns=compile_all(r"process_vm_(?:readv|writev)\([^\n]{0,300}?\) returned -1: (?P<error>Operation not "
                              r"permitted|Permission denied)"),
         summary="UCX's single-copy transport could not read another rank's memory (process_vm_readv: {error}): a "
                 "container forbids it without ptrace. Not /dev/shm's size.",
         fix=fixes.mpi_cma_fix() + "; UCX: UCX_TLS without cma.", source="openucx/ucx src/uct/sm/scopy/cma/cma_ep.c",
         case=RULE_TESTS + "test_round_11s_classes"),
    Rule("mpi-cma", NOT_SHARED_MEMORY, kind="mpi-cma",
         patterns=compile_all(r"\b(?:CMA r|R)ead -1, expected \S{1,40}, errno ?= ?(?P<errno>\d{1,4})"),
         summary="Open MPI's shared-memory transport could not read another rank's memory (process_vm_readv, "
                 "errno {errno}): a container forbids it without ptrace. Not /dev/shm's size.",
         fix=fixes.mpi_cma_fix() + ".", source="open-mpi opal/mca/btl/vader/btl_vader_get.c",
         case=ROUND_1 + "ompi-4948-vader-cma-docker.log"),
    Rule("pin-memory", NOT_SHARED_MEMORY, kind="pin-memory",
         patterns=compile_all(r"Pin memory thread exited unexpectedly", r"in _pin_memory_loop\b"),
         summary="torch's pin-memory thread died (it copies the workers' batches to page-locked memory for the "
                 "GPU); its own error is above, and the trainer's is only that the thread is gone. Not /dev/shm.",
         fix=fixes.pin_memory_fix() + ".", source="torch/utils/data/_utils/pin_memory.py, dataloader.py",
         case=JUDGED + "reid-365-pin-memory.log"),
    # 4. Symptoms typical of shared memory that prove nothing on their own.
    Rule("", kind="bus-error", crash=CRASH_BUS, patterns=compile_all(r"\bBus error\b", r"\bSIGBUS\b", r"<Signals\.SIGBUS: 7>",
                                                                     signalled(7),
                                                                     r"\b(?:zsh|bash|sh): bus error\b",
                                                                     r"\b[Bb]us error ?\(core dump(?:ed)?\)")),
    Rule("sigbus", decide=d.sigbus, case=PUBLIC + "mlsh-17-mpirun-docker-bus-error.log"),
    Rule("worker-exception", NOT_SHARED_MEMORY, kind="worker-exception",
         patterns=compile_all(r"Caught (?P<error>\w{1,80}) in DataLoader worker process (?P<worker>\d{1,6})"),
         summary="Your dataset's code raised {error} in DataLoader worker {worker}; the worker's own traceback "
                 "follows it in the log. Not shared memory.",
         fix="fix the error in the dataset or collate_fn the traceback names (num_workers=0 runs it in the main "
             "process, where a debugger reaches it).",
         case=PUBLIC + "transformers-tutorial-1-worker-keyerror.log"),
    # torch re-raises a worker's exception in the trainer (torch/_utils.py ExceptionWrapper.reraise; round 11).
    Rule("worker-exception", NOT_SHARED_MEMORY, kind="worker-reraise",
         patterns=compile_all(r"\bdata\.reraise\(\)"),
         summary="Your dataset's code raised an exception in a DataLoader worker, re-raised in the trainer "
                 "(data.reraise()): its own error follows. Not shared memory.",
         fix="fix the error in the dataset or collate_fn the traceback names (num_workers=0 runs it in the main "
             "process, where a debugger reaches it).", source="torch/_utils.py (ExceptionWrapper.reraise)",
         case=RULE_TESTS + "test_round_11s_classes"),
    # A worker that exited with a code (not a signal): it ended itself, on an error of its own.
    Rule("worker-exception", NOT_SHARED_MEMORY, kind="worker-exit-code",
         patterns=compile_all(r"DataLoader worker \(pid (?P<pid>\d{1,10})\) exited unexpectedly with exit code "
                              r"(?P<code>[1-9]\d{0,2})\b"),
         summary="DataLoader worker {pid} exited with code {code}: it ended on an error of its own (an exception, "
                 "sys.exit), not a signal, so not a SIGBUS in a full /dev/shm.",
         fix="run with DataLoader(num_workers=0) to see the worker's own error, or look above this line for it.",
         source="torch/csrc/DataLoader.cpp", case=JUDGED + "weightslab-111-worker-exit-code-1.log"),
    # torch's SIGKILL line, and a worker killed by a signal no rule above named, in any case and words (round 10:
    # "is killed by signal" with the name left out, Paddle's "DataLoader process (pid N) exited is killed by signal:
    # Killed").
    Rule("worker-killed", kind="worker-killed", decide=d.workers, fires_on=("worker-killed", "workers-exited"),
         gives=("worker-killed", "workers-exited"), any_case=True,
         patterns=compile_all(r"dataloader (?:worker|process) \(pid (?P<pid>[^)\s]{1,10})\) ?(?:exited )?is killed by "
                              r"signal(?:: killed)?(?![:\w])"),
         case=PUBLIC + "torchssl-4-worker-killed.log"),
    Rule("", kind="workers-exited", where=d.worker_pids,
         patterns=compile_all(r"DataLoader worker \(pid\(s\) (?P<pids>[\d, ]{1,400})\) exited unexpectedly")),
    # NCCL's ncclSystemError with no reason kept (round 7): its shared-memory transport, most often, in a container.
    Rule("nccl-shm", kind="nccl-system-error", decide=d.nccl_system_error, where=d.nccl_last_error,
         gives=("nccl-shm", "connection", "unknown"),
         patterns=compile_all(r"\bunhandled system error\b", r"\bncclSystemError\b"),
         source="nccl src/misc/utils.cc ncclGetErrorString; NCCL's troubleshooting guide, 'Shared memory'",
         case=ROUND_6 + "nccl-473-unhandled-system-error-docker.log"),
    Rule("enospc", kind="enospc-unplaced", patterns=ENOSPC, where=d.enospc_is("enospc-unplaced"),
         decide=d.enospc_unplaced, gives=("enospc", "shm-enospc", "disk-full"),
         case=TESTS + "test_enospc_without_a_path_is_not_shm_when_shm_stayed_low"),
    # The DataLoader's own timeout (DataLoader(timeout=N)): no batch came. With /dev/shm full, a worker's batch
    # that could not be written was lost (the error hits the queue's feeder thread, not the worker loop), and the
    # trainer waits for it: a hang, not a crash (seen in the integration tests on a loaded machine).
    Rule("loader-timeout", kind="loader-timeout", decide=d.loader_timeout, where=d.timeout_seconds,
         crash=CRASH_TIMEOUT, patterns=compile_all(r"DataLoader timed out after (?P<seconds>[\d.]{1,20}) seconds",
                                                   # MXNet Gluon's (gluon/data/dataloader.py; round 8)
                                                   r"\bWorker timed out after (?P<seconds>[\d.]{1,20}) seconds"),
         case=TESTS + "test_a_dataloader_timeout_is_shm_when_shm_was_full_and_not_when_it_stayed_low"),
    Rule("ray-object-store", kind="ray-object-store", decide=d.ray_object_store, where=d.ray_asked,
         patterns=compile_all(r"The object store is using \S{1,200} instead of /dev/shm because /dev/shm has only "
                              r"(?P<available>\d{1,20}) bytes available(?:.{0,400}--shm-size=(?P<gb>[\d.]{1,20})gb)?"),
         case=PUBLIC + "llmaz-238-ray-object-store-tmp.log"),
    Rule("shm-full", decide=d.shm_full, fires_on=("df-shm",), always=True,
         case=JUDGED + "triton-4869-helm-df-full.log"),
    # 5. What is left: a process killed from outside, an error nothing above names, or no failure at all.
    Rule("killed", kind="sigkill", decide=d.killed, always=True, gives=("killed", "oom"),
         patterns=compile_all(r"^\s{0,16}Killed\s{0,16}$", r"\bline \d{1,9}: {1,8}\d{1,10} Killed\b",
                              r"exited on signal 9 \(Killed\)", r"command terminated with exit code 137",
                              r"killed by signal 9\b", r"failed \(exitcode: -9\)", r"Signal 9 \(SIGKILL\) received",
                              r"(?:it/s|s/it)\]\s{0,4}Killed\s{0,16}$", r"^\s{0,16}已杀死\s{0,16}$", r"\bwas sent SIGKILL!",
                              # quoted in a sentence, and torchrun's agent killed (round 10)
                              r"[\"'`]Killed(?:: 9)?[\"'`]", r"\bReceived 9 death signal\b",
                              # round 11: a runner's "terminated by signal 9" (GNU time, make), a shell's job report
                              # without its line number, zh_CN's word at a progress line's end
                              signalled(9),
                              r"\b\d{1,10} Killed {1,8}\S", r"(?:已被杀死|已杀死)\s{0,16}$",
                              # round 7: zsh's and macOS's words, a shell's job table, Go's exec, a signal named
                              r"\b(?:zsh|bash|sh): killed\b", r"^\s{0,16}Killed: 9\b", r"^\s{0,16}[+-]? {0,8}Killed {1,40}(?!process\b)\S",
                              r"\bsignal: killed\b", r"\b(?:by|with|received) (?:signal )?SIGKILL\b",
                              r"\btask \d{1,9}: Killed\b", r"\bsignal 9 \(SIGKILL\)", r"<Signals\.SIGKILL: 9>"),
         case=PUBLIC + "argo-8981-killed.log"),
    # Facts a log states, read by the rules above (the exit code, the size df shows of /dev/shm).
    Rule("", kind="exit-code", where=d.exit_code_of, patterns=compile_all(
        r"\bexited with (?:exit )?code (?P<code>\d{1,3})\b", r"command terminated with (?:exit )?code (?P<code>\d{1,3})\b",
        r"\"ExitCode\": (?P<code>\d{1,3})\b", r"\bEXIT CODE: (?P<code>\d{1,3})\b", r"\bExit Code:\s{1,20}(?P<code>\d{1,3})\b",
        r"\bterminated with exit code \((?P<code>\d{1,3})\)", r"\bJob failed: exit code (?P<code>\d{1,3})\b",
        # round 3: any "exit code N" / "exit status N" / "returned code N" / torchrun's "exitcode: -N", never 0
        r"\b[Ee]xit (?:[Cc]ode|[Ss]tatus)(?: of)?:?\s{0,3}\(?(?P<code>-?[1-9]\d{0,2})\b",
        r"\breturned (?:non-zero exit status |(?:exit )?code )(?P<code>-?[1-9]\d{0,2})\b",
        r"\bexitcode: (?P<code>-?[1-9]\d{0,2})\b",
        r"\bWorker \(pid:\d{1,10}\) was sent code (?P<code>\d{1,3})!",  # gunicorn/arbiter.py
        # round 7: "exit with status code N", torchrun's aligned "exitcode  : -N", make's "Error N", Gradle's value
        r"\bexit(?:ed|s)? with (?:status code|status|return code) (?P<code>-?[1-9]\d{0,2})\b",
        r"\bexitcode {0,4}: {0,4}(?P<code>-?[1-9]\d{0,2})\b",
        r"\bmake(?:\[\d{1,4}\])?: \*\*\* \[[^\]\n]{1,200}\] Error (?P<code>[1-9]\d{0,2})\b",
        r"\bnon-zero exit value (?P<code>[1-9]\d{0,2})\b",
        # docker build's, YARN's, docker ps's, DeepSpeed's launcher's
        r"\breturned a non-zero code: (?P<code>[1-9]\d{0,2})\b", r"\b[Ee]xit code is (?P<code>-?[1-9]\d{0,2})\b",
        r"\bExited \((?P<code>[1-9]\d{0,2})\)", r"\breturn code ?= ?(?P<code>-?[1-9]\d{0,2})\b",
        # Vertex AI's replica (round 9)
        r"\bnon-zero status of (?P<code>-?[1-9]\d{0,2})\b")),
    Rule("", kind="job-memory", where=d.job_memory, patterns=compile_all(
        r"\bMinMemoryNode=(?P<mem>\d{1,12}[KMGT]?)\b", r"#SBATCH --mem=(?P<mem>\d{1,12}[KMGTkmgt]?)[bB]?\b")),
    Rule("", kind="df-shm", where=d.df_size, patterns=(d.DF_SHM,)),
    # The kernel's memory report (show_mem: `Mem-Info:`, `Free swap  = 0kB`), printed by the OOM killer's
    # dump_header and by a failed page allocation: beside a SIGKILL it names the OOM killer (round 6).
    Rule("", kind="kernel-memory", patterns=compile_all(r"\bkernel: {0,4}(?:\[[\d. ]{1,20}\] {0,4})?(?:Mem-Info:|"
                                                        r"Free swap {1,4}= {0,4}\d{1,20}kB)")),
    # Out of memory in any program's words and case, where nothing above named it (round 11: Coq's "Error: Out of
    # memory.", Ray's RayOutOfMemoryError, strace's mmap ENOMEM); not a GPU's nor shared memory's.
    Rule("oom", UNDETERMINED, kind="out-of-memory", any_case=True,
         patterns=compile_all(r"^(?![^\n]{0,300}(?:cuda|gpu|/dev/shm|shared memory|object store))[^\n]{0,300}?"
                              r"(?:\bout of memory\b|outofmemoryerror|= -1 enomem \(cannot allocate memory\))"),
         summary="A program ran out of memory ({line}): the process's own memory (the RAM, a memory limit, an rlimit), "
                 "not /dev/shm.", fix=fixes.memory_error_fix() + ".", case=RULE_TESTS + "test_round_11s_classes"),
    Rule("unknown", kind="error", decide=d.unknown_failure, always=True, gives=("unknown", "none"),
         patterns=compile_all(r"Traceback \(most recent call last\)", r"^\s{0,16}[\w.]{0,200}(?:Error|Exception): ",
                              r"Segmentation fault|core dumped|Fatal Python error|terminate called after throwing",
                              r"^\s{0,16}(?:ERROR|FATAL|CRITICAL)\b"),
         case=TESTS + "test_nothing_found"),
)

# Kinds that only mark a line for the rules (an error nothing names, the exit code, df's /dev/shm): not signals
# of a failure of their own, so `scan` leaves them out.
MARKS = ("error", "exit-code", "df-shm", "job-memory", "kernel-memory")
