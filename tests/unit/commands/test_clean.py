"""`shmguard clean`: which segments go, which stay, and why; on fixture trees (a fake /proc beside a real DIR)."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from shmguard import main, schemas
from shmguard.commands.clean import (
    KEEP,
    REMOVE,
    UNDECIDED,
    Candidate,
    clean,
    decide,
    parse_uid,
    segment_kind,
    unlink_if_same,
)
from shmguard.probe import Root
from shmguard.probe.holders import Holders, parse_btime, parse_maps, parse_stat_start, parse_stat_state, scan

ME = os.getuid()
OTHER = ME + 4242
DEV, INO = 41, 1000


@pytest.mark.parametrize("name, kind", [
    ("torch_1234_2857360871_0", ("torch", 1234)), ("torch_7_1_12", ("torch", 7)),
    ("__KMP_REGISTERED_LIB_4321", ("openmp", 4321)), ("__KMP_REGISTERED_LIB_4321_1000", ("openmp", 4321)),
    ("nccl-Ab12Cd", ("nccl", None)), ("sem.mp-3wd_mhgf", ("semaphore", None)),
    ("torch_abc_1", None), ("torch_12", None), ("psm_deadbeef", None), ("libpod_lock", None),
    ("nccl-toolong1", None), ("sem.loky-1", None), ("mytorch_1_2", None),
])
def test_which_names_are_pytorchs(name, kind):
    assert segment_kind(name) == kind


def candidate(name="torch_500_1_0", pid=500, uid=ME, mode=0o600, modified=1000.0):
    return Candidate(name=name, kind="torch" if pid else "nccl", pid=pid, uid=uid, mode=mode, bytes=4096, device=DEV,
                     inode=INO, modified=modified)


def holders(alive=(), held=(), blind=(), host_pids=True, started=None):
    return Holders(alive=frozenset(alive), held=frozenset(held), blind=tuple(blind), host_pids=host_pids,
                   started=started or {})


@pytest.mark.parametrize("seen, action, why", [
    (holders(), REMOVE, "pid 500 is gone; no process holds it"),
    (holders(held={(DEV, INO)}), KEEP, "in use"),
    (holders(alive={500}, held={(DEV, INO)}), KEEP, "in use"),
    (holders(alive={500}), KEEP, "pid 500 is alive"),
    (holders(alive={500}, started={500: 999.0}), KEEP, "pid 500 is alive"),
    (holders(alive={500}, started={500: 5000.0}), UNDECIDED, "likely a reused pid"),
    (holders(host_pids=False), UNDECIDED, "pid namespace"),
    (holders(blind=[(77, ME)]), UNDECIDED, "could not be inspected (pid 77)"),
    (holders(blind=[(77, None)]), UNDECIDED, "could not be inspected"),
    (holders(blind=[(1, OTHER)]), REMOVE, "no process holds it"),  # another user cannot open a 0600 file
])
def test_the_rule(seen, action, why):
    decision = decide(candidate(), seen)
    assert decision.action == action and why in decision.reason


def test_a_file_others_may_open_is_undecided_while_their_processes_are_unseen():
    assert decide(candidate(mode=0o644), holders(blind=[(1, OTHER)])).action == UNDECIDED


def test_a_nameless_segment_goes_only_when_nothing_holds_it():
    nccl = candidate(name="nccl-Ab12Cd", pid=None)
    assert decide(nccl, holders(alive={500})).action == REMOVE
    assert decide(nccl, holders(held={(DEV, INO)})).action == KEEP


def test_parsers():
    line = "7f0000000000-7f0000001000 rw-s 00000000 00:29 1234    /dev/shm/torch_1_2_3 (deleted)\n"
    assert parse_maps(line, os.makedev(0, 0x29)) == {(os.makedev(0, 0x29), 1234)}
    assert parse_maps(line, os.makedev(0, 0x30)) == set() and parse_maps("garbage\n", 1) == set()
    stat = "42 (a (weird) name) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"
    assert parse_stat_state(stat) == "S" and parse_stat_start(stat) == 12345
    assert parse_btime("cpu 1 2\nbtime 1764070000\n") == 1764070000 and parse_btime("") is None


# ---- on a tree: a fake /proc beside real files in dev/shm ----

class World:
    """A root with dev/shm files and fake processes (stat, status, maps, fd links)."""

    def __init__(self, path):
        self.root = Root(str(path))
        self.shm = path / "dev" / "shm"
        self.shm.mkdir(parents=True)
        self.proc = path / "proc"
        (self.proc / "2").mkdir(parents=True)
        # kthreadd as this machine shows it (flags 2129984: PF_KTHREAD); its maps cannot be read, and need not be.
        (self.proc / "2" / "stat").write_text("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0")
        (self.proc / "stat").write_text("cpu 1\nbtime 0\n")

    def segment(self, name, size=4096, uid=None):
        path = self.shm / name
        path.write_bytes(b"x" * size)
        if uid is not None:
            os.chown(path, uid, uid)
        return path

    def process(self, pid, uid=ME, state="S", maps="", fds=(), readable=True, start=0):
        d = self.proc / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "stat").write_text(f"{pid} (python) {state} 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        if readable:
            (d / "maps").write_text(maps)
        else:
            (d / "maps").mkdir()  # unreadable: reading a directory fails, as EACCES would
        (d / "fdinfo").mkdir()
        mounts = []
        for i, target in enumerate(fds):
            os.symlink(target, d / "fd" / str(i))
            st = os.stat(target)
            mount_id = 500 + i
            (d / "fdinfo" / str(i)).write_text(f"pos:\t0\nflags:\t02\nmnt_id:\t{mount_id}\nino:\t{st.st_ino}\n")
            mounts.append(f"{mount_id} 1 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / /x rw - tmpfs tmpfs rw")
        (d / "mountinfo").write_text("".join(line + "\n" for line in mounts))

    def maps_line(self, path):
        st = os.stat(path)
        return (f"7f0000000000-7f0000001000 rw-s 00000000 {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x} "
                f"{st.st_ino} /dev/shm/{path.name}\n")


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def test_the_scan_sees_live_processes_and_what_they_hold(world):
    mapped = world.segment("torch_10_1_0")
    opened = world.segment("torch_11_1_0")
    world.process(20, maps=world.maps_line(mapped))
    world.process(21, fds=[str(opened)])
    world.process(22, state="Z")
    world.process(23, uid=OTHER, readable=False)
    seen = scan(world.root, os.stat(world.shm).st_dev)
    assert seen.alive == {2, 20, 21, 23} and seen.host_pids
    assert {(os.stat(p).st_dev, os.stat(p).st_ino) for p in (mapped, opened)} <= seen.held
    assert seen.blind == ((23, OTHER),)


def test_clean_removes_only_what_nothing_can_use(world):
    stale = world.segment("torch_30_1_0", size=8192)
    zombie_made = world.segment("torch_31_1_0")
    live = world.segment("torch_32_1_0")
    held = world.segment("torch_33_1_0")
    nccl = world.segment("nccl-Ab12Cd")
    mine_not_torch = world.segment("notes.txt")
    world.process(31, state="Z")
    world.process(32)
    world.process(40, fds=[str(held)])
    dry = clean("/dev/shm", ME, dry_run=True, root=world.root)
    assert {d.name for d in dry.of(REMOVE)} == {stale.name, zombie_made.name, nccl.name}
    assert all(p.exists() for p in (stale, zombie_made, nccl))  # --dry-run removes nothing
    done = clean("/dev/shm", ME, root=world.root)
    assert {d.name for d in done.of(REMOVE)} == {stale.name, zombie_made.name, nccl.name} and done.errors == ()
    assert not stale.exists() and not zombie_made.exists() and not nccl.exists()
    assert live.exists() and held.exists() and mine_not_torch.exists()
    assert {d.name: d.reason for d in done.of(KEEP)} == {live.name: "pid 32 is alive",
                                                          held.name: "in use: a process has it open or mapped"}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_segments_are_never_touched(world):
    theirs = world.segment("torch_30_1_0", uid=OTHER)
    outcome = clean("/dev/shm", ME, root=world.root)
    assert theirs.exists() and outcome.others == 1 and outcome.decisions == ()
    assert "1 PyTorch segment of other users left alone" in outcome.notes


def test_inside_a_pid_namespace_nothing_is_decided(world):
    (world.proc / "2" / "stat").write_text("2 (python) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0")
    stale = world.segment("torch_30_1_0")
    outcome = clean("/dev/shm", ME, root=world.root)
    assert stale.exists() and [d.action for d in outcome.decisions] == [UNDECIDED]
    assert "pid namespace" in outcome.decisions[0].reason


def test_a_symlink_or_directory_with_a_segments_name_is_not_a_segment(world, tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    os.symlink(target, world.shm / "torch_30_1_0")
    (world.shm / "torch_31_1_0").mkdir()
    assert clean("/dev/shm", ME, root=world.root).decisions == ()
    assert target.exists() and (world.shm / "torch_30_1_0").is_symlink()


def test_a_file_replaced_after_it_was_judged_is_left_alone(world):
    path = world.segment("torch_30_1_0")
    st = os.stat(path)
    judged = Candidate(name=path.name, kind="torch", pid=30, uid=st.st_uid, mode=0o600, bytes=4096, device=st.st_dev,
                       inode=st.st_ino)
    keep_inode = open(path, "rb")  # so that the new file cannot get the old one's inode number
    path.unlink()
    world.segment("torch_30_1_0")  # the same name, another file
    fd = os.open(world.shm, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileNotFoundError):
            unlink_if_same(fd, judged)
    finally:
        os.close(fd)
        keep_inode.close()
    assert path.exists()


def test_uid_defaults_to_slurms_job_owner_then_the_caller():
    assert parse_uid("1234", {}) == 1234 and parse_uid(None, {"SLURM_JOB_UID": "77"}) == 77
    assert parse_uid(None, {}) == ME and parse_uid("root", {}) == 0
    from shmguard.errors import UsageError

    with pytest.raises(UsageError):
        parse_uid("no-such-user-here", {})


def test_the_command_json_and_text(world, capsys):
    world.segment("torch_30_1_0")
    assert main(["clean", "--root", str(world.root.path), "--uid", str(ME), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schemas.load("clean")).validate(data)
    assert data["dry_run"] and [item["name"] for item in data["removed"]] == ["torch_30_1_0"]
    assert data["removed_bytes"] == 4096 and (world.shm / "torch_30_1_0").exists()
    assert main(["clean", "--root", str(world.root.path), "--uid", str(ME)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"shmguard clean: /dev/shm, uid {ME}: removed 1 segment (4.0 KiB)") and "torch_30_1_0" in out
    assert not (world.shm / "torch_30_1_0").exists()


def test_a_missing_dir_is_one_line_and_exit_2(world, capsys):
    assert main(["clean", "--root", str(world.root.path), "--dir", "/nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shmguard: error: --dir /nowhere") and "Traceback" not in err


# ---- issue 43.4: a process whose main thread has exited still holds its files ----

THREADS_HOLD = r"""
import ctypes, mmap, os, sys, threading, time
folder = sys.argv[1]
def make(name):
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
    return path
mapped, opened, named = make("nccl-Mapped"), make("nccl-Opened"), make(f"torch_{os.getpid()}_1_0")
ready = threading.Event()
def hold():
    fd = os.open(mapped, os.O_RDWR)
    memory = mmap.mmap(fd, 4096)  # held by the mapping alone
    os.close(fd)
    kept = open(opened, "rb")  # held by the open file alone
    ready.set()
    time.sleep(120)
threading.Thread(target=hold).start()
ready.wait()
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)  # the main thread ends; the other one goes on holding both files
"""


def test_a_process_whose_main_thread_exited_keeps_its_files(tmp_path):
    """The leader of a process whose main thread called pthread_exit shows Z, with empty fd and maps, while its
    other threads hold and map the files: clean read it as gone and removed a live segment (issue 43.4)."""
    import subprocess
    import sys
    import tempfile
    import time

    folder = tempfile.mkdtemp(prefix="shmguard-test-clean-", dir="/dev/shm")
    child = subprocess.Popen([sys.executable, "-c", THREADS_HOLD, folder], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        for _ in range(200):  # the main thread's exit is seen in /proc a moment after it is asked for
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert os.listdir(f"/proc/{child.pid}/fd") == []  # what the old scan read: nothing held
        outcome = clean(folder, ME, root=Root("/"))
        actions = {d.name: d.action for d in outcome.decisions}
        assert actions == {"nccl-Mapped": KEEP, "nccl-Opened": KEEP, f"torch_{child.pid}_1_0": KEEP}
        assert sorted(os.listdir(folder)) == sorted(actions)
    finally:
        child.kill()
        child.wait()
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


def test_a_zombie_leader_with_a_live_thread_is_alive(world):
    world.process(50, state="Z")
    (world.proc / "50" / "task" / "51").mkdir(parents=True)
    (world.proc / "50" / "task" / "51" / "stat").write_text("51 (python) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0")
    world.process(60, state="Z")
    assert 50 in scan(world.root, 1).alive and 60 not in scan(world.root, 1).alive


# ---- issue 43.5: never ask another filesystem, and never wait for ever ----

def test_the_scan_never_follows_an_open_files_link(world, monkeypatch):
    """stat of /proc/PID/fd/N asks the file's filesystem: a FUSE or NFS mount that does not answer hung clean for
    ever. The file is told from fdinfo and mountinfo instead (tests/integration/test_clean_hang.py: a real one)."""
    held = world.segment("torch_30_1_0")
    world.process(40, fds=[str(held)])
    real_stat = os.stat

    def no_following(path, *args, **kwargs):
        assert "/fd/" not in str(path), f"stat followed {path}"
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", no_following)
    outcome = clean("/dev/shm", ME, root=world.root)
    assert [(d.action, d.reason) for d in outcome.decisions] == [(KEEP, "in use: a process has it open or mapped")]


def test_a_file_on_another_filesystem_is_not_looked_at(world, tmp_path):
    """An fd on another mount (another device in the mountinfo) is skipped by its device alone."""
    stale = world.segment("torch_30_1_0")
    world.process(40, fds=[str(stale)])
    (world.proc / "40" / "mountinfo").write_text("500 1 0:999 / /nfs rw - nfs server:/x rw\n")
    outcome = clean("/dev/shm", ME, root=world.root)
    assert [d.action for d in outcome.decisions] == [REMOVE]


class StuckRoot(Root):
    """A root where reading one process's maps blocks (a process stuck in a page fault holds its map's lock)."""

    def __init__(self, path, stuck_pid):
        super().__init__(path)
        import threading

        self.stuck = f"/proc/{stuck_pid}/maps"
        self.release = threading.Event()

    def read(self, path):
        if path == self.stuck:
            self.release.wait()
        return super().read(path)


def test_the_scan_has_a_deadline(world):
    stale = world.segment("torch_30_1_0")
    world.process(70)
    world.process(71, fds=[str(stale)])
    root = StuckRoot(world.root.path, 70)
    try:
        seen = scan(root, os.stat(world.shm).st_dev, deadline=0.2)
        assert not seen.finished and seen.unfinished[:2] == (70, 71)
        decision = decide(candidate(), seen)
        assert decision.action == UNDECIDED and "pid 70 did not answer in time" in decision.reason
    finally:
        root.release.set()


# ---- issue 44.10: what a root process lacks, said as it is ----

@pytest.mark.parametrize("lacks, said", [
    ("root", "run as root"),
    ("CAP_SYS_PTRACE", "CAP_SYS_PTRACE"),
    (None, "a security module"),
])
def test_why_a_process_could_not_be_inspected(lacks, said):
    seen = Holders(alive=frozenset(), held=frozenset(), blind=((77, ME),), host_pids=True, lacks=lacks)
    decision = decide(candidate(), seen)
    assert decision.action == UNDECIDED and said in decision.reason
    assert ("run as root" in decision.reason) == (lacks == "root")


@pytest.mark.parametrize("uid, caps, lacks", [
    (1000, "000001ffffffffff", "root"),
    (0, "000001ffffffffff", None),
    (0, "00000000a80425fb", "CAP_SYS_PTRACE"),  # Docker's default set: no CAP_SYS_PTRACE
])
def test_what_this_process_lacks(world, uid, caps, lacks):
    from shmguard.probe.holders import what_is_lacking

    (world.proc / "self").mkdir()
    (world.proc / "self" / "status").write_text(f"Name:\tshmguard\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{caps}\n")
    assert what_is_lacking(world.root) == lacks


# ---- issue 43.12: --dir and --uid ----

def test_dir_with_a_trailing_slash_is_refused_as_the_link_itself(world, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "torch_30_1_0").write_bytes(b"x")
    os.symlink(elsewhere, world.shm / "link")
    for spelling in ("/dev/shm/link", "/dev/shm/link/", "/dev/shm/link//", "/dev/shm/link/."):
        assert main(["clean", "--root", str(world.root.path), "--dir", spelling]) == 2
        err = capsys.readouterr().err
        assert err == "shmguard: error: --dir /dev/shm/link is a symbolic link: give the folder it points to\n"
    assert (elsewhere / "torch_30_1_0").exists()


def test_a_relative_dir_is_the_current_directorys(tmp_path, monkeypatch):
    from shmguard.commands.clean import directory_path

    monkeypatch.chdir(tmp_path)
    assert directory_path("shm") == f"{tmp_path}/shm"
    assert directory_path("./shm/") == f"{tmp_path}/./shm"
    assert directory_path("/") == "/" and directory_path("/dev/shm/.") == "/dev/shm"


def test_a_relative_dir_is_not_taken_from_the_root(tmp_path, monkeypatch, capsys):
    """`--dir shm` in /work was read as /shm."""
    here = tmp_path / "here"
    (here / "shm").mkdir(parents=True)
    (here / "shm" / "torch_999999_1_0").write_bytes(b"x")
    monkeypatch.chdir(here)
    assert main(["clean", "--dir", "shm", "--uid", str(ME), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dir"] == f"{here}/shm" and [item["name"] for item in data["undecided"] + data["removed"]] == \
        ["torch_999999_1_0"]


@pytest.mark.parametrize("value", ["²", "١٠٠٠", "4294967295", "4294967296", "99999999999999999999", "1\x00"])
def test_a_uid_that_is_no_uid_is_one_line_and_exit_2(world, value, capsys):
    assert main(["clean", "--root", str(world.root.path), "--uid", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shmguard: error: --uid") and err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_slurm_job_uid_is_named():
    from shmguard.errors import UsageError

    with pytest.raises(UsageError, match="SLURM_JOB_UID"):
        parse_uid(None, {"SLURM_JOB_UID": "²"})
    assert parse_uid("4294967294", {}) == 4294967294
