"""CPU-bound processes beside a job under test (issue 29: elastic /dev/shm must keep up on a busy machine).

Used by tests/integration/test_elastic.py and benchmarks/elastic_shm.py. The burners are
children of the caller and always stopped on the way out.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager


@contextmanager
def burners(count: int):
    """count CPU-bound processes while inside."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
