"""Entry point for the `shmguard` script and `python -m shmguard`.

`health` runs every few seconds in every training container, so it is
dispatched here, before the CLI framework (click) or anything heavy is imported.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "health":
        from shmguard.commands.health import main as health_main

        return health_main(args[1:])
    from shmguard.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
