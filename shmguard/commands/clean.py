"""`shmguard clean`: remove the PyTorch segments in /dev/shm that nothing can use any more, and only those.

/dev/shm is world-writable and nothing cleans it: files a killed job left stay until reboot and hold RAM (on a
Slurm node without job_container/tmpfs, every job's leftovers; on a Docker host, those of containers run with
--ipc=host). A file is removed only when all of these hold:

- it is a regular file directly in DIR whose name is one of PyTorch's segments (SEGMENT_KINDS);
- its owner is the given user (SLURM_JOB_UID in an Epilog; by default the caller);
- no process this one can see has it open or mapped (matched by device and inode, across namespaces; a
  process whose main thread has exited is read through its live threads: shmguard.probe.holders);
- for names that carry their creator's pid (torch_<pid>_…): that pid is gone (or a zombie);
- and nothing it cannot see could hold it: this process sees the host's pids (a container's pid namespace
  hides the processes outside it, and pids in names may be another namespace's), every process that could
  open the file (its owner's, or anyone's when the file's mode lets others in) could be inspected, and the
  look at every process ended before its deadline (a read of /proc that hangs must not hang an Epilog).

Everything else is kept, and what could not be decided is said so, with the reason. A pid in a name that is
alive again as another process (pid reuse) keeps its file until that process exits: being wrong the other way
would remove a live job's batch. Not seen by any rule: a batch a worker wrote just before it died, waiting in
a live trainer's queue, is held by no process (the DataLoader fails on such a worker death anyway).

`decide` is the rule, a plain function of what was seen; `survey` reads, `clean` removes (re-checking each file
just before unlinking it). Standard library only: it runs as a Slurm Epilog on bare nodes.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat as stat_module

from shmguard.errors import UsageError
from shmguard.jsonout import stamp
from shmguard.probe import Root
from shmguard.probe import holders as holders_module
from shmguard.probe.holders import Holders, scan
from shmguard.probe.shm import printable
from shmguard.record import Record
from shmguard.units import format_size

DEFAULT_DIR = "/dev/shm"
# A process's start time is known to about a second (/proc/stat's btime is whole seconds, and moves with the clock).
CLOCK_SLACK = 2.0
REMOVE, KEEP, UNDECIDED = "remove", "keep", "undecided"
MAX_UID = 2**32 - 2  # uid_t is 32 bits and (uid_t)-1 means "no uid"
# Why a process could not be inspected, by what this one lacks (shmguard.probe.holders.what_is_lacking).
BLIND_BECAUSE = {
    "root": "run as root",
    "CAP_SYS_PTRACE": "kept, because a non-dumpable process can only be inspected with CAP_SYS_PTRACE, which this "
                      "root process lacks (a container's root: add --cap-add SYS_PTRACE)",
    None: "kept, because even root with CAP_SYS_PTRACE was refused: a security module (AppArmor, SELinux) or the "
          "kernel protects that process",
}

# (kind, pattern, what made it); a `pid` group names the creator's pid.
SEGMENT_KINDS = (
    # PyTorch's file_system strategy (and CUDA IPC ref counters): "/torch_<pid>_<random>_<counter>"
    # (at::NewProcessWideShmHandle, aten/src/ATen/MapAllocator.cpp).
    ("torch", re.compile(r"torch_(?P<pid>[0-9]+)_.+"), "PyTorch's shared tensors"),
    # The OpenMP runtime that PyTorch builds link (LLVM/Intel libomp) registers itself in
    # "__KMP_REGISTERED_LIB_<pid>[_<uid>]" and unlinks it at exit: a killed process leaves it.
    ("openmp", re.compile(r"__KMP_REGISTERED_LIB_(?P<pid>[0-9]+)(_[0-9]+)?"), "the OpenMP runtime's registration"),
    # NCCL's shared-memory transport: "/dev/shm/nccl-XXXXXX" (mkstemp), unlinked once every peer mapped it.
    ("nccl", re.compile(r"nccl-[A-Za-z0-9]{6}"), "NCCL's shared-memory transport"),
    # multiprocessing's POSIX semaphores (the DataLoader's queues and events): sem_open("/mp-XXXXXXXX").
    ("semaphore", re.compile(r"sem\.mp-[a-z0-9_]+"), "multiprocessing's semaphores"),
)


class Candidate(Record):
    """A PyTorch segment of DIR, as seen (lstat)."""

    name: str
    kind: str
    pid: int | None
    uid: int
    mode: int
    bytes: int
    device: int
    inode: int
    modified: float = 0.0  # st_mtime: the creator was alive then


class Decision(Record):
    name: str
    kind: str
    bytes: int
    action: str  # remove, keep or undecided
    reason: str


class Survey(Record):
    directory: str
    uid: int
    candidates: tuple  # Candidate, the given user's
    others: int  # PyTorch segments of other users: never touched
    holders: Holders | None


class Outcome(Record):
    directory: str
    uid: int
    dry_run: bool
    decisions: tuple  # Decision
    others: int
    notes: tuple
    errors: tuple  # files that could not be removed

    def of(self, action: str) -> list[Decision]:
        return [d for d in self.decisions if d.action == action]


def segment_kind(name: str) -> tuple[str, int | None] | None:
    """(kind, creator pid or None) when the name is one of PyTorch's segments, else None."""
    for kind, pattern, _what in SEGMENT_KINDS:
        match = pattern.fullmatch(name)
        if match:
            pid = match.groupdict().get("pid")
            return kind, int(pid) if pid is not None else None
    return None


def decide(candidate: Candidate, holders: Holders) -> Decision:
    """Remove, keep or undecided for one of the user's segments, and why (the rule in the module's docstring)."""

    def decision(action: str, reason: str) -> Decision:
        return Decision(name=candidate.name, kind=candidate.kind, bytes=candidate.bytes, action=action, reason=reason)

    if (candidate.device, candidate.inode) in holders.held:
        return decision(KEEP, "in use: a process has it open or mapped")
    if not holders.finished:
        stuck = f" (pid {holders.unfinished[0]} did not answer in time)" if holders.unfinished else ""
        return decision(UNDECIDED, f"not every process could be looked at within {holders_module.DEADLINE:g} s"
                                   f"{stuck}: what it holds cannot be known")
    if candidate.pid is not None and candidate.pid in holders.alive:
        started = holders.started.get(candidate.pid)
        if started is not None and started > candidate.modified + CLOCK_SLACK:
            return decision(UNDECIDED, f"pid {candidate.pid} is alive but started after the file was last written: "
                                       f"likely a reused pid; kept until it exits")
        return decision(KEEP, f"pid {candidate.pid} is alive")
    if not holders.host_pids:
        return decision(UNDECIDED, "this process does not see the host's pids (a container's pid namespace): "
                                   "a process outside it may hold the file, and pids in names may be another "
                                   "namespace's")
    others_may_open = candidate.mode & 0o066
    unseen = [pid for pid, uid in holders.blind if others_may_open or uid is None or uid == candidate.uid]
    if unseen:
        return decision(UNDECIDED, f"{len(unseen)} process{'es' if len(unseen) > 1 else ''} that could hold it "
                                   f"could not be inspected (pid {', '.join(map(str, unseen[:3]))}"
                                   f"{' …' if len(unseen) > 3 else ''}): {BLIND_BECAUSE[holders.lacks]}")
    gone = f"pid {candidate.pid} is gone; " if candidate.pid is not None else ""
    return decision(REMOVE, f"{gone}no process holds it")


def candidate_of(name: str, st: os.stat_result) -> Candidate | None:
    kind = segment_kind(name)
    if kind is None or not stat_module.S_ISREG(st.st_mode):
        return None
    return Candidate(name=name, kind=kind[0], pid=kind[1], uid=st.st_uid, mode=stat_module.S_IMODE(st.st_mode),
                     bytes=st.st_blocks * 512, device=st.st_dev, inode=st.st_ino, modified=st.st_mtime)


def directory_path(directory: str, cwd: str | None = None) -> str:
    """--dir as the folder it names: relative to the current directory, without the trailing `/` or `/.` that
    would make the kernel follow a symlink O_NOFOLLOW refuses (`link/` is `link`: refused alike). `..` and the
    folders above are left to the kernel (a symlink there is followed, as anywhere but in the last component)."""
    path = directory if directory.startswith("/") else os.path.join(cwd or os.getcwd(), directory)
    while path.endswith(("/", "/.")) and path not in ("/", "/."):
        path = path[:-1] if path.endswith("/") else path[:-2]
    return path if path != "/." else "/"


def _is_link(root: Root, path: str) -> bool:
    try:
        return stat_module.S_ISLNK(root.lstat(path).st_mode)
    except OSError:
        return False


def _open_dir(root: Root, directory: str) -> int:
    try:
        return os.open(root.join(directory), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(root, directory):
            raise UsageError(f"--dir {directory} is a symbolic link: give the folder it points to") from None
        raise UsageError(f"--dir {directory}: {exc.strerror}") from None


def survey(directory: str, uid: int, root: Root) -> Survey:
    """The user's PyTorch segments in the directory, and (only when there are some) what holds files there."""
    dir_fd = _open_dir(root, directory)
    try:
        device = os.fstat(dir_fd).st_dev
        mine, others = [], 0
        for name in sorted(os.listdir(dir_fd)):
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            candidate = candidate_of(name, st)
            if candidate is None:
                continue
            if candidate.uid != uid:
                others += 1
            elif st.st_dev == device:
                mine.append(candidate)
    finally:
        os.close(dir_fd)
    return Survey(directory=directory, uid=uid, candidates=tuple(mine), others=others,
                  holders=scan(root, device, {c.inode for c in mine}) if mine else None)


def notes_for(survey_: Survey) -> tuple[str, ...]:
    notes = []
    if survey_.others:
        notes.append(f"{survey_.others} PyTorch segment{'s' if survey_.others > 1 else ''} of other users left alone")
    holders = survey_.holders
    if holders is not None and holders.blind:
        strangers = [uid for _pid, uid in holders.blind if uid is not None and uid != survey_.uid]
        if strangers:
            many = len(strangers) > 1
            notes.append(f"{len(strangers)} process{'es' if many else ''} of other users could not be inspected; "
                         f"{'they are' if many else 'it is'} taken not to hold this user's owner-only (0600) "
                         f"segments, which only root could open")
    return tuple(notes)


def unlink_if_same(dir_fd: int, candidate: Candidate) -> None:
    """Unlink the file if it is still the one judged (same inode, owner and device): a name that was replaced
    meanwhile is left alone. OSError when the unlink fails."""
    st = os.stat(candidate.name, dir_fd=dir_fd, follow_symlinks=False)
    if (st.st_ino, st.st_dev, st.st_uid) != (candidate.inode, candidate.device, candidate.uid):
        raise FileNotFoundError(2, "replaced since it was judged; left alone", candidate.name)
    os.unlink(candidate.name, dir_fd=dir_fd)


def clean(directory: str, uid: int, dry_run: bool = False, root: Root | None = None) -> Outcome:
    """Decide for each of the user's segments, and remove those to remove (unless dry_run)."""
    root = root or Root()
    seen = survey(directory, uid, root)
    decisions = [decide(c, seen.holders) for c in seen.candidates] if seen.holders is not None else []
    errors = []
    if not dry_run and any(d.action == REMOVE for d in decisions):
        dir_fd = _open_dir(root, directory)
        try:
            by_name = {c.name: c for c in seen.candidates}
            for i, decision in enumerate(decisions):
                if decision.action != REMOVE:
                    continue
                try:
                    unlink_if_same(dir_fd, by_name[decision.name])
                except OSError as exc:
                    errors.append(f"{printable(decision.name)}: {exc.strerror or exc}")
                    decisions[i] = decision.replace(action=KEEP, reason=f"could not remove: {exc.strerror or exc}")
        finally:
            os.close(dir_fd)
    return Outcome(directory=directory, uid=uid, dry_run=dry_run, decisions=tuple(decisions), others=seen.others,
                   notes=notes_for(seen), errors=tuple(errors))


def parse_uid(value: str | None, environ) -> int:
    """--uid: a number or a user name; else SLURM_JOB_UID (an Epilog's job owner); else the caller's uid."""
    source = "--uid"
    if value is None:
        value = (environ.get("SLURM_JOB_UID") or "").strip() or None
        source = "SLURM_JOB_UID"
        if value is None:
            return os.getuid()
    text = str(value).strip()
    if text.isascii() and text.isdigit():  # str.isdigit also takes '²' and '١٠٠٠', which are no uid
        uid = int(text)
        if uid > MAX_UID:
            raise UsageError(f"{source} {text}: a uid is at most {MAX_UID}")
        return uid
    try:
        import pwd

        return pwd.getpwnam(text).pw_uid
    except (KeyError, ImportError, ValueError):  # ValueError: a NUL in the name
        raise UsageError(f"{source} {printable(str(value))!r} is neither a number nor a user here") from None


def as_dict(outcome: Outcome) -> dict:
    def items(action: str) -> list[dict]:
        return [{"name": printable(d.name), "kind": d.kind, "bytes": d.bytes, "reason": d.reason}
                for d in outcome.of(action)]

    return stamp({"dir": outcome.directory, "uid": outcome.uid, "dry_run": outcome.dry_run,
                  "removed": items(REMOVE), "removed_bytes": sum(d.bytes for d in outcome.of(REMOVE)),
                  "kept": items(KEEP), "undecided": items(UNDECIDED), "other_users": outcome.others,
                  "notes": list(outcome.notes), "errors": list(outcome.errors)})


def as_text(outcome: Outcome) -> str:
    removed = outcome.of(REMOVE)
    verb = "would remove" if outcome.dry_run else "removed"
    lines = [f"shmguard clean: {outcome.directory}, uid {outcome.uid}: {verb} {len(removed)} segment"
             f"{'' if len(removed) == 1 else 's'} ({format_size(sum(d.bytes for d in removed))})"]
    labels = {REMOVE: verb, KEEP: "kept", UNDECIDED: "undecided"}
    rows = [(labels[d.action], printable(d.name), format_size(d.bytes), d.reason) for d in outcome.decisions]
    if rows:
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
    lines += [f"  note: {note}" for note in outcome.notes]
    lines += [f"  error: {error}" for error in outcome.errors]
    return "\n".join(lines)


def run(directory: str | None, uid: str | None, dry_run: bool, as_json: bool, root: str | None = None,
        environ=None, echo=print) -> int:
    """The command: 0 when every file to remove was removed (or nothing was to be), 1 when one could not be."""
    environ = os.environ if environ is None else environ
    outcome = clean(directory_path(directory or DEFAULT_DIR), parse_uid(uid, environ), dry_run, Root(root))
    echo(json.dumps(as_dict(outcome), indent=2) if as_json else as_text(outcome))
    return 1 if outcome.errors else 0


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    @click.command("clean")
    @click.option("--dir", "directory", default="/dev/shm", show_default=True, metavar="DIR", help="The directory to clean.")
    @click.option("--uid", metavar="UID", help="Whose segments: a uid or user name (default: SLURM_JOB_UID, else yours).")
    @click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    @click.option("--root", hidden=True, help="Read /proc and DIR under this root (tests).")
    def clean_command(directory, uid, dry_run, as_json, root) -> int:
        """Remove PyTorch segments (torch_<pid>_*, …) in /dev/shm that no process can use any more.

        Only the given user's files, only when their creator pid is gone and no process has them open or
        mapped; what cannot be decided (a container's pid namespace, processes it cannot inspect) is kept
        and said. For a Slurm Epilog, a Docker host or any shared node. Exit 0, or 1 when a file to remove
        could not be removed.
        """
        return run(directory, uid, dry_run, as_json, root, echo=click.echo)

    return clean_command
