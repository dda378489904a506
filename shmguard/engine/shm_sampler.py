"""A /dev/shm peak sampler that runs as its own process: `python -m shmguard.engine.shm_sampler PATH INTERVAL`.

/dev/shm under a DataLoader peaks for milliseconds. A thread in `shmguard run`
shares the GIL with the log-following and the Docker SDK, and at 5 ms it
reported 147 MiB where a sampler inside the container saw 184 (issue 14). This
process does nothing but statvfs PATH every INTERVAL seconds (0.2 ms by default;
about 2% of a CPU) and keeps the peak. It stops when its stdin closes (so it
never outlives its parent) and prints one JSON line: peak bytes (null if PATH was
never readable) and samples taken. Standard library only, and imports nothing of
shmguard beyond the package, so it starts in a few milliseconds.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def used_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def sample(path: str, interval: float, done: threading.Event) -> tuple[int | None, int]:
    """Peak used bytes of the filesystem at path, and the number of samples, until done is set."""
    peak: int | None = None
    samples = 0
    statvfs, sleep = os.statvfs, time.sleep
    while True:  # one sample at least, however soon done is set
        try:
            st = statvfs(path)
        except OSError:  # not there yet, or the container is gone: the peak so far stands
            st = None
        if st is not None:
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            if peak is None or used > peak:
                peak = used
            samples += 1
        if done.is_set():
            break
        sleep(interval)
    return peak, samples


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m shmguard.engine.shm_sampler PATH INTERVAL_SECONDS", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
