"""Secrets in what `run` prints: masked on the `docker run` line, in the JSON plan and in the container's output.

A variable is secret when its name says so (TOKEN, SECRET, PASS, PWD, KEY, AUTH,
CREDENTIAL, ...): its value is masked. Any value may also carry credentials inside
a URL (postgres://user:pass@host): the password part is masked. The container's
output is masked too: every secret value the run handed it (at least MIN_SECRET
characters; shorter ones would mask ordinary text) is replaced by *** in the streamed
bytes, also when a value is split across two reads of the stream.
"""

from __future__ import annotations

import re

MASK = "***"
MIN_SECRET = 4
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASS|PWD|KEY|AUTH|CREDENTIAL|PRIVATE|COOKIE|SESSION|SIGNATURE", re.IGNORECASE)
URL_CREDENTIALS = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<password>[^@/\s]+)(?=@)")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def mask_value(name: str, value: str) -> str:
    """The value as it may be shown: *** for a secret name, else with URL passwords masked."""
    if is_secret_name(name):
        return MASK
    return URL_CREDENTIALS.sub(lambda m: m.group("head") + MASK, value)


def secret_values(environment: dict[str, str]) -> list[str]:
    """The strings to mask in the container's output: values of secret names and passwords inside URLs."""
    found = set()
    for name, value in environment.items():
        if is_secret_name(name):
            found.add(value)
        found.update(m.group("password") for m in URL_CREDENTIALS.finditer(value))
    return sorted((s for s in found if len(s) >= MIN_SECRET), key=len, reverse=True)


class Masker:
    """Replaces secret values in a byte stream; holds back a tail that could be the start of a secret split
    across chunks (flush() gives it back at the end)."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = [s.encode() for s in secrets if s]
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.secrets:
            return chunk
        data = self.pending + chunk
        for secret in self.secrets:
            data = data.replace(secret, MASK.encode())
        keep = 0
        for secret in self.secrets:  # the longest suffix of data that begins some secret
            for n in range(min(len(secret) - 1, len(data)), keep, -1):
                if data.endswith(secret[:n]):
                    keep = n
                    break
        self.pending = data[len(data) - keep:] if keep else b""
        return data[:len(data) - keep] if keep else data

    def flush(self) -> bytes:
        data, self.pending = self.pending, b""
        return data
