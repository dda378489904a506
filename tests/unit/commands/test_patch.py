"""`shmguard patch` and `render` at the command line: files, stdin, -i, --check, and bad input."""

from __future__ import annotations

import io
import json

import pytest
import yaml

from shmguard import main
from tests.support.paths import CHECKOUT, DATA

JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {lr: "0.1"}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: demo:1
"""


def test_patch_in_place_then_check_is_clean(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(MANIFEST)
    assert main(["patch", *JOB, "--check", str(path)]) == 1
    captured = capsys.readouterr()
    assert "Job/train" in captured.err and "added dshm" in captured.err  # what changes, in words
    assert f"--- {path}\n" in captured.out and "+      - name: dshm\n" in captured.out  # and as a unified diff
    assert path.read_text() == MANIFEST  # --check writes nothing
    assert main(["patch", *JOB, "-i", str(path)]) == 0
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs[0] == yaml.safe_load(MANIFEST.split("---")[0])
    assert docs[1]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert main(["patch", *JOB, "--check", str(path)]) == 0
    before = path.read_text()
    assert main(["patch", *JOB, "-i", str(path)]) == 0 and path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_patch_stdin_to_stdout(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(MANIFEST))
    assert main(["patch", *JOB]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(docs) == 2 and docs[1]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/dev/shm"


@pytest.mark.parametrize("text, message", [
    ("kind: Pod\nspec: [unclosed\n", "not valid YAML at line"),
    ("- just\n- a list\n", "document 1: error: a manifest must be a mapping, not list"),
    ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec: {containers: []}\n",
     "containers is missing or empty"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    name: c\n", "spec.containers should be a list"),
    ("kind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec: {containers: [{name: c, image: x}]}\n", "no apiVersion"),
])
def test_bad_manifests_exit_2_and_write_nothing(tmp_path, capsys, text, message):
    good = tmp_path / "a.yaml"
    good.write_text(MANIFEST)
    bad = tmp_path / "b.yaml"
    bad.write_text(text)
    assert main(["patch", *JOB, "-i", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and message in err and "Traceback" not in err
    assert f"{good}: document 2 Job/train" in err  # the good file is still reported
    assert good.read_text() == MANIFEST and bad.read_text() == text


def test_not_utf8_and_missing_files(tmp_path, capsys):
    binary = tmp_path / "x.yaml"
    binary.write_bytes(b"kind: Pod\n\xff\xfe\n")
    assert main(["patch", *JOB, str(binary)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert main(["patch", *JOB, str(tmp_path / "missing.yaml")]) == 2


def test_in_place_needs_files(capsys):
    assert main(["patch", *JOB, "-i"]) == 2
    assert main(["patch", *JOB, "-i", "--check", "x.yaml"]) == 2


def test_render_cli(capsys):
    assert main(["render", "k8s", *JOB, "--image", "demo:1", "--kind", "deployment", "--", "python", "t.py"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["kind"] == "Deployment" and doc["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "t.py"]
    assert main(["render", "compose", *JOB, "--image", "demo:1"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["services"]["train"]["shm_size"] == "368m"
    assert main(["render", "k8s", *JOB, "--image", "demo:1", "--memory", "100m"]) == 2
    assert "cannot hold" in capsys.readouterr().err


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)) + "kind: Pod\n"


@pytest.mark.parametrize("text, message", [
    (BOMB, "alias bomb"),
    ("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    ("a:\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(1, 600)), "nested too deeply"),
    ("kind: !!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
    ("kind: Pod\nkind: Deployment\n", "duplicate key 'kind'"),
])
def test_hostile_yaml_is_refused_without_writing(tmp_path, capsys, text, message):
    path = tmp_path / "evil.yaml"
    path.write_text(text)
    assert main(["patch", *JOB, "-i", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "pwned" not in capsys.readouterr().out
    assert path.read_text() == text


def test_modest_aliases_are_fine(capsys):
    from shmguard.manifests.yamlio import load

    docs = load("base: &b {image: x}\nkind: ConfigMap\ndata: {a: *b}\n", "x")
    assert docs[0]["data"]["a"] == {"image": "x"}


def test_too_large_input_is_refused(monkeypatch, tmp_path, capsys):
    import shmguard.manifests.yamlio as patch_module

    monkeypatch.setattr(patch_module, "MAX_INPUT_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("kind: ConfigMap\ndata:\n" + "".join(f"  k{i}: v\n" for i in range(50)))
    assert main(["patch", *JOB, str(path)]) == 2
    assert "split the manifest" in capsys.readouterr().err


def test_two_processes_patching_one_file_leave_one_complete_result(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "job.yaml"
    small = ["--workers", "1", "--batch-size", "8", "--sample-shape", "3,224,224"]
    big = ["--workers", "8", "--batch-size", "128", "--sample-shape", "3,224,224"]
    expected = []
    for job in (small, big):
        path.write_text(MANIFEST)
        subprocess.run([sys.executable, "-m", "shmguard", "patch", *job, "-i", str(path)], check=True, capture_output=True)
        expected.append(path.read_text())
    for _ in range(5):
        path.write_text(MANIFEST)
        procs = [subprocess.Popen([sys.executable, "-m", "shmguard", "patch", *job, "-i", str(path)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for job in (small, big)]
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
        assert path.read_text() in expected
        assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_a_100_mb_document_is_refused_in_bounded_memory(tmp_path, capsys):
    import resource

    path = tmp_path / "huge.yaml"
    with open(path, "w") as f:
        f.write("kind: ConfigMap\ndata:\n")
        line = "  k: " + "v" * 1000 + "\n"
        for _ in range(100 * 1024):
            f.write(line)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["patch", *JOB, "-i", str(path)]) == 2
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert "split the manifest" in capsys.readouterr().err
    assert grown_kib < 400 * 1024  # the 64 MiB read limit (as str), not the 100 MiB file and a parse of it


# --- issue #18 on the YAML path: each of these failed on the loader before the event composer ----------

P = ["--workers", "1", "--batch-size", "1", "--sample-bytes", "1k"]


def run_cli(args: list[str], stdin: bytes, timeout: float = 60):
    """The CLI in its own process (a segfault or a hang must not take pytest with it)."""
    import os
    import subprocess
    import sys

    root = str(CHECKOUT)
    env = dict(os.environ, PYTHONPATH=root)
    return subprocess.run([sys.executable, "-m", "shmguard", *args], input=stdin, capture_output=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("text, message", [
    ("kind: ConfigMap\nx: &a [*a]\n", "a cycle"),  # hung, growing memory
    ("kind: ConfigMap\nx: &a {y: *a}\n", "a cycle"),
    ("- " * 30_000 + "x\n", "nested too deeply"),  # segfault (exit 139)
    ("- " * 2_000 + "x\n", "nested too deeply"),  # RecursionError (exit 70)
    ("kind: ConfigMap\nx: " + "[" * 400 + "]" * 400 + "\n", "nested too deeply"),  # crashed in the dumper
], ids=["list-cycle", "map-cycle", "30000-dashes", "2000-dashes", "400-brackets"])
def test_hostile_input_is_one_line_and_exit_2(text, message):
    proc = run_cli(["patch", *P], text.encode())
    err = proc.stderr.decode()
    assert proc.returncode == 2 and message in err and len(err.strip().splitlines()) == 1 and not proc.stdout


def test_a_huge_document_is_refused_while_parsing(monkeypatch, capsys):
    import shmguard.manifests.yamlio as yamlio

    monkeypatch.setattr(yamlio, "MAX_DOCUMENT_NODES", 10_000)
    # 30,000 items and then a syntax error: refused for its size before the parser gets there.
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: ConfigMap\nitems:\n" + "- x\n" * 30_000 + "x: [\n"))
    assert main(["patch", *P]) == 2
    err = capsys.readouterr().err
    assert "more than 10,000 YAML nodes in one document" in err and "alias" not in err


def test_merge_keys_are_accepted(capsys, monkeypatch):
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: m}\nspec:\n  template:\n    spec:\n      containers:\n"
            "      - &c {name: a, image: x}\n      - <<: *c\n        name: b\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["patch", *P]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert [c["name"] for c in doc["spec"]["template"]["spec"]["containers"]] == ["a", "b"]


@pytest.mark.parametrize("text", [
    "# " + "[" * 501 + "\nkind: ConfigMap\ndata: {a: b}\n",
    "kind: ConfigMap\ndata:\n  s: |\n    " + "[" * 600 + "{\n",
    "---\n# Source: chart/templates/empty.yaml\n---\n# only a comment\n",
    "kind: ConfigMap\ndata: {a: b}\n---\n",
], ids=["brackets-in-comment", "brackets-in-block-scalar", "helm-stubs", "trailing-separator"])
def test_text_the_patch_does_not_touch_passes_byte_for_byte(capsys, monkeypatch, text):
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["patch", *P]) == 0
    assert capsys.readouterr().out == text


def test_in_place_keeps_mode_and_owner(tmp_path):
    import os

    for mode in (0o644, 0o444, 0o640):
        path = tmp_path / f"m{mode:o}.yaml"
        path.write_text(MANIFEST)
        os.chmod(path, mode)
        owner = (1234, 2345) if os.geteuid() == 0 else (os.getuid(), os.getgid())
        os.chown(path, *owner)
        assert main(["patch", *P, "-i", str(path)]) == 0
        st = os.stat(path)
        assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, *owner)
        assert "dshm" in path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m444.yaml", "m640.yaml", "m644.yaml"]


def test_in_place_refuses_a_symlink_unless_told(tmp_path, capsys):
    import os

    target = tmp_path / "real.yaml"
    target.write_text(MANIFEST)
    link = tmp_path / "link.yaml"
    link.symlink_to(target.name)
    assert main(["patch", *P, "-i", str(link)]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "--follow-symlinks" in err and len(err.strip().splitlines()) == 1
    assert link.is_symlink() and target.read_text() == MANIFEST
    assert main(["patch", *P, "-i", "--follow-symlinks", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "real.yaml" and "dshm" in target.read_text()


@pytest.mark.parametrize("where, error", [("mkstemp", 30), ("fsync", 28), ("mkstemp", 13)])  # EROFS, ENOSPC, EACCES
def test_unwritable_directory_or_full_disk_fails_before_any_change_is_reported(tmp_path, capsys, monkeypatch,
                                                                               where, error):
    import os
    import tempfile

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(MANIFEST)
    second.write_text(MANIFEST.replace("{name: train}", "{name: other}"))
    calls = []

    def failing(real):
        def call(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:  # the second file: the first is already staged
                raise OSError(error, os.strerror(error))
            return real(*args, **kwargs)
        return call

    if where == "mkstemp":
        monkeypatch.setattr(tempfile, "mkstemp", failing(tempfile.mkstemp))
    else:
        monkeypatch.setattr(os, "fsync", failing(os.fsync))
    assert main(["patch", *P, "-i", str(first), str(second)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"shmguard: error: {second}: cannot write it ({os.strerror(error)}); "
                                                 f"no file was changed"]
    assert not captured.out
    assert first.read_text() == MANIFEST and sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]


def test_check_prints_a_unified_diff_and_patching_twice_changes_nothing(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    text = MANIFEST.replace("      - name: trainer", "      # the trainer\n      - name: trainer")
    path.write_text(text)
    assert main(["patch", *P, "--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"--- {path}\n+++ {path} (patched)\n@@ ")
    assert all(line[0] in " +@" for line in out.splitlines()[2:])  # only additions: nothing of the file is lost
    assert main(["patch", *P, "-i", str(path)]) == 0
    once = path.read_bytes()
    assert b"# the trainer\n" in once and once.startswith(text.encode())
    capsys.readouterr()
    inode = path.stat().st_ino
    assert main(["patch", *P, "-i", str(path)]) == 0 and path.read_bytes() == once
    assert path.stat().st_ino == inode  # nothing to change: the file is not even rewritten
    assert main(["patch", *P, "--check", str(path)]) == 0 and capsys.readouterr().out == ""


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs of its own (root only; skipped where mounting is not permitted)."""
    import subprocess

    mount = tmp_path / "fs"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.parametrize("trouble", ["full", "read-only"])
def test_real_full_disk_and_read_only_filesystem(small_tmpfs, capsys, trouble):
    import os
    import subprocess

    path = small_tmpfs / "job.yaml"
    path.write_text(MANIFEST)
    if trouble == "full":
        with open(small_tmpfs / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        expected = os.strerror(28)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
        expected = os.strerror(30)
    assert main(["patch", *P, "-i", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"shmguard: error: {path}: cannot write it ({expected}); "
                                                 f"no file was changed"]
    assert path.read_text() == MANIFEST and not [p for p in os.listdir(small_tmpfs) if p.endswith(".tmp")]


def test_too_large_input_is_refused_before_decoding(monkeypatch, tmp_path, capsys):
    import shmguard.manifests.yamlio as yamlio

    monkeypatch.setattr(yamlio, "MAX_INPUT_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_bytes(b"kind: ConfigMap\ndata:\n  k: '" + "é".encode() * 60 + b"'\n")  # byte 101 is inside an é
    assert main(["patch", *P, str(path)]) == 2
    err = capsys.readouterr().err
    assert "split the manifest" in err and "UTF-8" not in err


def test_mounts_shared_through_an_anchor_with_an_init_container_are_not_changed_for_it(tmp_path, capsys):
    """#18 item 22: the init container shares the trainer's volumeMounts through an alias; only the trainer
    gets /dev/shm, and the document that must be re-written says so."""
    path = tmp_path / "anchor.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  initContainers:\n  - name: init\n"
                    "    image: x\n    volumeMounts: &mounts\n    - {name: data, mountPath: /data}\n  containers:\n"
                    "  - name: train\n    image: x\n    volumeMounts: *mounts\n  volumes:\n  - {name: data, emptyDir: {}}\n")
    assert main(["patch", *P, str(path)]) == 0
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)
    assert [m["mountPath"] for m in doc["spec"]["initContainers"][0]["volumeMounts"]] == ["/data"]
    assert [m["mountPath"] for m in doc["spec"]["containers"][0]["volumeMounts"]] == ["/data", "/dev/shm"]
    assert "anchored (&mounts) and used through an alias elsewhere, and not every use of it gets the same change" in err
    assert "added dshm at /dev/shm (for train)" in err


def test_27_7_patch_dataset_sizes_the_job_render_dataset_sizes(tmp_path, capsys):
    """The measured batch segments, the collate, the tensors per sample and the NCCL transport travel to patch as
    they do to render: both write the same /dev/shm and memory limit for the same options."""
    options = ["--dataset", "tests.support.datasets:dicts", "--batch-size", "8", "--workers", "6",
               "--gpus", "2", "--procs-per-node", "2", "--nccl-transport", "p2p"]
    assert main(["render", "k8s", *options, "--image", "train:1", "--kind", "job"]) == 0
    rendered = yaml.safe_load(capsys.readouterr().out)["spec"]["template"]["spec"]
    path = tmp_path / "job.yaml"
    path.write_text(MANIFEST)
    assert main(["patch", *options, "--json", "-i", str(path)]) == 0
    report = json.loads(capsys.readouterr().err)  # one JSON object, the measurement's line inside it (issue 42.6)
    assert report["notes"] and all(isinstance(n, str) for n in report["notes"])
    (template,) = [t for t in report["files"][0]["templates"] if t["status"] == "changed"]
    patched = list(yaml.safe_load_all(path.read_text()))[1]["spec"]["template"]["spec"]
    assert patched["volumes"][0]["emptyDir"] == rendered["volumes"][0]["emptyDir"]
    assert template["needs"] == {"shm": rendered["volumes"][0]["emptyDir"]["sizeLimit"],
                                 "memory": rendered["containers"][0]["resources"]["limits"]["memory"]}


JSON_FILE = DATA / "manifests" / "json" / "kubernetes-multi-resource-rclist.json"


def test_33_13_a_json_manifest_stays_json(tmp_path, capsys):
    """Kubernetes' own JSON test data (two ReplicationControllers of pause containers; source in json/SOURCES)."""
    path = tmp_path / "rc.json"
    path.write_text(JSON_FILE.read_text())
    # #27.4: pause containers are no training job: by default the file passes through as it is.
    assert main(["patch", *JOB, "-i", str(path)]) == 0 and path.read_text() == JSON_FILE.read_text()
    assert "left alone: not a training job" in capsys.readouterr().err
    assert main(["patch", *JOB, "--all-templates", "-i", str(path)]) == 0
    capsys.readouterr()
    data = json.loads(path.read_text())  # still JSON (kubectl reads it), not YAML flow with bare keys
    expected = json.loads(JSON_FILE.read_text())
    from shmguard.manifests.podspec import PatchOptions, patch_documents

    patch_documents([expected], {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"},
                    PatchOptions(all_templates=True))
    assert data == expected and data["items"][0]["spec"]["template"]["spec"]["volumes"][0]["name"] == "dshm"
    assert main(["patch", *JOB, "--all-templates", "--check", str(path)]) == 0


def test_33_26_cr_only_line_ends_are_kept_and_mixed_ones_refused(tmp_path, capsys):
    """The JobSet ResNet example (tests/data/manifests) saved with CR-only line ends: patched, it still parses, to
    the patched documents, with CR line ends; a file that mixes them with LF is refused, exit 2, nothing written."""
    real = (DATA / "manifests" / "jobset-pytorch-resnet.yaml").read_text()
    path = tmp_path / "cr.yaml"
    path.write_bytes(real.replace("\n", "\r").encode())
    assert main(["patch", *JOB, "-i", str(path)]) == 0
    capsys.readouterr()
    out = path.read_bytes().decode()
    assert "\n" not in out and out.count("\r") > real.count("\n")
    from shmguard.manifests import yamlio
    from shmguard.manifests.podspec import patch_documents

    expected = yamlio.load(real, "x")
    patch_documents(expected, {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"})
    assert yamlio.load(out, "x") == expected
    assert main(["patch", *JOB, "--check", str(path)]) == 0  # patching again changes nothing
    mixed = tmp_path / "mixed.yaml"
    mixed.write_bytes((real.replace("\n", "\r", 5)).encode())
    assert main(["patch", *JOB, "-i", str(mixed)]) == 2
    assert "mixes line ends" in capsys.readouterr().err and mixed.read_bytes() == real.replace("\n", "\r", 5).encode()


CORPUS = DATA / "manifests"
FOUR = ["jobset-pytorch-resnet.yaml", "training-operator-pytorchjob-mnist-nccl.yaml", "mpi-operator-mpijob-pi.yaml",
        "kuberay-rayjob-resources.yaml"]


@pytest.mark.parametrize("failing, left_patched", [((3,), []), ((3, 4), ["a.yaml"])])
def test_33_27_in_place_over_several_files_is_all_or_nothing_and_says_what_changed(tmp_path, capsys, monkeypatch,
                                                                                    failing, left_patched):
    """Four real manifests patched with -i, the third rename failing (EPERM, as an immutable file gives): the two
    replaced before it are put back, no file is changed, no temporary file is left; when one cannot be put back
    either, the message names it."""
    import os

    paths = [tmp_path / name for name in ("a.yaml", "b.yaml", "c.yaml", "d.yaml")]
    originals = [(CORPUS / name).read_text() for name in FOUR]
    for path, text in zip(paths, originals):
        path.write_text(text)
    real_replace, calls = os.replace, []

    def replace(src, dst, *args, **kwargs):
        calls.append(dst)
        if len(calls) in failing:
            raise OSError(1, os.strerror(1))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["patch", *JOB, "-i", *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert f"{paths[2]}: cannot replace it (Operation not permitted)" in err
    changed = [p.name for p, text in zip(paths, originals) if p.read_text() != text]
    assert changed == left_patched
    if left_patched:
        assert f"left patched, as they could not be put back: {paths[0]}" in err
    else:
        assert "the 2 file(s) patched before it were put back: no file was changed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml", "c.yaml", "d.yaml"]
