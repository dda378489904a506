"""`shmguard run`: the job and the container options in, the container run (shmguard.engine.run), the result out.

The glue between what the user gave and the engine: every option is checked before any
engine call (a bad one is one line and exit 2), the processes per node are inferred
from the command and the container's environment, `--tune` first sweeps num_workers in
the image, and the result is reported as lines on stderr or one JSON object on stdout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from shmguard.errors import UsageError
from shmguard.jsonout import stamp
from shmguard.options import JobOptions


def run(job_options: JobOptions, image: str, command: tuple, container_options: dict[str, Any],
        healthcheck: bool | None, engine_wait: str, dry_run: bool, tune_first: bool, as_json: bool,
        elastic: bool = True) -> int:
    from shmguard.engine import flags
    from shmguard.engine.plan import RunOptions, parse_env
    from shmguard.engine.run import stop_signals_interrupt

    # Every option is parsed before any engine call: a bad one is one line and exit 2.
    values = flags.parse_user(container_options, skip=("gpus",))
    request = flags.parse_gpus(job_options.gpus) if job_options.gpus is not None else None
    # The job's GPUs are the container's; --gpus all: known once it runs (SHMGUARD_GPUS stays unset).
    job_options = job_options.replace(gpus=None if request is None or request.known_count is None
                                      else str(request.known_count))
    wait = flags.parse_engine_wait(engine_wait)
    if command and command[0] == "--":
        command = command[1:]
    opts = RunOptions(image=image, command=tuple(command), gpus=request, healthcheck=healthcheck, engine_wait=wait,
                      elastic=elastic, **{k: v for k, v in values.items() if v is not None})
    container_env = {**{k: v for path in opts.env_files for k, v in flags.read_env_file(path).items()},
                     **parse_env(opts.env, os.environ)}
    if tune_first and (not job_options.dataset or job_options.batch_size is None):
        raise UsageError("--tune needs --dataset and --batch-size: the sweep runs your DataLoader in the image")
    with stop_signals_interrupt() as signals:  # SIGTERM/SIGHUP stop the tuning container too, not only the job's
        if tune_first:
            job_options = tuned(job_options, opts, signals)
        job, notes = job_options.job(command, container_env, note=say)
        if request is not None and request.known_count is None and job.procs_per_node > 1:
            job = job.replace(gpus=job.procs_per_node)  # --gpus all: N training processes drive N GPUs (NCCL's shm)
        for line in notes:
            say(line)
        return launch(job, opts, dry_run=dry_run, as_json=as_json)


def tuned(job_options: JobOptions, opts, signals) -> JobOptions:
    """The job with `shmguard tune`'s recommendation, swept in a container of the target image."""
    from shmguard.engine.run import tune_in_container
    from shmguard.job import parse_count

    batch_size = parse_count("batch_size", job_options.batch_size, 1)
    result = tune_in_container(opts.replace(command=()), str(job_options.dataset), batch_size, job_options.collate_fn,
                               signals=signals)
    recommended = result["recommended"]["workers"]
    say(f"shmguard: tuned: num_workers={recommended} ({result['recommended']['batches_per_second']:.1f} batches/s)")
    return job_options.replace(workers=str(recommended), sample_bytes=str(-(-result["batch_bytes"] // batch_size)),
                               sample_shape=None, dtype=None, batch_segments=result.get("batch_segments") or None,
                               dataset=None, collate_fn=None)


def say(text: str) -> None:
    print(text, file=sys.stderr)


def launch(job, options, dry_run: bool, as_json: bool, out=None, err=None) -> int:
    """Plan the run, then print the plan (--dry-run) or run the container and report how it ended."""
    from shmguard.engine.elastic import run_status
    from shmguard.engine.follow import engine_answers
    from shmguard.engine.plan import describe, docker_cli, make_plan
    from shmguard.engine.run import connect, execute, local_image, stop_signals_interrupt

    out = out or sys.stdout
    err = err or sys.stderr
    client = image = None
    engine_info: dict = {}
    elastic = run_status(options)
    plan = make_plan(job, options, elastic=elastic)  # every refusal that needs no engine comes before any engine call
    if not dry_run:
        with engine_answers("shmguard looked up the engine and the image"):
            client = connect()
            engine_info = client.info()
            image = local_image(client, options.image, options.pull, err)
            ceiling = engine_nofile(client, image, job)
        plan = make_plan(job, options, engine_info.get("MemTotal"), host_cpus=engine_info.get("NCPU"),
                         nofile_ceiling=ceiling, elastic=elastic)
    for warning in plan.warnings:
        print(f"shmguard: warning: {warning}", file=err)
    if dry_run:
        if as_json:
            print(json.dumps(stamp(plan_json(plan, job)), indent=2), file=out)
        else:
            for line in describe(plan):
                print(line, file=out)
            if options.healthcheck is None:  # decided by the image, which a dry run does not look into
                print("healthcheck: `shmguard health`, added when the image has shmguard (a dry run does not look; "
                      "--healthcheck or --no-healthcheck decides it here)", file=out)
            print(docker_cli(plan, bool(options.healthcheck)), file=out)
        return 0
    for line in describe(plan):
        print(f"shmguard: {line}", file=err)
    with stop_signals_interrupt() as signals:  # SIGTERM, or the terminal closing: stop the container as for Ctrl-C
        with engine_answers("shmguard created the container"):  # inside execute, a container's name is given
            # With --json, stdout carries the one JSON object: the container's stdout goes to stderr.
            result = execute(plan, client, image, engine_info, out=err if as_json else out, err=err, signals=signals)
    if options.detach:
        if as_json:
            emit(json.dumps(stamp({"container": result.name, "container_id": result.container_id, "detached": True,
                                   "auto_remove": options.remove, "shm_size_bytes": result.shm_size,
                                   "required_shm_bytes": plan.required_shm})), out)
        else:
            emit(result.container_id or "", out)
        return 0
    if as_json:
        emit(json.dumps(stamp(result_json(result, plan))), out)
    else:
        for line in report_lines(result):
            print(line, file=err)
        if options.remove and not result.removed:
            print(f"shmguard: {result.name} could not be removed (does the engine answer?): "
                  f"remove it with docker rm -f {result.name}", file=err)
    return result.exit_code


def engine_nofile(client, image, job) -> int | None:
    """The most open files the engine gives a container, asked only when the job needs more than the common
    default (shmguard.engine.nofile); None: not asked."""
    from shmguard import sizing
    from shmguard.engine import nofile

    wanted = sizing.nofile_limit(job)
    return None if wanted is None else nofile.ceiling(client, image.id, wanted)


def plan_json(plan, job) -> dict[str, Any]:
    """`run --dry-run --json`: the plan and the equivalent `docker run` line (secret values masked)."""
    from shmguard.engine.plan import docker_cli, redact

    return {"plan": {"shm_bytes": plan.shm_bytes, "required_shm_bytes": plan.required_shm,
                     "procs_per_node": job.procs_per_node, "mem_limit": plan.mem_limit, "nofile": plan.nofile,
                     "healthcheck": plan.options.healthcheck,
                     "environment": {k: redact(k, v) for k, v in plan.environment.items()},
                     "warnings": list(plan.warnings), "elastic": elastic_json(plan)},
            "docker_run": docker_cli(plan, bool(plan.options.healthcheck))}


def result_json(result, plan) -> dict[str, Any]:
    """`run --json`: how the job ended, its /dev/shm and the diagnosis."""
    return {"exit_code": result.exit_code, "container": result.name, "container_id": result.container_id,
            "shm_size_bytes": result.shm_size, "required_shm_bytes": plan.required_shm,
            "peak_shm_bytes": result.peak_shm, "peak_shm_lower_bound": result.peak_lower_bound,
            "diagnosis": result.diagnosis.as_dict() if result.diagnosis else None,
            "interrupted": result.interrupted, "removed": result.removed, "engine_note": result.engine_note,
            "elastic": {**elastic_json(plan), "note": result.elastic_note}, "shm_final_bytes": result.shm_final,
            "shm_growths": [growth.json() for growth in result.shm_growths], "shm_next_bytes": result.shm_next,
            "shm_mount": shm_mount_json(result.shm_mount)}


def shm_mount_json(shm) -> dict[str, Any] | None:
    """What is at /dev/shm when it is not the container's own tmpfs (container_shm.ContainerShm), else None."""
    if shm is None:
        return None
    return {"kind": shm.kind, "what": shm.describe(), "tmpfs": shm.tmpfs}


def elastic_json(plan) -> dict[str, Any]:
    """Whether /dev/shm grows while the job runs (`elastic` in the plan and the result), and why not."""
    status = plan.elastic
    return {"on": bool(status and status.on), "reason": status.reason if status else None}


def report_lines(result) -> list[str]:
    """The end of a run on stderr: the peak /dev/shm, what happened to the engine, the diagnosis."""
    from shmguard.engine.growths import summary
    from shmguard.engine.run import EXEC_INTERVAL
    from shmguard.units import docker_size, format_size

    lines = []
    size = result.shm_final or result.shm_size  # after its growths, if it grew
    mount = result.shm_mount
    if mount is not None:  # not the tmpfs shmguard sized: said as what it is
        lines.append(f"shmguard: /dev/shm was {mount.describe()}, not the container's own tmpfs: the size shmguard "
                     f"planned did not apply")
        if mount.tmpfs is False:
            lines.append("shmguard: peak /dev/shm not measured: it is not a tmpfs, and its filesystem's use is "
                         "everything else's on it too")
    if result.peak_shm is not None:
        pct = f" ({100 * result.peak_shm / size:.0f}%)" if size else ""
        if result.peak_lower_bound:
            lines.append(f"shmguard: peak /dev/shm at least {format_size(result.peak_shm)} of "
                         f"{format_size(size)}{pct} (sampled through docker exec every {EXEC_INTERVAL:g} s: "
                         f"shorter peaks are missed, so this is a lower bound; size from the model, not from it)")
        else:
            lines.append(f"shmguard: peak /dev/shm {format_size(result.peak_shm)} of {format_size(size)}{pct}")
    if result.shm_growths or result.shm_next:
        grew = summary(result.shm_growths) or "did not grow"
        peak = f" (peak {format_size(result.peak_shm)})" if result.peak_shm is not None else ""
        held = ", and could not grow as far as the job wanted" if result.elastic_note and result.shm_next else ""
        advice = f": start with --shm-size {docker_size(result.shm_next)} next time" if result.shm_next else ""
        lines.append(f"shmguard: /dev/shm {grew}{peak}{held}{advice}")
    if result.engine_note:
        lines.append(f"shmguard: {result.engine_note}")
    if result.diagnosis:
        lines.append(f"shmguard: {result.diagnosis.text()}")
    return lines


def emit(text: str, out) -> None:
    """Print shmguard's own result; a closed stdout (`| head`) is not an error of the run."""
    from shmguard.errors import silence

    try:
        print(text, file=out, flush=True)
    except BrokenPipeError:
        silence(out)


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.commands.declare import job_options

    def run_options(command):
        """The container options of `run`: generated from the translation table (shmguard.engine.flags), except --gpus,
        which the job options give (the job's GPUs are the container's)."""
        from shmguard.engine.flags import click_options

        return click_options(command, skip=("gpus",))

    @click.command("run", context_settings={"allow_interspersed_args": False})
    @job_options
    @run_options
    @click.option("--healthcheck/--no-healthcheck", default=None,
                  help="Docker healthcheck `shmguard health` (default: when the image has shmguard).")
    @click.option("--engine-wait", "engine_wait", default="60", show_default=True, metavar="SECONDS",
                  help="When the Docker engine goes away mid-run, wait this long for it to come back, then follow the job "
                       "again (or report how it ended) instead of giving up.")
    @click.option("--elastic/--no-elastic", default=True, show_default=True,
                  help="Grow the container's /dev/shm while the job runs, before it fills (local engine, as root).")
    @click.option("--dry-run", is_flag=True, help="Print the plan and the equivalent docker run command; start nothing.")
    @click.option("--tune", "tune_first", is_flag=True,
                  help="First sweep num_workers in the image with `shmguard tune` on --dataset (imported in the container) "
                       "and run the job with the recommendation (as SHMGUARD_WORKERS).")
    @click.option("--json", "as_json", is_flag=True,
                  help="Print the result (or the plan) as one JSON object on stdout; the container's output goes to stderr.")
    @click.argument("image")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    def run_command(job, image, command, healthcheck, engine_wait, elastic, dry_run, tune_first, as_json,
                    **container_options) -> int:
        """Run IMAGE [-- COMMAND...] with /dev/shm, memory, CPUs and ulimits sized for the job.

        Streams the logs, returns the container's exit code, stops and removes the
        container on Ctrl-C, SIGTERM or SIGHUP, reports the peak /dev/shm use, and
        explains a death by shared-memory exhaustion. Rides out a restart of the
        Docker engine (see --engine-wait). Exit 2 on a bad option (checked before
        any engine call), 125 when the container cannot be run (engine unreachable,
        image missing, a --memory that cannot hold the job) or the engine went away
        and did not come back.
        """
        return run(job, image, command, container_options, healthcheck, engine_wait, dry_run, tune_first, as_json,
                   elastic)

    return run_command
