"""`python -m shmguard`: the same as the `shmguard` command."""

import sys

from shmguard import main

if __name__ == "__main__":
    sys.exit(main())
