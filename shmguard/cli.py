"""The click command line: parses options, calls the command functions, maps errors to exit codes.

This is the one boundary where a ShmguardError becomes a one-line message and an
exit code, and Ctrl-C becomes 130. Command logic lives in shmguard.commands.
"""

from __future__ import annotations

import os
import sys

import click

from shmguard import __version__
from shmguard.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, ShmguardError

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
        ("--gpus", "gpus", "GPUs the job needs (default 0; `run` also takes all)."),
        ("--sharing-strategy", "sharing_strategy", "torch.multiprocessing sharing strategy: file_descriptor (default) or file_system."),
    ]
    for flag, name, help_text in reversed(specs):
        command = click.option(flag, name, envvar=ENV_VARS[name], show_envvar=True, metavar="VALUE", help=help_text)(command)
    command = click.option("--pin-memory/--no-pin-memory", "pin_memory", default=None, envvar=ENV_VARS["pin_memory"],
                           show_envvar=True, help="The DataLoader pins memory.")(command)
    command = click.option("--dataset", metavar="MODULE:CALLABLE",
                           help="Measure the sample size from real batches of this dataset factory (needs torch) "
                                "instead of --sample-shape/--sample-bytes.")(command)
    command = click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE",
                           help="With --dataset: the DataLoader's collate_fn (default: default_collate).")(command)
    return command


def job_from_options(values: dict):
    """The Job from the job options (popped from values); with --dataset, the sample size is measured."""
    from shmguard.errors import UsageError
    from shmguard.job import make_job, parse_count

    keys = ("workers", "batch_size", "sample_shape", "dtype", "sample_bytes", "prefetch_factor",
            "procs_per_node", "gpus", "pin_memory", "sharing_strategy")
    raw = {key: values.pop(key) for key in keys}
    dataset, collate_fn = values.pop("dataset", None), values.pop("collate_fn", None)
    if dataset:
        if raw["sample_shape"] is not None or raw["sample_bytes"] is not None:
            raise UsageError("give the sample size once: --dataset, --sample-shape or --sample-bytes")
        if raw["batch_size"] is None:
            raise UsageError("--dataset needs --batch-size: the batches are built with it")
        from shmguard.commands.measure import measure

        measured = measure(dataset, parse_count("batch_size", raw["batch_size"], 1), collate_spec=collate_fn)
        click.echo(f"shmguard: measured {dataset}: largest batch {measured.max_batch_bytes:,} bytes "
                   f"({measured.options()})", err=True)
        raw["sample_bytes"] = str(measured.sample_bytes)
        raw["dtype"] = None
    elif collate_fn:
        raise UsageError("--collate-fn goes with --dataset")
    return make_job(**raw)


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


@cli.command(context_settings={"allow_interspersed_args": False})
@job_options
@click.option("--cpus", type=float, help="CPUs for the container (docker run --cpus).")
@click.option("--memory", "memory", metavar="SIZE", help="Memory limit of the container, /dev/shm included (docker run --memory).")
@click.option("--name", help="Container name.")
@click.option("-e", "--env", "env", multiple=True, metavar="NAME[=VALUE]", help="Environment variable (repeatable).")
@click.option("-v", "--volume", "volumes", multiple=True, metavar="HOST:CONTAINER[:ro]", help="Bind mount (repeatable).")
@click.option("-w", "--workdir", help="Working directory in the container.")
@click.option("--rm/--keep", "remove", default=True, help="Remove the container when it ends (default), or keep it.")
@click.option("-d", "--detach", is_flag=True, help="Start it and print its id; no log streaming, no peak report.")
@click.option("--shm-size", "shm_size", metavar="SIZE", help="Override the computed /dev/shm size.")
@click.option("--ipc", type=click.Choice(["host"]), help="Share the host's IPC namespace (only when you must).")
@click.option("--init/--no-init", default=True, help="Run an init as PID 1 so Ctrl-C and SIGTERM stop the job (default on).")
@click.option("--healthcheck/--no-healthcheck", default=None, help="Docker healthcheck `shmguard health` (default: when the image has shmguard).")
@click.option("--engine-wait", "engine_wait", type=click.FloatRange(min=0), default=60, show_default=True, metavar="SECONDS",
              help="When the Docker engine goes away mid-run, wait this long for it to come back, then follow the job "
                   "again (or report how it ended) instead of giving up.")
@click.option("--dry-run", is_flag=True, help="Print the plan and the equivalent docker run command; start nothing.")
@click.option("--tune", "tune_first", is_flag=True,
              help="First sweep num_workers in the image with `shmguard tune` on --dataset (imported in the container) "
                   "and run the job with the recommendation (as SHMGUARD_WORKERS).")
@click.option("--json", "as_json", is_flag=True, help="Print the result (or the plan) as one JSON object.")
@click.argument("image")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(image, command, cpus, memory, name, env, volumes, workdir, remove, detach, shm_size, ipc, init,
        healthcheck, engine_wait, dry_run, tune_first, as_json, **options) -> int:
    """Run IMAGE [-- COMMAND...] with /dev/shm, memory, CPUs and ulimits sized for the job.

    Streams the logs, returns the container's exit code, stops and removes the
    container on Ctrl-C, reports the peak /dev/shm use, and explains a death by
    shared-memory exhaustion. Rides out a restart of the Docker engine (see
    --engine-wait). Exit 125 when the container cannot be run (engine
    unreachable, image missing, a --memory that cannot hold the job) or the
    engine went away and did not come back.
    """
    from shmguard.engine.plan import RunError, RunOptions, parse_memory
    from shmguard.engine.run import run as execute
    from shmguard.units import parse_size

    gpus = options["gpus"]
    if gpus is not None and gpus.strip().lower() == "all":
        options["gpus"] = None  # every GPU: the count is the engine's to know
    if cpus is not None and cpus <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--cpus")
    try:
        shm = parse_size(shm_size) if shm_size is not None else None
    except ValueError as exc:
        raise RunError(f"--shm-size: {exc}") from None
    if tune_first:
        from shmguard.engine.run import tune_in_container
        from shmguard.errors import UsageError
        from shmguard.job import parse_count

        if not options.get("dataset") or options.get("batch_size") is None:
            raise UsageError("--tune needs --dataset and --batch-size: the sweep runs your DataLoader in the image")
        base = RunOptions(image=image, cpus=cpus, memory=parse_memory(memory), env=tuple(env), volumes=tuple(volumes),
                          workdir=workdir, shm_size=shm)
        tuned = tune_in_container(base, options.pop("dataset"), parse_count("batch_size", options["batch_size"], 1),
                                  options.pop("collate_fn", None))
        recommended = tuned["recommended"]["workers"]
        click.echo(f"shmguard: tuned: num_workers={recommended} "
                   f"({tuned['recommended']['batches_per_second']:.1f} batches/s)", err=True)
        options["workers"] = str(recommended)
        options["sample_bytes"] = str(-(-tuned["batch_bytes"] // parse_count("batch_size", options["batch_size"], 1)))
        options["sample_shape"] = None
    job = job_from_options(options)
    if command and command[0] == "--":
        command = command[1:]
    opts = RunOptions(image=image, command=tuple(command), cpus=cpus, memory=parse_memory(memory),
                      gpus=gpus if gpus and gpus.strip() not in ("0", "") else None, name=name,
                      env=tuple(env), volumes=tuple(volumes), workdir=workdir, remove=remove, detach=detach,
                      shm_size=shm, ipc_host=ipc == "host", init=init, healthcheck=healthcheck,
                      engine_wait=engine_wait)
    return execute(job, opts, dry_run=dry_run, as_json=as_json)


@cli.group()
def render() -> None:
    """Print manifests with a memory-backed /dev/shm sized for the job."""


def target_options(command):
    command = click.option("--image", required=True, help="Container image.")(command)
    command = click.option("--name", default="train", show_default=True, help="Name of the workload and container.")(command)
    command = click.option("--cpus", type=float, help="CPUs (default: one per worker plus one per process).")(command)
    command = click.option("--memory", metavar="SIZE", help="Memory limit; at least the shm plus the processes.")(command)
    command = click.option("-e", "--env", "env", multiple=True, metavar="NAME=VALUE", help="Environment variable (repeatable).")(command)
    return command


def target_values(job, image, name, cpus, memory, env, command) -> dict:
    from shmguard.errors import UsageError
    from shmguard.units import parse_size

    try:
        memory_bytes = parse_size(memory) if memory is not None else None
    except ValueError as exc:
        raise UsageError(f"--memory: {exc}") from None
    variables = {}
    for item in env:
        key, eq, value = item.partition("=")
        if not key or not eq:
            raise UsageError(f"-e {item!r}: use NAME=VALUE")
        variables[key] = value
    if cpus is not None and cpus <= 0:
        raise UsageError("--cpus must be more than 0")
    if memory_bytes is not None:
        from shmguard import sizing
        from shmguard.units import k8s_quantity

        if sizing.memory_status(job, memory_bytes) == sizing.WARN:
            click.echo(f"shmguard: warning: {sizing.memory_shortfall(job, memory_bytes, '--memory', k8s_quantity)}", err=True)
    if command and command[0] == "--":
        command = command[1:]
    return {"image": image, "name": name, "cpus": cpus, "memory": memory_bytes, "gpus": job.gpus,
            "env": variables, "command": list(command)}


@render.command("k8s", context_settings={"allow_interspersed_args": False})
@job_options
@target_options
@click.option("--namespace", help="Namespace of the workload.")
@click.option("--kind", type=click.Choice(["pod", "job", "deployment", "pytorchjob"], case_sensitive=False), default="job",
              show_default=True, help="What to render (a PyTorchJob has a Master and --replicas Workers).")
@click.option("--replicas", type=click.IntRange(min=0), default=1, show_default=True, help="PyTorchJob Worker replicas.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def render_k8s_command(image, name, cpus, memory, env, namespace, kind, replicas, command, **options) -> int:
    """Print a Kubernetes manifest: an emptyDir of medium Memory at /dev/shm with a sizeLimit, memory limits
    that include it, CPUs for the workers, GPUs, the SHMGUARD_* environment and `shmguard health` probes."""
    from shmguard.commands.render import render_k8s

    job = job_from_options(options)
    values = target_values(job, image, name, cpus, memory, env, command)
    click.echo(render_k8s(job, kind=kind, namespace=namespace, workers_replicas=replicas, **values), nl=False)
    return 0


@render.command("compose", context_settings={"allow_interspersed_args": False})
@job_options
@target_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def render_compose_command(image, name, cpus, memory, env, command, **options) -> int:
    """Print a compose service with shm_size, mem_limit, cpus, GPU reservations and a healthcheck."""
    from shmguard.commands.render import render_compose

    job = job_from_options(options)
    click.echo(render_compose(job, **target_values(job, image, name, cpus, memory, env, command)), nl=False)
    return 0


@cli.command()
@job_options
@click.option("-i", "--in-place", is_flag=True, help="Rewrite the files (atomically) instead of printing.")
@click.option("--check", is_flag=True, help="Change nothing; print a diff of what would change and exit 1 if anything would.")
@click.option("--follow-symlinks", is_flag=True, help="With -i, patch the file a symlink points to (else a symlink is refused).")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
def patch(in_place, check, follow_symlinks, files, **options) -> int:
    """Add or fix the /dev/shm emptyDir, its mount and the memory limits in every pod template of FILES (or stdin).

    Handles Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob and
    PyTorchJob; other documents pass through. Only the lines that must change are
    changed: comments, order, quoting and layout stay. Patching twice changes nothing.
    """
    from shmguard.commands.patch import patch as run_patch
    from shmguard.errors import UsageError

    if in_place and check:
        raise UsageError("-i and --check do not go together")
    if in_place and (not files or "-" in files):
        raise UsageError("-i needs files to rewrite, not stdin")
    return run_patch(job_from_options(options), list(files), in_place=in_place, check=check,
                     follow_symlinks=follow_symlinks)


@cli.command("measure")
@click.option("--dataset", required=True, metavar="MODULE:CALLABLE", help="A callable returning your Dataset or IterableDataset.")
@click.option("--batch-size", required=True, envvar="SHMGUARD_BATCH_SIZE", metavar="B", help="Samples per batch.")
@click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help="Your DataLoader's collate_fn (default: default_collate).")
@click.option("--samples", type=click.IntRange(min=1), default=32, show_default=True, help="Samples to read (random, seeded).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the sample order.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def measure_command(dataset, batch_size, collate_fn, samples, seed, as_json) -> int:
    """Measure the bytes a real batch of your dataset puts through shared memory.

    Builds batches with the DataLoader's collate, adds up every tensor in them (the
    largest batch counts when samples vary), and prints the options that use it.
    Needs torch. Exit 2 when the module cannot be imported or your code raises
    (its traceback is shown).
    """
    import json

    from shmguard.commands.measure import measure, report_json, report_text
    from shmguard.job import parse_count

    result = measure(dataset, parse_count("batch_size", batch_size, 1), samples=samples, seed=seed, collate_spec=collate_fn)
    click.echo(json.dumps(report_json(result), indent=2) if as_json else report_text(result))
    return 0


@cli.command("tune")
@click.option("--dataset", required=True, metavar="MODULE:CALLABLE", help="A callable returning your Dataset.")
@click.option("--batch-size", required=True, envvar="SHMGUARD_BATCH_SIZE", metavar="B", help="Samples per batch.")
@click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help="Your DataLoader's collate_fn.")
@click.option("--workers", "workers", metavar="LIST", help="num_workers to try, e.g. 0,2,4,8 (default: 0, 1, 2, 4, … up to the CPUs).")
@click.option("--prefetch-factors", metavar="LIST", help="prefetch factors to try (default: 2).")
@click.option("--batches", type=click.IntRange(min=1), default=20, show_default=True, help="Batches timed per step.")
@click.option("--plot", "plot", metavar="FILE.png", help="Also write a bar chart of the throughput as a PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def tune_command(dataset, batch_size, collate_fn, workers, prefetch_factors, batches, plot, as_json) -> int:
    """Sweep num_workers on your DataLoader and recommend the smallest within 5% of the best throughput.

    Each step runs real batches and reports batches/s, the peak /dev/shm and memory;
    steps that would not fit in the free /dev/shm are skipped. Needs torch.
    """
    import json

    from shmguard.commands import tune as tuning
    from shmguard.job import parse_count

    sweep = tuning.parse_list(workers, "--workers", 0) if workers else None
    factors = tuning.parse_list(prefetch_factors, "--prefetch-factors", 1) if prefetch_factors else None

    def progress(step) -> None:
        what = step.skipped or f"{step.batches_per_second:.1f} batches/s"
        click.echo(f"shmguard tune: num_workers={step.workers} prefetch_factor={step.prefetch_factor}: {what}", err=True)

    result = tuning.tune(dataset, parse_count("batch_size", batch_size, 1), sweep, factors, batches, collate_fn,
                         progress=progress)
    if plot:
        tuning.write_png(plot, result)
    click.echo(json.dumps(tuning.as_json(result), indent=2) if as_json else tuning.table(result))
    return 0 if result.recommended else 1


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
    except Exception as exc:  # a bug: say so in one line; SHMGUARD_DEBUG=1 shows the traceback
        if os.environ.get("SHMGUARD_DEBUG"):
            raise
        click.echo(f"shmguard: internal error: {type(exc).__name__}: {exc} "
                   f"(set SHMGUARD_DEBUG=1 for the traceback, and please report it)", err=True)
        return EXIT_INTERNAL
    if isinstance(result, int):
        return result
    return 0


if __name__ == "__main__":
    sys.exit(main())
