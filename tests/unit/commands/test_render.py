"""`shmguard render`'s own checks of what it is given (the manifests themselves: tests/unit/manifests/)."""

from __future__ import annotations

import pytest

from shmguard import main

JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--image", "x"]


@pytest.mark.parametrize("kind", ["k8s", "compose"])
def test_too_few_cpus_for_the_workers_are_said_as_run_says_them(capsys, kind):
    """A new user's read: `render --cpus 2` with 4 workers was silent, where check and run warn
    (sizing.cpu_shortfall, the one message)."""
    assert main(["render", kind, *JOB, "--cpus", "2"]) == 0
    err = capsys.readouterr().err
    assert ("shmguard: warning: 4 workers per process but --cpus 2 gives 2 CPUs per process: the extra workers wait "
            "for CPU and still hold shm; num_workers=2 is enough") in err
    assert main(["render", kind, *JOB, "--cpus", "5"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["run", *JOB[:-2], "--cpus", "2", "--dry-run", "x"]) == 0
    run = capsys.readouterr()
    assert "4 workers per process but --cpus 2 gives 2 CPUs per process" in run.out + run.err
