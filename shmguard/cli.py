"""The click command line: the list of commands, and the one boundary where errors become exit codes.

Every command is shmguard/commands/<name>.py: the plain functions that do its work, and `command()`, which declares
its click options and calls them. This module only lists the commands (with the one line `shmguard --help` shows,
so that listing them imports none) and loads the one that runs. `check` and `health` run on the standard library
alone and are dispatched before click loads (shmguard.main); they are listed here for --help.

This is the one boundary where a ShmguardError becomes a one-line message and an exit code, and Ctrl-C becomes 130.
"""

from __future__ import annotations

import importlib
import sys

import click

from shmguard import __version__
from shmguard.errors import EXIT_USAGE, guarded

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# name -> (the module that declares it, the line `shmguard --help` shows); --help lists them by name, as click does.
COMMANDS = {
    "check": ("shmguard.corecli", "Check this container against the job: /dev/shm, memory, CPUs, GPUs, open files."),
    "health": ("shmguard.commands.health", "Container healthcheck: is /dev/shm a tmpfs with room for the job."),
    "run": ("shmguard.commands.run", "Run IMAGE [-- COMMAND...] with /dev/shm, memory, CPUs and ulimits sized for the job."),
    "render": ("shmguard.commands.render", "Print manifests with a memory-backed /dev/shm sized for the job."),
    "patch": ("shmguard.commands.patch", "Add or fix the /dev/shm emptyDir, its mount and the memory limits in every pod template."),
    "fn": ("shmguard.commands.fn", "KRM function: a ResourceList on stdin, the same with pod templates sized on stdout."),
    "measure": ("shmguard.commands.measure", "Measure the bytes a real batch of your dataset puts through shared memory."),
    "tune": ("shmguard.commands.tune", "Sweep num_workers on your DataLoader and recommend the knee."),
    "explain": ("shmguard.commands.explain", "Explain why a container died: was it shared memory, and what is the exact fix?"),
    "webhook": ("shmguard.commands.webhook", "The admission webhook: size Pods when they are created."),
    "exporter": ("shmguard.commands.exporter", "Serve live /dev/shm and memory metrics for Prometheus."),
    "top": ("shmguard.commands.top", "Show every container's /dev/shm live, the ones heading for a Bus error first."),
    "clean": ("shmguard.commands.clean", "Remove PyTorch segments in /dev/shm that no process can use any more."),
}


class Commands(click.Group):
    """The root group: a command is loaded from its module when it runs (or its --help is asked for)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name in ("check", "health"):
            return passthrough(name)
        return importlib.import_module(COMMANDS[name][0]).command()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in sorted(COMMANDS)])


def passthrough(name: str) -> click.Command:
    """`check` or `health` under click (shmguard.main dispatches both before click loads): the arguments handed on."""

    @click.command(name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                           "help_option_names": []}, add_help_option=False,
                   help=COMMANDS[name][1] + f" (its options: shmguard {name} --help)")
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args) -> int:
        if name == "check":
            from shmguard.corecli import check_main

            return check_main(list(args))
        from shmguard.commands.health import main as health_main

        return health_main(list(args))

    return command


@click.group(cls=Commands, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="shmguard")
def cli() -> None:
    """Make containerised PyTorch training start right the first time.

    A multi-worker DataLoader moves every batch through /dev/shm, which Docker
    sizes at 64 MB and Kubernetes does not size at all. shmguard checks a
    container against the job, runs containers sized for it, and renders
    Kubernetes manifests with a memory-backed /dev/shm.
    """


def note(text: str) -> None:
    """A line for the user on stderr (the boundary's, for its error messages)."""
    click.echo(text, err=True)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code instead of exiting (the boundary: shmguard.errors.guarded)."""

    def invoke() -> int:
        try:
            result = cli.main(args=argv, prog_name="shmguard", standalone_mode=False)
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.UsageError as exc:  # one line, as every other bad input (click's own takes three)
            where = exc.ctx.command_path if exc.ctx is not None else "shmguard"
            note(f"shmguard: error: {exc.format_message()} (see {where} --help)")
            return EXIT_USAGE
        except click.ClickException as exc:
            exc.show()
            return exc.exit_code
        except click.Abort:
            raise KeyboardInterrupt from None
        except SystemExit:
            # click's own answer to a closed stdout (EPIPE): exit 1 after wrapping the streams; shmguard's is 141.
            if isinstance(sys.stdout, click.utils.PacifyFlushWrapper):
                raise BrokenPipeError from None
            raise
        return result if isinstance(result, int) else 0

    return guarded(invoke, say=note)


if __name__ == "__main__":
    sys.exit(main())
