"""The segment arithmetic: one page-rounded segment per tensor, found in any batch structure.

The rules are the ones measured in the demo container (benchmarks/segment_costs.py,
benchmarks/results/segment-costs.json)."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import pytest

from shmguard import model, segments, sizing
from shmguard.errors import UsageError
from shmguard.job import job_from_env, make_job
from tests.support import needs
from tests.support.paths import BENCHMARK_RESULTS


def test_page_rounding_and_empty_segments():
    assert segments.shm_of([]) == 0
    assert segments.shm_of([1]) == 4096
    assert segments.shm_of([4096, 4097]) == 4096 + 8192
    # torch shares an empty storage without a segment under file_descriptor (measured: 0 bytes)
    assert segments.shm_of([0]) == 0 and segments.segment_count([0, 0, 5]) == 1


def test_file_system_adds_a_64_byte_header_per_segment():
    # measured: 4032 bytes fit one page, 4033 and 4096 take two, an empty tensor takes a page
    assert segments.shm_of([4032], "file_system") == 4096
    assert segments.shm_of([4033], "file_system") == 8192
    assert segments.shm_of([4096], "file_system") == 8192
    assert segments.shm_of([0], "file_system") == 4096 and segments.segment_count([0], "file_system") == 1


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_the_bound_for_unknown_splits_covers_every_split(strategy):
    total, parts = 3 * 4096 + 100, 3
    bound = segments.bound_of_parts(total, parts, strategy)
    for a in range(0, total + 1, 97):
        for b in range(0, total - a + 1, 389):
            split = [a, b, total - a - b]
            assert segments.shm_of(split, strategy) <= bound, split
    assert segments.bound_of_parts(total, 1, strategy) == segments.shm_of([total], strategy)
    assert segments.bound_of_parts(0, 0, strategy) == 0


def test_encode_and_decode_fold_runs():
    sizes = (602112,) * 64 + (512, 7, 7)
    assert segments.encode(sizes) == "602112x64,512,7x2"
    assert segments.decode(segments.encode(sizes)) == sizes
    assert segments.encode(()) == ""
    for bad in ["", "12x", "x3", "-4", "4x0", "1.5", "4kx2"]:
        with pytest.raises(ValueError):
            segments.decode(bad)


def test_a_list_collate_costs_a_page_per_tensor_in_the_model():
    stacked = make_job(workers=2, batch_size=64, sample_bytes="1k")
    listed = stacked.replace(batch_segments=tuple([1024] * 64))
    assert model.batch_segment_bytes(listed) == 64 * 4096 > model.batch_segment_bytes(stacked)
    assert model.shm_bytes(listed) > model.shm_bytes(stacked)


def test_collate_list_without_a_measurement():
    job = make_job(workers=2, batch_size=512, sample_bytes="100", collate="list")
    assert model.batch_segment_bytes(job) == 512 * 4096
    assert model.segments_per_batch(job) == 512
    detection = make_job(workers=2, batch_size=4, sample_bytes=str(3 * 300 * 400 * 4 + 100), collate="list",
                         tensors_per_sample=3)
    # an image (whole pages and a bit) and two small tensors (boxes, labels): at most a page more each
    image = 3 * 300 * 400 * 4
    assert model.batch_segment_bytes(detection) == 4 * (segments.round_up(image + 100) + 2 * 4096)
    assert model.batch_segment_bytes(detection) >= 4 * segments.shm_of([image, 80, 20])
    assert model.segments_per_batch(detection) == 12


def test_default_collate_stacks_each_tensor_of_a_sample():
    one = make_job(workers=2, batch_size=64, sample_shape="3,224,224")
    assert model.batch_segment_bytes(one) == segments.round_up(64 * 602112) + 4096  # the batch and its labels
    assert model.segments_per_batch(one) == 2
    three = one.replace(tensors_per_sample=3)
    assert model.batch_segment_bytes(three) == segments.round_up(64 * 602112) + 2 * 4096 + 4096
    assert model.segments_per_batch(three) == 4
    big = make_job(workers=2, batch_size=1024, sample_bytes="100")
    assert model.batch_segment_bytes(big) == segments.round_up(102400) + 2 * 4096  # 1024 int64 labels: two pages


def test_measured_segments_win_and_follow_the_strategy():
    job = make_job(workers=1, batch_size=2, sample_bytes="4096", collate="list", batch_segments="4096x2")
    assert model.batch_segment_bytes(job) == 2 * 4096
    assert model.batch_segment_bytes(job.replace(sharing_strategy="file_system")) == 2 * 8192


def test_open_files_follow_the_segments():
    stacked = make_job(workers=4, batch_size=512, sample_bytes="100")
    listed = stacked.replace(collate="list")
    assert sizing.fds_needed(listed) > sizing.fds_needed(stacked)
    # One process at most: the trainer, when a slow worker holds up the order, holds the 3 other workers' batches
    # (prefetch 2 each) and its own 2: 8 batches of 512 segments, a descriptor each. A worker holds its batch being
    # sent twice and, of its others, the one left by the prefetch (the result pipe would hold 2 and one half).
    assert model.batches_in_flight(listed) == 10 and model.segments_per_batch(listed) == 512
    assert sizing.fds_needed(listed) == sizing.FD_BASE + (3 * 2 + 2) * 512
    # In order the trainer holds its own 2; then a worker's 1 + 2 are the most.
    assert sizing.fds_in_order(listed) == sizing.FD_BASE + (1 + 2) * 512
    assert sizing.nofile_limit(listed) == 8192 and sizing.nofile_limit(stacked) is None
    assert sizing.nofile_limit(listed, ceiling=5000) == 5000
    # The limit is per process: a second training process in the container needs no more of it.
    assert sizing.fds_needed(listed.replace(procs_per_node=2)) == sizing.fds_needed(listed)


def test_collate_options_validate_and_round_trip_through_the_environment():
    job = make_job(workers=2, batch_size=8, sample_bytes="1000", collate="LIST", tensors_per_sample="3",
                   batch_segments="900x8,80x16")
    assert job.collate == "list" and job.tensors_per_sample == 3 and len(job.batch_segments) == 24
    assert job_from_env(job.to_env()) == job
    plain = make_job(workers=2, batch_size=8, sample_bytes="1000")
    assert not any(k in plain.to_env() for k in ("SHMGUARD_COLLATE", "SHMGUARD_TENSORS_PER_SAMPLE",
                                                 "SHMGUARD_BATCH_SEGMENTS"))
    for kwargs, message in [({"collate": "stack"}, "--collate"), ({"tensors_per_sample": "0"}, "--tensors-per-sample"),
                            ({"batch_segments": "12x"}, "--batch-segments"), ({"batch_segments": (-1,)}, "--batch-segments"),
                            ({"batch_segments": ("big",)}, "--batch-segments")]:
        with pytest.raises(UsageError, match=message):
            make_job(workers=1, batch_size=1, sample_bytes="4", **kwargs)


# --- walking real batches (needs torch) ---


@pytest.fixture
def torch():
    return needs.module("torch")


def test_nested_structures_are_walked_and_non_tensors_skipped(torch):
    np = pytest.importorskip("numpy")
    Pair = namedtuple("Pair", "image target")

    @dataclass
    class Sample:
        x: object
        name: str

    batch = (
        [torch.zeros(10, dtype=torch.uint8), torch.zeros(3, dtype=torch.float32)],
        {"boxes": [torch.zeros(2, 4)], "labels": torch.zeros(2, dtype=torch.int64), "id": 7, "path": "a.jpg"},
        Pair(torch.zeros(5, dtype=torch.float64), None),
        Sample(torch.zeros(1, dtype=torch.int16), "s"),
        np.zeros(1000), b"bytes", 3.5,
    )
    assert sorted(segments.tensor_sizes(batch)) == sorted([10, 12, 32, 16, 40, 2])


def test_empty_tensors_are_listed_and_cost_nothing(torch):
    sizes = segments.tensor_sizes([torch.zeros(0), torch.zeros(0, 3), torch.zeros(2)])
    assert sorted(sizes) == [0, 0, 8]
    assert segments.shm_of(sizes) == 4096 and segments.shm_of(sizes, "file_system") == 3 * 4096


def test_views_of_one_storage_count_once(torch):
    base = torch.zeros(1000, dtype=torch.uint8)
    assert segments.tensor_sizes([base[:10], base[10:], base]) == [1000]


def test_the_arithmetic_is_what_was_measured_in_the_container():
    """benchmarks/results/segment-costs.json: per-leaf costs and the DataLoader's own segments, both strategies."""
    import json

    data = json.loads((BENCHMARK_RESULTS / "segment-costs.json").read_text())
    leaves = [r for r in data["rows"] if r["what"] == "leaf" and r["shm_per_leaf"] is not None]
    loaders = [r for r in data["rows"] if r["what"] == "loader"]
    assert len(leaves) >= 20 and len(loaders) == 8
    for row in leaves:
        expected = segments.segment_bytes(row["bytes"], row["strategy"]) if row["kind"] == "tensor" else 0
        assert row["shm_per_leaf"] == expected, row  # numpy, str, bytes, int, PIL: through the pipe
    for row in loaders:
        job = make_job(workers=row["workers"], batch_size=1, sample_bytes="1", sharing_strategy=row["strategy"])
        assert model.loader_shm_bytes(job) == row["shm_bytes"], row


def test_open_files_cover_what_real_jobs_held_and_not_far_over():
    """benchmarks/fd_count.py: the most descriptors one process of a real job held at once (demo container)."""
    import json

    rows = json.loads((BENCHMARK_RESULTS / "fd-count.json").read_text())["rows"]
    assert len(rows) >= 8 and any(row["data"] == "detection" for row in rows)
    for row in rows:
        job = make_job(workers=row["workers"], batch_size=row["batch_size"], prefetch_factor=row["prefetch_factor"],
                       sample_shape=row["sample_shape"], collate=row["collate"],
                       sharing_strategy=row["sharing_strategy"], tensors_per_sample=row["tensors_per_sample"],
                       dtype="uint8" if row["data"] == "detection" else None)
        one_process = max(row["max_fds_trainer"], row["max_fds_worker"])
        needed = sizing.fds_needed(job)
        assert one_process <= needed, row
        # An upper bound, not far over: the trainer holds out-of-order batches only while a worker is slow.
        assert needed < 3 * max(one_process, sizing.FD_BASE), (needed, row)
        if row["max_fds_worker"] and one_process > sizing.NOFILE_COMMON_SOFT:
            assert row["max_fds_worker"] <= sizing.fds_in_order(job), row  # the pipe bounds a worker's
        # Every one of these jobs ran with nofile 20000 (this engine's hard limit): the in-order count must say
        # that it may do (the warning says 'expect Too many open files' only below it).
        assert sizing.fds_in_order(job) <= 20000, row
