"""README's headline, repeated on the engine for one of its 13 configurations (benchmarks/sizing_rules.py,
BENCHMARKS.md section 4; tests/repo/test_readme_figures.py holds the README to the recorded run of all 13): the
demo job of 4 workers × batch 64 × prefetch 2 of 3×224×224 float32 dies in Docker's 64 MiB and in the seeds'
formula's 294 MiB (it leaves out the batches in the trainer's hands), and completes in shmguard's size."""

from __future__ import annotations

import pytest

from shmguard import model
from shmguard.job import make_job
from tests.support.paths import benchmark

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

CONFIG = (4, 64, 2, False, 1, False)  # workers, batch, prefetch, pin_memory, processes, variable-size samples
STEP_TIME = 0.3  # the trainer far slower than its loaders, so the prefetch queue fills however busy the machine


def sizing_rules():
    return benchmark("sizing_rules")


@pytest.mark.parametrize(("rule", "completes"), [
    ("docker default 64 MiB", False), ("seeds' formula", False), ("shmguard", True)])
def test_one_configuration_of_the_headline(docker_client, demo_image, rule, completes):
    bench = sizing_rules()
    job = make_job(workers=4, batch_size=64, prefetch_factor=2, sample_shape=bench.SHAPE)
    size = bench.rules(job)[rule]
    result = bench.run_one(docker_client, CONFIG, size, STEP_TIME, labels={"org.shmguard.test": "sizing-rules"})
    assert result["completed"] is completes, (rule, size, result)
    if completes:
        assert model.shm_bytes(job) >= result["peak_bytes"], result  # the model's peak holds what was used
    else:
        assert result["shm_error"], result  # it died of shared memory, not of anything else
