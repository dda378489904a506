"""The exporter's process: options, /metrics and /healthz over HTTP, a port in use, SIGTERM, --once --json,
an engine that is not there (no Docker engine is needed: the engine URL points nowhere)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from shmguard.cli import main
from shmguard.errors import UsageError
from shmguard.exporter.metrics import Reading, Row, Sample, Target
from shmguard.exporter.server import Exporter, bind, parse_interval
from tests.support.exporter import Replay
from tests.support.paths import CHECKOUT

REPO = str(CHECKOUT)
NOWHERE = "unix:///nonexistent/shmguard-test/docker.sock"


@pytest.mark.parametrize("text, seconds", [("1s", 1.0), ("500ms", 0.5), ("2m", 120.0), ("0.25", 0.25), ("1h", 3600)])
def test_intervals(text, seconds):
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["0", "50ms", "2h", "soon", "", "1x"])
def test_bad_intervals(text):
    with pytest.raises(UsageError, match="--interval"):
        parse_interval(text)


def get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_metrics_and_healthz_over_http():
    exporter = Exporter(Replay(Sample(rows=(Row(Target(key="k", id="k", name="n"), Reading(shm_size=64, shm_used=1)),),
                                      taken_at=time.time())), 1.0)
    server = bind("127.0.0.1", 0, exporter)
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        assert get(port, "/healthz")[0] == 503  # no pass yet
        exporter.step()
        status, content_type, body = get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert 'shmguard_shm_size_bytes{container="",id="k",name="n",namespace="",pod=""} 64' in body
        assert get(port, "/healthz")[:3:2] == (200, "ok\n")
        assert get(port, "/nope")[0] == 404
        assert not exporter.healthy(now=time.time() + 3600)  # a pass stuck for an hour
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_in_use_is_one_line_and_exit_2(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["exporter", "--address", "127.0.0.1", "--port", str(port), "--host", NOWHERE]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {port} is in use" in err


@pytest.mark.parametrize("args, message", [
    (["--interval", "fast"], "--interval"),
    (["--json"], "--json goes with --once"),
    (["--host", NOWHERE, "--kubelet-root", "/var/lib/kubelet"], "do not go together"),
])
def test_bad_options_are_one_line_and_exit_2(args, message, capsys):
    assert main(["exporter", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_once_json_with_no_engine_says_so_and_exits_2(capsys):
    assert main(["exporter", "--once", "--json", "--host", NOWHERE]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["schema_version"] == 1 and data["source_up"] is False and data["targets"] == []
    assert captured.err.startswith("shmguard exporter: the engine did not answer: ") and captured.err.count("\n") == 1
    assert captured.err.count("did not answer") == 1


def test_the_server_keeps_serving_without_an_engine_and_stops_on_sigterm():
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen([sys.executable, "-m", "shmguard", "exporter", "--address", "127.0.0.1", "--port", "0",
                             "--interval", "200ms", "--host", NOWHERE], stderr=subprocess.PIPE, text=True, env=env,
                            cwd=REPO)
    try:
        line = proc.stderr.readline()
        assert "serving http://127.0.0.1:" in line, line
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        deadline = time.monotonic() + 60
        while get(port, "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "no pass in 60 s"
            time.sleep(0.1)
        body = get(port, "/metrics")[2]
        assert "\nshmguard_engine_up 0\n" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_once_json_follows_its_shipped_schema(capsys, monkeypatch, host_v1, engine):
    import jsonschema

    import shmguard.exporter.engine as engine_module
    from shmguard import schemas
    from tests.support.exporter import cid

    host_v1.add(cid(1), 101)
    engine.add(cid(1), 101, env=["SHMGUARD_WORKERS=2", "SHMGUARD_BATCH_SIZE=4", "SHMGUARD_SAMPLE_BYTES=1m"])
    real = engine_module.EngineSource
    monkeypatch.setattr(engine_module, "EngineSource", lambda host, root=None: real(root=host_v1.root, client=engine))
    assert main(["exporter", "--once", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schemas.load("exporter")).validate(data)
    assert data["targets"][0]["shm_required"] > 0 and data["targets"][0]["name"] == "train"
