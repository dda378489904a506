"""Sizes as people type them: one rule, powers of 1024 as Docker."""

from __future__ import annotations

import pytest

from shmguard.units import GIB, KIB, MIB, TIB, docker_size, format_size, k8s_quantity, parse_quantity, parse_size


@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("1048576", MIB), (" 4096 ", 4096), ("512b", 512), ("512B", 512),
    ("64k", 64 * KIB), ("64kb", 64 * KIB), ("64KiB", 64 * KIB), ("64Ki", 64 * KIB),
    ("64m", 64 * MIB), ("64M", 64 * MIB), ("512MB", 512 * MIB), ("512MiB", 512 * MIB), ("512Mi", 512 * MIB),
    ("2g", 2 * GIB), ("2G", 2 * GIB), ("2gb", 2 * GIB), ("2GiB", 2 * GIB), ("2Gi", 2 * GIB), ("2 GiB", 2 * GIB),
    ("1t", TIB), ("1.5g", 3 * GIB // 2), ("0.5k", 512), ("1.0001k", 1025),
    ("9223372036854775808", 2**63),  # the largest size taken (8 EiB); see test_absurd_sizes_are_refused
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "g", "-1", "-64m", "2x", "2gigs", "1..5g", "nan", "inf", "1e400g", "3,5g", "0x10"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_docker_size_never_rounds_down():
    assert docker_size(64 * MIB) == "64m"
    assert docker_size(64 * MIB + 1) == "65m"
    assert docker_size(2 * GIB) == "2g"
    assert docker_size(1) == "1m"
    for n in (1, 4095, MIB - 1, 386441216, 3 * GIB + 7):
        assert parse_size(docker_size(n)) >= n


def test_k8s_quantity_never_rounds_down():
    assert k8s_quantity(369 * MIB) == "369Mi"
    assert k8s_quantity(2 * GIB) == "2Gi"
    assert k8s_quantity(386441216) == "369Mi"


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(64 * MIB) == "64.0 MiB"
    assert format_size(1.5 * GIB) == "1.5 GiB"


@pytest.mark.parametrize("text", ["9223372036854775809", "1e308t", "99999999999999999999", "1e19"])
def test_absurd_sizes_are_refused(text):
    with pytest.raises(ValueError, match="too large"):
        parse_size(text)


def test_absurd_quantities_are_refused():
    with pytest.raises(ValueError, match="too large"):
        parse_quantity("1e308Ei")
