"""shmguard: make containerised PyTorch training start right the first time.

A multi-worker DataLoader moves every batch through /dev/shm; containers give it
64 MB (Docker) or no way to size it (Kubernetes). shmguard checks, sizes and
launches training containers so they do not die of a Bus error.

`main` lives here, in the module every entry point imports anyway, so that
`shmguard health` (which runs every few seconds in every training container) is
dispatched before click or anything heavy is imported, with no module to spare.
"""

import sys

__version__ = "0.1.0"


def main(argv=None) -> int:
    """The `shmguard` command: `health` on the standard library alone, everything else through click."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "health":
        from shmguard.health import main as health_main

        return health_main(args[1:])
    from shmguard.cli import main as cli_main

    return cli_main(args)
