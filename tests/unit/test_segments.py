"""The segment arithmetic: one page-rounded segment per tensor, found in any batch structure."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import pytest

from shmguard import model, segments
from shmguard.job import make_job

torch = pytest.importorskip("torch")


def test_page_rounding_and_empty_segments():
    assert segments.shm_of([]) == 0
    assert segments.shm_of([1]) == 4096
    assert segments.shm_of([4096, 4097]) == 4096 + 8192
    assert segments.shm_of([0]) == 4096  # an empty tensor still gets a segment of a page


def test_nested_structures_are_walked_and_non_tensors_skipped():
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
    )
    assert sorted(segments.tensor_sizes(batch)) == sorted([10, 12, 32, 16, 40, 2])


def test_views_of_one_storage_count_once():
    base = torch.zeros(1000, dtype=torch.uint8)
    assert segments.tensor_sizes([base[:10], base[10:], base]) == [1000]


def test_a_list_collate_costs_a_page_per_tensor_in_the_model():
    stacked = make_job(workers=2, batch_size=64, sample_bytes="1k")
    listed = stacked.replace(batch_segments=tuple([1024] * 64))
    assert model.batch_segment_bytes(listed) == 64 * 4096 > model.batch_segment_bytes(stacked)
    assert model.shm_bytes(listed) > model.shm_bytes(stacked)
