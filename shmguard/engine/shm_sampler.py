"""A /dev/shm peak sampler that runs as its own process: `python -m shmguard.engine.shm_sampler PATH INTERVAL`.

/dev/shm under a DataLoader peaks for milliseconds. A thread in `shmguard run`
shares the GIL with the log-following and the Docker SDK, and at 5 ms it
reported 147 MiB where a sampler inside the container saw 184 (issue 14). This
process does nothing but statvfs PATH every INTERVAL seconds (0.2 ms by default;
about 2% of a CPU) and keeps the peak. It stops when its stdin closes (so it
never outlives its parent) and prints one JSON line: peak bytes (null if PATH was
never readable) and samples taken. Standard library only, and (without --elastic)
imports nothing of shmguard beyond the tmpfs reader, so it starts in a few milliseconds.

`python -m shmguard.engine.shm_sampler --elastic INTERVAL [--realtime]` samples a running
container's /dev/shm and grows it as it fills (elastic /dev/shm: the hook is shmguard.engine.grower).
It is started before the container and waits for the container's description, one JSON
line on stdin; then each reading goes to the Grower hook, which prints its events
(growths, a memory limit to raise, the ceiling) as JSON lines before the final one; a
`raise-failed REASON` line on stdin says the engine did not raise the limit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from shmguard.probe.tmpfs import used_of  # "used" as every reader of a tmpfs counts it


def sample(path: str, interval: float, done: threading.Event, hook=None) -> tuple[int | None, int]:
    """Peak used bytes of the filesystem at path, and the number of samples, until done is set.
    `hook(used, size)` is called with each reading (the elastic grower); it returns the seconds to wait before the
    next one, or None for `interval`."""
    peak: int | None = None
    samples = 0
    # os.statvfs itself, not probe.Root's: this loop samples every 0.2 ms, and "used" is still probe.tmpfs's (used_of)
    statvfs, sleep = os.statvfs, time.sleep
    while True:  # one sample at least, however soon done is set
        wait = interval
        try:
            st = statvfs(path)
        except OSError:  # not there yet, or the container is gone: the peak so far stands
            st = None
        if st is not None:
            used = used_of(st)
            if peak is None or used > peak:
                peak = used
            samples += 1
            if hook is not None:
                wait = hook(used, st.f_blocks * st.f_frsize) or interval
        if done.is_set():
            break
        sleep(wait)
    return peak, samples


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the terminal's whole process group: the parent
    # ends this process by closing its stdin, after it has stopped the container, so that the peak so far is kept
    if len(argv) in (2, 3) and argv[0] == "--elastic":
        return main_elastic(float(argv[1]), argv[2:] == ["--realtime"])
    if len(argv) != 2:
        print("usage: python -m shmguard.engine.shm_sampler PATH INTERVAL_SECONDS\n"
              "       python -m shmguard.engine.shm_sampler --elastic INTERVAL_SECONDS [--realtime]", file=sys.stderr)
        return 2
    path, interval = argv[0], float(argv[1])
    done = threading.Event()

    def wait_for_eof() -> None:
        try:
            sys.stdin.read()
        finally:
            done.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    peak, samples = sample(path, interval, done)
    print(json.dumps({"peak": peak, "samples": samples}), flush=True)
    return 0


def main_elastic(interval: float, realtime: bool) -> int:
    """Wait for the container's description (one JSON line on stdin: the parent starts this process before the
    container, so that sampling begins the moment it runs), then sample its /dev/shm through its process and grow it
    (shmguard.engine.grower.Grower). Says `ready` once it samples."""
    from shmguard.engine import grower as elastic
    from shmguard.engine.remount import gone, shm_path

    realtime = realtime and elastic.realtime()
    first = sys.stdin.readline()
    if not first.strip():  # the parent gave up before the start (the container did not start, or is not local)
        return 0
    try:
        grower = elastic.grower_from_config(json.loads(first))
    except OSError as exc:  # the container ended before the sampler began, or is not where it was said to be
        print(json.dumps({"event": "stopped", "gone": gone(exc),
                          "reason": exc.strerror or str(exc)}), flush=True)
        print(json.dumps({"peak": None, "samples": 0, "size": None, "realtime": realtime}), flush=True)
        return 0
    done = threading.Event()

    def read_commands() -> None:
        try:
            for line in sys.stdin:
                command, _, argument = line.strip().partition(" ")
                if command == "raise-failed":
                    grower.raise_failed = argument or "refused"
        finally:
            done.set()

    threading.Thread(target=read_commands, daemon=True).start()
    print(json.dumps({"event": "ready", "realtime": realtime}), flush=True)
    try:
        peak, samples = sample(shm_path(grower.proc_fd), interval, done, grower)
    finally:
        if grower.host is not None:
            grower.host.leave()
    print(json.dumps({"peak": peak, "samples": samples, "size": grower.size or None, "realtime": realtime,
                      "gap_max": round(grower.gap_max, 6)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
