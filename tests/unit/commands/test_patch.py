"""`shmguard patch` and `render` at the command line: files, stdin, -i, --check, and bad input."""

from __future__ import annotations

import io

import pytest
import yaml

from shmguard import main

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
    ("- just\n- a list\n", "document 1: a manifest must be a mapping, not list"),
    ("kind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec: {containers: []}\n", "containers is missing or empty"),
    ("kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    name: c\n", "spec.containers should be a list"),
])
def test_bad_manifests_exit_2_and_write_nothing(tmp_path, capsys, text, message):
    good = tmp_path / "a.yaml"
    good.write_text(MANIFEST)
    bad = tmp_path / "b.yaml"
    bad.write_text(text)
    assert main(["patch", *JOB, "-i", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and message in err and "Traceback" not in err
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
    assert yaml.safe_load(capsys.readouterr().out)["services"]["train"]["shm_size"] == "369m"
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
