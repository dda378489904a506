"""The click command line: parses options, calls the command functions, maps errors to exit codes.

This is the one boundary where a ShmguardError becomes a one-line message and an
exit code, and Ctrl-C becomes 130. Command logic lives in shmguard.commands.
"""

from __future__ import annotations

import sys

import click

from shmguard import __version__
from shmguard.errors import EXIT_INTERRUPTED, EXIT_USAGE, ShmguardError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="shmguard")
def cli() -> None:
    """Make containerised PyTorch training start right the first time.

    A multi-worker DataLoader moves every batch through /dev/shm, which Docker
    sizes at 64 MB and Kubernetes does not size at all. shmguard checks a
    container against the job, runs containers sized for it, and renders
    Kubernetes manifests with a memory-backed /dev/shm.
    """


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code instead of exiting."""
    try:
        result = cli.main(args=argv, prog_name="shmguard", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.Abort:
        click.echo("shmguard: interrupted", err=True)
        return EXIT_INTERRUPTED
    except ShmguardError as exc:
        click.echo(f"shmguard: error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("shmguard: interrupted", err=True)
        return EXIT_INTERRUPTED
    if isinstance(result, int):
        return result
    return 0


if __name__ == "__main__":
    sys.exit(main())
