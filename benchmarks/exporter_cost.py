"""What `shmguard exporter` costs with 100 running containers, against node_exporter's filesystem collector.

One command (run as root on a host with the Docker engine and Debian's prometheus-node-exporter):

    python3 benchmarks/exporter_cost.py [--containers 100] [--seconds 120] [--scrape-every 15,1] [--churn 0]
                                        [--out FILE.json]

It starts --containers containers (shmguard-base:bookworm, each with 1 MiB in its /dev/shm,
label org.shmguard.test=exporter-bench; `--ipc shareable`, so that each /dev/shm is also a
mount on the host, the only way node_exporter can see it), then runs side by side, for --seconds:
- `shmguard exporter --interval 1s` from this tree;
- `prometheus-node-exporter` with only its filesystem collector, told to include the mounts it
  leaves out by default (/dev/*, /run/*, /var/lib/docker/*: the containers' /dev/shm);
and scrapes both every --scrape-every seconds, one window per value: 15 (Prometheus's usual, as the
rendered ServiceMonitor), then 1 (the worst case, and node_exporter then reads the filesystems
every second as the exporter does). node_exporter reads the filesystems on each scrape; the
exporter makes a pass every second whatever the scrapes. It reports per process: the scrape time
(median and max; for the exporter also its pass over the containers, shmguard_exporter_pass_seconds),
the CPU used over the window as a share of one CPU (utime + stime from /proc/<pid>/stat), and the
RSS at the end.
With --churn N it then starts and removes N more containers, ten at a time, while the exporter
runs, and reports its RSS before and after. The load average is recorded at the start and the
end: the machine is shared, so compare the two processes within one run. Everything it starts
is stopped and removed, however it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.exporter_process import free_port, stop, wait_ready  # noqa: E402

IMAGE = "shmguard-base:bookworm"
LABEL = {"org.shmguard.test": "exporter-bench"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def scrape(port: int) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        body = answer.read()
    return time.perf_counter() - start, body


def start_containers(client, count: int) -> list:
    made = []
    for _ in range(count):
        made.append(client.containers.run(IMAGE, ["sh", "-c", "dd if=/dev/zero of=/dev/shm/x bs=1M count=1 "
                                                  "2>/dev/null; exec sleep 3600"], detach=True, labels=LABEL,
                                          ipc_mode="shareable"))
    return made


def remove(containers) -> None:
    for container in containers:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def pass_seconds(body: bytes) -> float:
    for line in body.decode().splitlines():
        if line.startswith("shmguard_exporter_pass_seconds "):
            return float(line.split()[1])
    return float("nan")


def window(ours: subprocess.Popen, theirs: subprocess.Popen, shm_port: int, node_port: int, every: float,
           seconds: float) -> dict:
    """Both processes over `seconds`, each scraped every `every` seconds: scrape times, CPU, RSS."""
    procs = (("exporter", ours, shm_port), ("node_exporter", theirs, node_port))
    cpu0 = {name: cpu_seconds(proc.pid) for name, proc, _ in procs}
    wall0 = time.monotonic()
    timings: dict[str, list[float]] = {"exporter": [], "node_exporter": [], "exporter_pass": []}
    while time.monotonic() - wall0 < seconds:
        tick = time.monotonic()
        took, body = scrape(shm_port)
        timings["exporter"].append(took)
        timings["exporter_pass"].append(pass_seconds(body))
        timings["node_exporter"].append(scrape(node_port)[0])
        time.sleep(max(0.0, every - (time.monotonic() - tick)))
    wall = time.monotonic() - wall0
    out: dict = {"scrape_every": every, "scrapes": len(timings["exporter"]), "load": loadavg()}
    for name, proc, _ in procs:
        out[name] = {
            "scrape_ms_median": 1000 * statistics.median(timings[name]),
            "scrape_ms_max": 1000 * max(timings[name]),
            "cpu_percent_of_one": 100 * (cpu_seconds(proc.pid) - cpu0[name]) / wall,
            "rss_mib": rss_mib(proc.pid),
        }
    out["exporter"]["pass_ms_median"] = 1000 * statistics.median(timings["exporter_pass"])
    out["exporter"]["pass_ms_max"] = 1000 * max(timings["exporter_pass"])
    return out


def measure(args) -> dict:
    import docker

    client = docker.from_env(timeout=300)
    node_exporter = shutil.which("prometheus-node-exporter")
    if node_exporter is None:
        raise SystemExit("prometheus-node-exporter is missing: scripts/setup.sh installs it")
    result: dict = {"containers": args.containers, "seconds": args.seconds, "load_start": loadavg()}
    containers: list = []
    procs: list[subprocess.Popen] = []
    try:
        containers = start_containers(client, args.containers)
        shm_port, node_port = free_port(), free_port()
        ours = subprocess.Popen([sys.executable, "-m", "shmguard", "exporter", "--address", "127.0.0.1", "--port",
                                 str(shm_port), "--interval", "1s"], cwd=REPO, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        procs.append(ours)
        theirs = subprocess.Popen([node_exporter, f"--web.listen-address=127.0.0.1:{node_port}",
                                   "--collector.disable-defaults", "--collector.filesystem",
                                   "--collector.filesystem.mount-points-exclude=^/(proc|sys)($|/)"],
                                  stderr=subprocess.DEVNULL)
        procs.append(theirs)
        wait_ready(f"http://127.0.0.1:{shm_port}/metrics", ours)
        wait_ready(f"http://127.0.0.1:{node_port}/metrics", theirs)
        deadline = time.monotonic() + 120
        while True:  # every container in a pass before timing
            body = scrape(shm_port)[1]
            seen = body.count(b"\nshmguard_shm_used_bytes{")
            if seen >= args.containers or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        result["exporter_series_per_metric"] = seen
        result["node_exporter_shm_mounts"] = scrape(node_port)[1].count(b'node_filesystem_size_bytes{device="shm"')
        result["windows"] = [window(ours, theirs, shm_port, node_port, float(every), args.seconds)
                             for every in str(args.scrape_every).split(",")]
        if args.churn:
            before = rss_mib(ours.pid)
            curve = []  # RSS after every 100 containers: a plateau, or a leak that grows with them
            for done in range(10, args.churn + 1, 10):
                batch = start_containers(client, 10)
                time.sleep(1.5)  # at least one pass sees them
                remove(batch)
                if done % 100 == 0:
                    curve.append([done, round(rss_mib(ours.pid), 2)])
            time.sleep(3)
            result["churn"] = {"containers": args.churn, "rss_mib_before": before, "rss_mib_after": rss_mib(ours.pid),
                               "rss_mib_every_100": curve,
                               "series_after": scrape(shm_port)[1].count(b"\nshmguard_shm_used_bytes{")}
        result["load_end"] = loadavg()
        return result
    finally:
        for proc in procs:
            stop(proc)
        remove(containers)
        client.close()


def table(result: dict) -> str:
    rows = ["| scraped every | process | scrape ms (median / max) | pass ms (median / max) | CPU % of one | RSS MiB "
            "| load at the end |",
            "|---|---|---|---|---|---|---|"]
    for window in result["windows"]:
        for name in ("exporter", "node_exporter"):
            r = window[name]
            passes = f"{r['pass_ms_median']:.1f} / {r['pass_ms_max']:.1f}" if "pass_ms_median" in r else "-"
            rows.append(f"| {window['scrape_every']:g} s | {name} | {r['scrape_ms_median']:.1f} / "
                        f"{r['scrape_ms_max']:.1f} | {passes} | {r['cpu_percent_of_one']:.2f} | {r['rss_mib']:.1f} "
                        f"| {window['load']} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--scrape-every", default="15,1",
                        help="seconds between the scrapes of each, one window per value (default: 15, then 1)")
    parser.add_argument("--churn", type=int, default=0, help="then start and remove this many containers")
    parser.add_argument("--out", help="write the result as JSON here too")
    args = parser.parse_args()
    result = measure(args)
    print(json.dumps(result, indent=2))
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
