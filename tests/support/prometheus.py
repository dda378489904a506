"""A real Prometheus (Debian's 2.42) on a free port, scraping the exporter every second with its own alerts."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import yaml

from shmguard.exporter import rules
from tests.support.ci import unavailable
from tests.support.exporter_process import WAIT, free_port, stop, wait_ready


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict]:
        data = http_json(f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert data["status"] == "success", data
        return data["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def alerts(self) -> list[dict]:
        return http_json(f"{self.base}/api/v1/alerts")["data"]["alerts"]

    def wait_for(self, what: str, check, timeout: float = WAIT):
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not show {what} in {timeout:g} s")
            time.sleep(0.5)


@contextmanager
def prometheus(target_port: int, workdir: Path) -> Iterator[Prometheus]:
    """Debian's Prometheus on a free port, scraping the exporter every second, with the exporter's alerts (the
    near-full alert's `for` shortened to 3 s: its minute is unit-tested with promtool)."""
    binary = shutil.which("prometheus")
    if binary is None:
        unavailable("prometheus is missing: scripts/setup.sh installs Debian's prometheus package")
    file = rules.rule_file()
    for rule in file["groups"][0]["rules"]:
        if rule["alert"] == "ShmguardShmNearlyFull":
            rule["for"] = "3s"
    (workdir / "rules.yaml").write_text(yaml.safe_dump(file))
    (workdir / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [{"job_name": "shmguard", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
    }))
    port = free_port()
    log = open(workdir / "prometheus.log", "w")
    proc = subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        server = Prometheus(port)
        wait_ready(f"{server.base}/-/ready", proc, lambda: (workdir / "prometheus.log").read_text()[-3000:])
        yield server
    finally:
        stop(proc)
        log.close()
