"""`shmguard measure` with real torch: measured bytes match an independent computation for fixed tensors,
dicts of tensors, variable-size samples and an IterableDataset; the user's errors are shown as theirs."""

from __future__ import annotations

import json
import os

import pytest

from shmguard import main
from tests.support.paths import CHECKOUT

ROOT = str(CHECKOUT)


@pytest.fixture(autouse=True)
def torch_needed():
    try:
        import torch  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true: torch must be installed (scripts/setup.sh installs torch==2.13.0)", pytrace=False)
        pytest.skip("torch is not installed")


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)


def measured(capsys, *args):
    assert main(["measure", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_fixed_tensors(capsys):
    data = measured(capsys, "--dataset", "tests.support.datasets:fixed", "--batch-size", "16")
    assert data["max_batch_bytes"] == 16 * 3 * 32 * 32 * 4 + 16 * 8  # images float32 + labels int64
    assert data["sample_bytes"] * 16 >= data["max_batch_bytes"]
    assert [t["shape"] for t in data["tensors"]] == [[16, 3, 32, 32], [16]]


def test_dicts_of_tensors(capsys):
    data = measured(capsys, "--dataset", "tests.support.datasets:dicts", "--batch-size", "8")
    assert data["max_batch_bytes"] == 8 * (3 * 16 * 16 + 16 * 16 + 4 * 4 * 4 + 8)
    assert {t["path"] for t in data["tensors"]} == {"batch['image']", "batch['mask']", "batch['meta']['boxes']",
                                                    "batch['meta']['id']"}


def test_variable_size_takes_the_largest_batch(capsys):
    from tests.support.datasets import Variable

    data = measured(capsys, "--dataset", "tests.support.datasets:variable", "--collate-fn",
                    "tests.support.datasets:pad", "--batch-size", "4", "--samples", "40", "--seed", "3")
    longest = max(len(Variable()[i]) for i in range(len(Variable())))
    assert data["max_batch_bytes"] == 4 * longest * 8  # 40 samples read every index once: the longest is in a batch
    again = measured(capsys, "--dataset", "tests.support.datasets:variable", "--collate-fn",
                     "tests.support.datasets:pad", "--batch-size", "4", "--samples", "8", "--seed", "3")
    import torch

    order = torch.randperm(len(Variable()), generator=torch.Generator().manual_seed(3)).tolist()[:8]
    lengths = [len(Variable()[i]) for i in order]
    assert again["max_batch_bytes"] == 4 * 8 * max(max(lengths[:4]), max(lengths[4:]))


def test_iterable_dataset(capsys):
    data = measured(capsys, "--dataset", "tests.support.datasets:stream", "--batch-size", "10")
    assert data["max_batch_bytes"] == 10 * 8 * 8 + 10 * 8 and data["batches"] == 3


def test_human_output_names_the_options(capsys):
    assert main(["measure", "--dataset", "tests.support.datasets:fixed", "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "--batch-size 16 --sample-bytes 12296" in out and "batch[0]: float32 [16, 3, 32, 32]" in out


def test_check_takes_a_dataset(capsys):
    main(["check", "--json", "--workers", "2", "--dataset", "tests.support.datasets:fixed", "--batch-size", "16"])
    data = json.loads(capsys.readouterr().out)
    assert data["job"]["sample_bytes"] * 16 >= 16 * 3 * 32 * 32 * 4 + 16 * 8


def test_the_users_error_is_shown_as_theirs(capsys):
    assert main(["measure", "--dataset", "tests.support.datasets:broken", "--batch-size", "4"]) == 2
    err = capsys.readouterr().err
    assert "ValueError: my dataset is broken: no files in /data/train" in err
    assert "helper_that_fails" in err and "support/datasets.py" in err
    assert "shmguard/commands" not in err  # our frames are left out


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz'"),
    ("tests.support.datasets:nothing_here", "has no 'nothing_here'"),
    ("tests.support.datasets:not_callable", "is not callable"),
    ("just_a_module", "must be module:callable"),
])
def test_bad_specs(capsys, spec, message):
    assert main(["measure", "--dataset", spec, "--batch-size", "4"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_without_torch(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["measure", "--dataset", "tests.support.datasets:fixed", "--batch-size", "4"]) == 2
    assert "needs PyTorch" in capsys.readouterr().err


def test_a_zip_collate_is_one_page_rounded_segment_per_tensor(capsys):
    from tests.support.datasets import Detection

    data = measured(capsys, "--dataset", "tests.support.datasets:detection", "--collate-fn",
                    "tests.support.datasets:zip_collate", "--batch-size", "4", "--samples", "16")
    # every index is read once; the batch taking the most /dev/shm counts, its tensors one by one
    import torch

    order = torch.randperm(16, generator=torch.Generator().manual_seed(0)).tolist()
    best = None
    for start in range(0, 16, 4):
        sizes = []
        for i in order[start:start + 4]:
            image, target = Detection()[i]
            sizes += [image.numel(), target["boxes"].numel() * 4, target["labels"].numel() * 8]
        shm = sum(-(-s // 4096) * 4096 for s in sizes)
        if best is None or shm > best[0]:
            best = (shm, sizes)
    assert data["batch_shm_bytes"] == best[0] and data["segment_count"] == 12
    assert sorted(segments_of(data["batch_segments"])) == sorted(best[1])
    assert {"kind": "int", "count": 4, "bytes": 0} in data["pipe"]  # image_id stays a number: no shm
    assert "--batch-segments" in data["options"]


def segments_of(text):
    from shmguard.segments import decode

    return decode(text)


def test_pipe_leaves_are_reported_and_not_counted(capsys):
    data = measured(capsys, "--dataset", "tests.support.datasets:with_pipe_leaves", "--collate-fn",
                    "tests.support.datasets:zip_collate", "--batch-size", "4")
    assert data["max_batch_bytes"] == 4 * 10
    assert data["segment_count"] == 4 and data["batch_shm_bytes"] == 4 * 4096  # the empty tensors make none
    pipe = {p["kind"]: p for p in data["pipe"]}
    assert pipe["numpy array"]["count"] == 4 and pipe["numpy array"]["bytes"] == 400
    assert pipe["str"]["count"] == 4
    fs = measured(capsys, "--dataset", "tests.support.datasets:with_pipe_leaves", "--collate-fn",
                  "tests.support.datasets:zip_collate", "--batch-size", "4", "--sharing-strategy", "file_system")
    assert fs["segment_count"] == 8 and fs["batch_shm_bytes"] == 8 * 4096


def test_default_collate_needs_no_segment_list(capsys):
    data = measured(capsys, "--dataset", "tests.support.datasets:fixed", "--batch-size", "16")
    assert data["segment_count"] == 2 and "--batch-segments" not in data["options"]


def test_check_uses_the_measured_segments(capsys):
    import json as _json

    from shmguard import model
    from shmguard.job import make_job

    assert main(["check", "--json", "--workers", "2", "--dataset", "tests.support.datasets:detection",
                 "--collate-fn", "tests.support.datasets:zip_collate", "--batch-size", "4"]) in (0, 1)
    out = capsys.readouterr().out
    data = _json.loads(out)
    segs = data["job"]["batch_segments"]
    assert len(segs) == 12
    job = make_job(workers=2, batch_size=4, sample_bytes=str(data["job"]["sample_bytes"]), batch_segments=tuple(segs))
    stacked = job.replace(batch_segments=None)
    assert model.shm_bytes(job) > model.shm_bytes(stacked)
