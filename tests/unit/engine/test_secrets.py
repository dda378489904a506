"""Secret masking: names, passwords inside URLs, and secret values in the container's streamed output."""

from __future__ import annotations

import pytest

from shmguard.engine.secrets import Masker, is_secret_name, mask_value, secret_values


@pytest.mark.parametrize("name", ["HF_TOKEN", "DB_PASS", "MYSQL_PWD", "HF_AUTH", "AWS_SECRET_ACCESS_KEY",
                                  "WANDB_API_KEY", "DB_PASSWORD", "GIT_CREDENTIALS", "SSH_PRIVATE"])
def test_secret_names(name):
    assert is_secret_name(name) and mask_value(name, "hunter2") == "***"


@pytest.mark.parametrize("name", ["PLAIN", "LR", "SHMGUARD_WORKERS", "DATA_DIR"])
def test_plain_names(name):
    assert not is_secret_name(name) and mask_value(name, "/data") == "/data"


def test_passwords_inside_urls():
    assert mask_value("DATABASE_URL", "postgres://u:s3cret@db:5432/x") == "postgres://u:***@db:5432/x"
    assert mask_value("REDIS", "redis://:pw1234@cache") == "redis://:***@cache"
    assert mask_value("MIRROR", "https://pypi.org/simple") == "https://pypi.org/simple"
    assert secret_values({"DATABASE_URL": "postgres://u:s3cret@db/x", "HF_TOKEN": "hf_abcdef", "A": "1",
                          "SHORT_KEY": "ab"}) == ["hf_abcdef", "s3cret"]


def test_masker_replaces_values_also_split_across_chunks():
    m = Masker(["hunter2"])
    assert m.feed(b"token is hunter2\n") == b"token is ***\n"
    out = m.feed(b"again: hun") + m.feed(b"ter2 and hu") + m.feed(b"man") + m.flush()
    assert out == b"again: *** and human"


def test_masker_without_secrets_is_identity():
    assert Masker([]).feed(b"abc") == b"abc"
