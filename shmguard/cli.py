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


def job_options(command):
    """The options that describe the DataLoader job; each also reads a SHMGUARD_* variable."""
    from shmguard.job import ENV_VARS
    from shmguard.units import SIZE_RULE

    specs = [
        ("--workers", "workers", "DataLoader num_workers."),
        ("--batch-size", "batch_size", "Samples per batch."),
        ("--sample-shape", "sample_shape", "Shape of one sample, e.g. 3,224,224 (the largest, if they vary)."),
        ("--dtype", "dtype", "Element type of the sample (default float32)."),
        ("--sample-bytes", "sample_bytes", f"Size of one sample instead of a shape: {SIZE_RULE}."),
        ("--prefetch-factor", "prefetch_factor", "Batches each worker loads ahead (default 2, as PyTorch)."),
        ("--procs-per-node", "procs_per_node", "Training processes in the container, each with its own DataLoader (default 1)."),
        ("--gpus", "gpus", "GPUs the job needs (default 0)."),
        ("--sharing-strategy", "sharing_strategy", "torch.multiprocessing sharing strategy: file_descriptor (default) or file_system."),
    ]
    for flag, name, help_text in reversed(specs):
        command = click.option(flag, name, envvar=ENV_VARS[name], show_envvar=True, metavar="VALUE", help=help_text)(command)
    command = click.option("--pin-memory/--no-pin-memory", "pin_memory", default=None, envvar=ENV_VARS["pin_memory"],
                           show_envvar=True, help="The DataLoader pins memory.")(command)
    return command


def job_from_options(values: dict):
    from shmguard.job import make_job

    keys = ("workers", "batch_size", "sample_shape", "dtype", "sample_bytes", "prefetch_factor",
            "procs_per_node", "gpus", "pin_memory", "sharing_strategy")
    return make_job(**{key: values.pop(key) for key in keys})


@cli.command()
@job_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (verdict, required, recommended, findings, probes).")
@click.option("--strict", is_flag=True, help="Exit 1 on WARN too.")
@click.option("--root", type=click.Path(), envvar="SHMGUARD_ROOT", help="Read /proc, /sys and /dev under this root (tests).")
def check(as_json: bool, strict: bool, root: str | None, **options) -> int:
    """Check this container against the job: /dev/shm, memory, CPUs, GPUs, open files.

    Exit 0 when every finding is PASS or WARN, 1 on FAIL (--strict: on WARN too),
    2 on bad usage or when the probes cannot run.
    """
    from shmguard.commands.check import check as run
    from shmguard.probe import Root

    job = job_from_options(options)
    return run(job, as_json=as_json, strict=strict, root=Root(root), echo=click.echo)


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
