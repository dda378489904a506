"""The Python API in real containers (the demo image with this checkout inside: SHMGUARD_DEMO_IMAGE).

The loader is the one that dies at Docker's default 64 MB (tests/integration/test_bus_error.py
shows the same batches, 3x224x224 float32 with int64 labels, killing the demo trainer):
4 workers x batch 32, 18.4 MiB a batch. Four containers in all, each one Python process
(torchrun: two), the scripts passed with `python -c`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from shmguard import sizing
from shmguard.api import fit
from shmguard.units import docker_size, parse_size
from tests.support import death as shm_death
from tests.support.containers import SESSION, TEST_LABEL
from tests.support.paths import CHECKOUT

MIB = 2**20
IMAGE = 3 * 224 * 224 * 4
README = CHECKOUT / "README.md"
API_GUIDE = CHECKOUT / "docs" / "guides" / "python-api.md"

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

PRELUDE = r'''
import gc, json, sys, warnings, torch, shmguard
from torch.utils.data import DataLoader, Dataset

class Images(Dataset):
    def __len__(self): return 100_000
    def __getitem__(self, i): return torch.full((3, 224, 224), float(i % 7)), i

class Records(Dataset):
    def __len__(self): return 100
    def __getitem__(self, i):
        return {"image": torch.zeros(3, 8, 8), "mask": torch.zeros(8, 8, dtype=torch.uint8), "id": i, "name": str(i)}

def loader(**kw):
    return DataLoader(Images(), batch_size=32, num_workers=4, timeout=60, **kw)

def run(guarded, steps=16):
    done = 0
    for images, labels in guarded:
        done += 1
        if done == steps:
            break
    return {"steps": done, "workers": guarded.loader.num_workers, "prefetch": guarded.loader.prefetch_factor}

def chain(exc):
    parts = []
    while exc is not None:
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)

def attempt(step):
    try:
        return step()
    except shmguard.ShmTooSmall as exc:
        return {"error": str(exc), "shm_size": exc.shm_size, "cause": repr(exc.__cause__),
                "cause_chain": chain(exc.__cause__)}
    except Exception as exc:  # not diagnosed: the test that looks at this step says so
        return {"undiagnosed": chain(exc)}

out = {}
'''

# At 64 MB: check_loader and guard(raise) stop it, fit runs it, warn lets it crash and the crash is diagnosed;
# then a batch lost in the full /dev/shm times out, and that is diagnosed too.
AT_64M = PRELUDE + r'''
out["check_loader"] = attempt(lambda: shmguard.check_loader(loader()).verdict)
out["raise"] = attempt(lambda: run(shmguard.guard(loader())))
out["fit"] = attempt(lambda: run(shmguard.guard(loader(), on_short="fit")))
gc.collect()
print("WARN-STEP", file=sys.stderr, flush=True)  # what the workers write after this is the warn step's own crash
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", shmguard.ShmguardWarning)
    out["warn"] = attempt(lambda: run(shmguard.guard(loader(), on_short="warn"), steps=200))
out["warnings"] = [str(w.message) for w in caught if w.category is shmguard.ShmguardWarning]
gc.collect()
print("LOST-STEP", file=sys.stderr, flush=True)
# A collate that leaves the batch in ordinary memory: the worker's queue feeder thread moves it into /dev/shm,
# fails when /dev/shm is full, prints why and loses the batch; the trainer waits for it until its timeout.
def stacked(batch):
    return torch.stack([image for image, _ in batch]), torch.tensor([label for _, label in batch])
with warnings.catch_warnings():
    warnings.simplefilter("ignore", shmguard.ShmguardWarning)
    out["lost"] = attempt(lambda: run(shmguard.guard(DataLoader(Images(), batch_size=32, num_workers=4, timeout=20,
                                                                collate_fn=stacked), on_short="warn"), steps=200))
print("RESULT " + json.dumps(out), flush=True)
'''

# At the size the message named (with a 1-CPU quota and a 2 GB memory limit): the same loader runs, the
# container's limits are read, dict batches and a list collate are measured.
AT_SIZE = PRELUDE + r'''
out["raise"] = attempt(lambda: run(shmguard.guard(loader())))
out["found"] = {f.id: [f.status, f.found] for f in shmguard.check_loader(loader()).findings}
out["recommend"] = shmguard.recommend_workers(loader())
out["dict"] = list(shmguard.check_loader(DataLoader(Records(), batch_size=10, num_workers=2)).job.batch_segments)
out["list"] = list(shmguard.check_loader(loader(collate_fn=list)).job.batch_segments)
print("RESULT " + json.dumps(out), flush=True)
'''

# One process per rank under torchrun: each counts both ranks' loaders against the one /dev/shm.
RANKS = PRELUDE + r'''
import os
out["rank"] = int(os.environ["LOCAL_RANK"])
out["check"] = attempt(lambda: shmguard.check_loader(DataLoader(Images(), batch_size=8, num_workers=3)).verdict)
os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())  # one write: the two ranks share stdout
'''


def expected_job(workers: int, batch: int, procs: int = 1):
    """The job the container should measure, built on the host with the same functions."""
    return fit.loader_job(workers, batch, 2, [batch * IMAGE, batch * 8], procs=procs)


def results(logs: str) -> list[dict[str, Any]]:
    """Every `RESULT {...}` object in the logs, also when two processes' lines ran into one (torchrun's ranks)."""
    decoder = json.JSONDecoder()
    found = []
    for match in re.finditer(r"RESULT ", logs):
        found.append(decoder.raw_decode(logs, match.end())[0])
    return found


def run_once(docker_client, image: str, command: list[str], **kwargs) -> tuple[int, str]:
    """One labelled container to its end; removed whatever happens."""
    container = docker_client.containers.create(image, command, labels={TEST_LABEL: SESSION}, **kwargs)
    try:
        container.start()
        code = container.wait(timeout=600)["StatusCode"]
        return code, container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
    finally:
        container.remove(force=True)


@pytest.fixture(scope="module")
def at_64m(docker_client, demo_image):
    code, logs = run_once(docker_client, demo_image, ["python", "-c", AT_64M], shm_size="64m")
    assert code == 0, logs[-3000:]
    return results(logs)[0], logs


def test_check_loader_and_guard_stop_it_with_the_size_to_ask_for(at_64m):
    out, logs = at_64m
    size = docker_size(sizing.shm_size(expected_job(4, 32)))
    for step in ("check_loader", "raise"):
        assert out[step]["shm_size"] == size, out[step]
        assert f"--shm-size={size}" in out[step]["error"] and f"sizeLimit: {size[:-1]}Mi" in out[step]["error"]
        assert "64.0 MiB (Docker's default)" in out[step]["error"]
        assert out[step]["cause"] == "None"  # stopped by the check, not by a crash
    before_warn = logs.split("WARN-STEP")[0]  # the steps above ran before any worker could crash (stderr is ordered)
    assert "WARN-STEP" in logs and "Bus error" not in before_warn and "unable to allocate" not in before_warn


def test_fit_completes_at_64m_with_fewer_workers(at_64m):
    out, logs = at_64m
    fitted = fit.fit_job(expected_job(4, 32), _shm_64m())
    assert out["fit"] == {"steps": 16, "workers": fitted.workers, "prefetch": fitted.prefetch_factor}
    assert 0 < fitted.workers < 4
    assert f"fitted it to /dev/shm: num_workers 4 -> {fitted.workers}, prefetch_factor 2 -> 1" in logs


def test_warn_goes_on_and_the_crash_comes_back_diagnosed(at_64m):
    out, logs = at_64m
    size = docker_size(sizing.shm_size(expected_job(4, 32)))
    assert len(out["warnings"]) == 1 and f"--shm-size={size}" in out["warnings"][0]
    crash = out["warn"]
    assert "error" in crash, crash  # the unguarded-size loader did not get through 200 batches, and was diagnosed
    assert crash["error"].startswith("shmguard: the DataLoader ran out of shared memory")
    assert "/dev/shm: 64.0 MiB" in crash["error"] and f"--shm-size={size}" in crash["error"]
    # The crash itself was a shared-memory death, in whichever form the machine's load gave it (#34): a worker
    # killed or exited, its error sent back, or a lost batch and the timeout with /dev/shm left without room
    # for another batch (the free space the diagnosis saw, while the loader's batches still held it).
    workers_said = logs.split("WARN-STEP")[1].split("LOST-STEP")[0]
    assert shm_death.form(crash["cause_chain"], workers_said, shm_full=no_room(crash)), (crash, workers_said[-3000:])


def no_room(crash: dict[str, Any]) -> bool:
    """/dev/shm had no room for another batch when the crash was diagnosed (the loader's batches still in it)."""
    free = parse_size(re.search(r"/dev/shm: [^\n]*?, ([\d.]+ \w+) free", crash["error"]).group(1))
    return free < 32 * (IMAGE + 8)


def test_a_batch_lost_in_the_full_shm_times_out_and_is_diagnosed(at_64m):
    # The form #34 met on a loaded machine (the test above assumed a worker's death), made on purpose.
    out, logs = at_64m
    crash = out["lost"]
    assert crash.get("cause") == "RuntimeError('DataLoader timed out after 20 seconds')", crash
    assert crash["error"].startswith("shmguard: the DataLoader ran out of shared memory (a batch that never came)")
    assert f"--shm-size={docker_size(sizing.shm_size(expected_job(4, 32)))}" in crash["error"]
    assert shm_death.form(crash["cause_chain"], logs.split("LOST-STEP")[1], no_room(crash)) == "timeout", crash


def _shm_64m():
    from shmguard.probe.shm import ShmInfo

    return ShmInfo(total=64 * MIB, free=64 * MIB, fstype="tmpfs")


def test_at_the_named_size_it_completes_and_batches_are_measured(docker_client, demo_image):
    size = docker_size(sizing.shm_size(expected_job(4, 32)))
    code, logs = run_once(docker_client, demo_image, ["python", "-c", AT_SIZE], shm_size=size,
                          nano_cpus=10**9, mem_limit="2g")
    assert code == 0, logs[-3000:]
    out = results(logs)[0]
    assert out["raise"] == {"steps": 16, "workers": 4, "prefetch": 2}
    assert out["found"]["shm.size"] == ["PASS", f"{int(size[:-1])}.0 MiB"]
    assert out["found"]["memory.limit"] == ["PASS", "2.0 GiB"]
    assert out["found"]["cpu.workers"] == ["WARN", "1 CPUs"]  # 4 workers on a 1-CPU quota
    assert out["recommend"] == 1
    assert sorted(out["dict"]) == [10 * 8, 10 * 64, 10 * 3 * 8 * 8 * 4]  # id, mask, image; the strings pickled
    assert out["list"] == [IMAGE] * 32  # a list collate: one segment per sample, the int labels pickled


def test_torchrun_ranks_are_counted_twice(docker_client, demo_image):
    one, two = expected_job(3, 8, procs=1), expected_job(3, 8, procs=2)
    assert sizing.shm_size(one) <= 64 * MIB < sizing.shm_size(two), "premise: one rank fits 64 MB, two do not"
    code, logs = run_once(docker_client, demo_image, ["torchrun", "--nproc-per-node", "2", "--no-python",
                                                      "python", "-c", RANKS], shm_size="64m")
    assert code == 0, logs[-3000:]
    ranks = sorted(results(logs), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1], logs[-3000:]
    for rank in ranks:
        assert rank["check"]["shm_size"] == docker_size(sizing.shm_size(two)), rank
        assert "2 processes x DataLoader(num_workers=3" in rank["check"]["error"]


def readme_example() -> str:
    """The README's Python API example, which the guide (docs/guides/python-api.md) opens with too."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Python API"):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    guide = re.search(r"```python\n(.*?)```", API_GUIDE.read_text(encoding="utf-8"), re.S).group(1)
    assert guide == block, "the README's and the guide's examples differ"
    return block


def test_the_readme_example_runs_as_written(docker_client, demo_image):
    code_block = readme_example()
    assert len(code_block.strip().splitlines()) <= 12
    code, logs = run_once(docker_client, demo_image, ["python", "-c", code_block], shm_size="64m")
    assert code == 0, logs[-3000:]
    fitted = fit.fit_job(expected_job(4, 32), _shm_64m())
    assert f"fitted it to /dev/shm: num_workers 4 -> {fitted.workers}" in logs
    assert f"trained on 256 images with {fitted.workers} workers" in logs
