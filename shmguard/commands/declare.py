"""The click declarations several commands share: the job options, the exporter's sources, where a note goes.

Each command declares its own options in its module (shmguard/commands/<name>.py), beside the plain functions
that do its work; shmguard.cli only lists the commands and is the one boundary where errors become exit codes.
`check` and `health` declare theirs without click (shmguard.corecli, shmguard.commands.health): they run on the
standard library alone.
"""

from __future__ import annotations

import functools

import click


def job_options(command):
    """Declare the options that describe the DataLoader job (a row each of shmguard.job.OPTIONS; each also reads
    its SHMGUARD_* variable) and hand the command one JobOptions record, `job`, in their place."""
    from shmguard.job import OPTIONS
    from shmguard.options import COLLATE_HELP, DATASET_HELP, JobOptions

    @functools.wraps(command)
    def with_job(*args, **values):
        return command(*args, job=JobOptions.take(values), **values)

    for option in reversed(OPTIONS):
        declarations, settings = option.click_declaration()
        with_job = click.option(*declarations, **settings)(with_job)
    with_job = click.option("--dataset", metavar="MODULE:CALLABLE", help=DATASET_HELP)(with_job)
    return click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help=COLLATE_HELP)(with_job)


def source_options(command):
    """The options that choose what `exporter` and `top` read: the engine, or with --kubelet-root the node."""
    for option in reversed((
        click.option("--host", metavar="URL", help="The Docker API to ask (default: DOCKER_HOST, else the local "
                     "socket); Podman's socket works too, e.g. unix:///run/podman/podman.sock."),
        click.option("--kubelet-root", "kubelet_root", metavar="DIR",
                     help="Node mode: the memory emptyDirs of the pods under this kubelet root (e.g. "
                          "/var/lib/kubelet), named through the Kubernetes API, instead of the engine's containers."),
        click.option("--node-name", "node_name", envvar="NODE_NAME", show_envvar=True, metavar="NAME",
                     help="Node mode: this node's name (the pods listed are those with spec.nodeName=NAME)."),
        click.option("--api-server", "api_server", metavar="URL",
                     help="Node mode: the Kubernetes API (default: the pod's service account; outside a pod, e.g. "
                          "`kubectl proxy`'s http://127.0.0.1:8001)."),
        click.option("--containerd-state", "containerd_state", metavar="DIR",
                     help="Node mode: containerd's state directory (/run/containerd), to report the runtime's own "
                          "64 MiB /dev/shm of the pods that mount no memory emptyDir there."),
    )):
        command = option(command)
    return command


def note(text: str) -> None:
    """A line for the user on stderr (what was inferred or measured)."""
    click.echo(text, err=True)


def strip_dashes(command) -> tuple:
    """The command after `--` (click keeps the `--` when it comes first)."""
    return tuple(command[1:]) if command and command[0] == "--" else tuple(command)
