"""The click command line: parses options, calls the command functions, maps errors to exit codes.

This is the one boundary where a ShmguardError becomes a one-line message and an
exit code, and Ctrl-C becomes 130. Command logic lives in shmguard.commands.
"""

from __future__ import annotations

import sys

import click

from shmguard import __version__
from shmguard.errors import EXIT_USAGE, guarded
from shmguard.fixes import SPELLED_FOR
from shmguard.job import ENV_VARS, SHARING_STRATEGIES
from shmguard.manifests.render import KINDS as RENDER_KINDS
from shmguard.slurm import LAUNCHERS, SRUN
from shmguard.webhook import FAILURE_POLICIES, MODES, ON_ERROR

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
    """Declare the options that describe the DataLoader job (a row each of shmguard.job.OPTIONS; each also reads
    its SHMGUARD_* variable) and hand the command one JobOptions record, `job`, in their place."""
    import functools

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


def note(text: str) -> None:
    """A line for the user on stderr (what was inferred or measured)."""
    click.echo(text, err=True)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
             add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def check(args) -> int:
    """Check this container against the job: /dev/shm, memory, CPUs, GPUs, open files.

    Runs on the standard library alone (shmguard check --help lists its options).
    """
    from shmguard.corecli import check_main

    return check_main(list(args))


def strip_dashes(command) -> tuple:
    return tuple(command[1:]) if command and command[0] == "--" else tuple(command)


def run_options(command):
    """The container options of `run`: generated from the translation table (shmguard.engine.flags), except --gpus,
    which the job options give (the job's GPUs are the container's)."""
    from shmguard.engine.flags import click_options

    return click_options(command, skip=("gpus",))


@cli.command(context_settings={"allow_interspersed_args": False})
@job_options
@run_options
@click.option("--healthcheck/--no-healthcheck", default=None, help="Docker healthcheck `shmguard health` (default: when the image has shmguard).")
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
def run(job, image, command, healthcheck, engine_wait, elastic, dry_run, tune_first, as_json,
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
    from shmguard.commands.run import run as run_command

    return run_command(job, image, command, container_options, healthcheck, engine_wait, dry_run, tune_first, as_json,
                       elastic)


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


@render.command("k8s", context_settings={"allow_interspersed_args": False})
@job_options
@target_options
@click.option("--namespace", help="Namespace of the workload.")
@click.option("--kind", type=click.Choice(RENDER_KINDS, case_sensitive=False), default="job", show_default=True,
              help="What to render (a PyTorchJob has a Master and --replicas Workers; a RayCluster/RayJob a head "
                   "and --replicas workers; a JobSet --replicas pods; a TrainJob --replicas nodes).")
@click.option("--replicas", type=click.IntRange(min=0), default=1, show_default=True,
              help="Workers: PyTorchJob Worker replicas, Ray workers, JobSet pods, TrainJob nodes.")
@click.option("--runtime", default="torch-distributed", show_default=True,
              help="TrainJob: the ClusterTrainingRuntime it runs on.")
@click.option("--accelerator", default="nvidia.com/gpu", show_default=True, metavar="RESOURCE",
              help="The device resource --gpus asks for: amd.com/gpu, huawei.com/Ascend910, habana.ai/gaudi, …")
@click.option("--pod-resources", is_flag=True, help="CPU and memory as the pod's own spec.resources (Kubernetes 1.34+).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def render_k8s_command(job, image, name, cpus, memory, env, namespace, kind, replicas, runtime, accelerator,
                       pod_resources, command) -> int:
    """Print a Kubernetes manifest: an emptyDir of medium Memory at /dev/shm with a sizeLimit, memory limits
    that include it, CPUs for the workers, GPUs, the SHMGUARD_* environment and `shmguard health` probes."""
    from shmguard.commands.render import render_k8s

    click.echo(render_k8s(job, image, name, cpus, memory, env, strip_dashes(command), kind=kind, namespace=namespace,
                          workers_replicas=replicas, runtime=runtime, accelerator=accelerator,
                          pod_resources=pod_resources, say=note), nl=False)
    return 0


@render.command("compose", context_settings={"allow_interspersed_args": False})
@job_options
@target_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def render_compose_command(job, image, name, cpus, memory, env, command) -> int:
    """Print a compose service with shm_size, mem_limit, cpus, GPU reservations and a healthcheck."""
    from shmguard.commands.render import render_compose

    click.echo(render_compose(job, image, name, cpus, memory, env, strip_dashes(command), say=note), nl=False)
    return 0


@render.command("slurm", context_settings={"allow_interspersed_args": False})
@job_options
@click.option("--launcher", type=click.Choice(LAUNCHERS), default=SRUN, show_default=True,
              help="srun: one task per training process; torchrun: one task per node that starts them.")
@click.option("--name", default="train", show_default=True, help="The job's name (--job-name).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes (--nodes).")
@click.option("--time", "time_limit", metavar="TIME", help="Time limit (--time), as sbatch takes it.")
@click.option("--partition", metavar="NAME", help="Partition (--partition).")
@click.option("--memory", metavar="SIZE", help="--mem per node; at least the shm plus the processes (default: that, "
                                              "with Slurm's headroom).")
@click.option("-e", "--env", "env", multiple=True, metavar="NAME=VALUE", help="Environment variable (repeatable).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def render_slurm_command(job, launcher, name, nodes, time_limit, partition, memory, env, command) -> int:
    """Print an sbatch script: #SBATCH --mem (the shm, the processes and Slurm's headroom), --cpus-per-task,
    --ntasks-per-node and --gres for the job, a `shmguard check` preflight that stops it with the fix, and
    COMMAND through srun (or torchrun, one task per node)."""
    from shmguard.commands.render import render_slurm

    click.echo(render_slurm(job, strip_dashes(command), launcher, name, nodes, time_limit, partition, memory, env,
                            say=note), nl=False)
    return 0


@render.command("webhook")
@click.option("--namespace", default="shmguard", show_default=True, help="Namespace the webhook runs in.")
@click.option("--name", default="shmguard-webhook", show_default=True, help="Name of the Deployment, Service and configurations.")
@click.option("--image", default="shmguard-webhook:latest", show_default=True, help="The webhook image (docker/build.sh builds it).")
@click.option("--replicas", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--certs-dir", "certs_dir", type=click.Path(file_okay=False), help="Certificates from `shmguard webhook certs DIR`: "
              "its ca.crt becomes the caBundle. Without it: cert-manager issues them (Issuer, Certificate, cainjector).")
@click.option("--failure-policy", type=click.Choice(FAILURE_POLICIES), default="Ignore", show_default=True,
              help="What the apiserver does when the webhook cannot answer; the webhook treats a Pod it cannot "
                   "understand the same way (allow with a warning, or deny).")
@click.option("--timeout-seconds", type=click.IntRange(min=1, max=30), default=5, show_default=True)
@click.option("--mode", type=click.Choice(MODES), default="deny", show_default=True,
              help="/validate: deny a Pod whose /dev/shm cannot hold its job, or allow it with warnings.")
@click.option("--default", "defaults", multiple=True, metavar="NAME=VALUE",
              help="A job default the webhook gives every Pod (its `webhook serve --default`), e.g. prefetch_factor=4.")
@click.option("--host-network", "host_network", is_flag=True,
              help="Run on the node's network (a control plane that cannot reach the pod network): one per node.")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=8443, show_default=True,
              help="The port it serves on (the node's with --host-network); the Service's stays 443.")
@click.option("--url", default="", metavar="https://HOST:PORT",
              help="A base URL the apiserver calls instead of the Service (an apiserver that cannot reach Services); "
                   "make the certificates with --san HOST.")
def render_webhook_command(namespace, name, image, replicas, certs_dir, failure_policy, timeout_seconds, mode,
                           defaults, host_network, port, url) -> int:
    """Print the manifests that run the admission webhook: ServiceAccount, Deployment, PodDisruptionBudget, Service,
    Mutating- and ValidatingWebhookConfiguration (and cert-manager's Issuer and Certificate without --certs-dir)."""
    from shmguard.commands.webhook import render
    from shmguard.manifests.yamlio import dump

    docs = render(namespace=namespace, name=name, image=image, replicas=replicas, certs_dir=certs_dir,
                  failure_policy=failure_policy, timeout_seconds=timeout_seconds, mode=mode, defaults=defaults,
                  host_network=host_network, port=port, url=url)
    click.echo(dump(docs), nl=False)
    return 0


@cli.group()
def webhook() -> None:
    """The admission webhook: size Pods when they are created, refuse the ones that would hit the Bus error."""


@webhook.command("serve")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8443, show_default=True, help="HTTPS port (0: any free one).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--tls-cert", "tls_cert", required=True, type=click.Path(dir_okay=False), help="Serving certificate (PEM); reloaded when it changes.")
@click.option("--tls-key", "tls_key", required=True, type=click.Path(dir_okay=False), help="Its private key (PEM).")
@click.option("--mode", type=click.Choice(MODES), default="deny", show_default=True,
              help="/validate: deny a Pod whose /dev/shm cannot hold its job, or allow it with warnings.")
@click.option("--on-error", "on_error", type=click.Choice(ON_ERROR), default="allow", show_default=True,
              help="A Pod shmguard cannot understand: allow it unchanged with a warning (failurePolicy Ignore) or deny it (Fail).")
@click.option("--default", "defaults", multiple=True, metavar="NAME=VALUE",
              help="A job default for every Pod, e.g. prefetch_factor=4 (annotations and env override it).")
@click.option("--max-body", "max_body", default="3m", show_default=True, metavar="SIZE", help="Largest request body; larger ones get 413.")
@click.option("--max-buffer", "max_buffer", default="auto", show_default=True, metavar="SIZE|auto",
              help="Request bodies held at once (per process); past it, 503. auto: an eighth of the container's memory "
                   "limit (64 MiB without one), shared by the processes.")
@click.option("--timeout", default="10", show_default=True, metavar="SECONDS",
              help="For a request's head (from its first byte), for its body, for the answer's write, the TLS "
                   "handshake and an idle keep-alive connection; a slower client is disconnected.")
@click.option("--max-connections", "max_connections", type=int, default=128, show_default=True,
              help="Connections served at once; at the cap the one waiting longest on its client gives its place up, "
                   "else new ones wait in the listen backlog.")
@click.option("--drain-seconds", "drain_seconds", default="0", show_default=True, metavar="SECONDS",
              help="On SIGTERM, keep serving this long with /readyz failing before closing the listener.")
@click.option("--processes", type=click.IntRange(min=1, max=64), default=1, show_default=True,
              help="Processes accepting on the port (more than one uses more cores; needs a writable TMPDIR for metrics).")
def webhook_serve(port, host, tls_cert, tls_key, mode, on_error, defaults, max_body, max_buffer, timeout,
                  max_connections, drain_seconds, processes) -> int:
    """Serve the admission webhook over HTTPS: POST /mutate, POST /validate, GET /healthz, /readyz, /metrics."""
    import importlib.util

    from shmguard.commands.webhook import serve, serve_options
    from shmguard.errors import UsageError

    # Found, not imported: --processes sets prometheus_client up first.
    if importlib.util.find_spec("prometheus_client") is None:
        raise UsageError("`webhook serve` needs the webhook extra (prometheus_client is missing): pip install 'shmguard[webhook]'")
    return serve(serve_options(port=port, host=host, tls_cert=tls_cert, tls_key=tls_key, mode=mode, on_error=on_error,
                               defaults=defaults, max_body=max_body, max_buffer=max_buffer, timeout=timeout,
                               max_connections=max_connections, drain_seconds=drain_seconds, processes=processes))


@webhook.command("certs")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--namespace", default="shmguard", show_default=True, help="Namespace of the webhook's Service.")
@click.option("--name", default="shmguard-webhook", show_default=True, help="Name of the webhook's Service.")
@click.option("--san", "sans", multiple=True, metavar="NAME|IP", help="Another name or address for the serving certificate "
              "(e.g. localhost, 127.0.0.1 to try it locally). Repeatable.")
@click.option("--days", type=int, default=365, show_default=True, help="Validity of the serving certificate.")
@click.option("--force", is_flag=True, help="Replace certificates that are already there.")
def webhook_certs(directory, namespace, name, sans, days, force) -> int:
    """Write a self-signed CA (ca.crt, ca.key) and a serving certificate for the Service (tls.crt, tls.key) into DIRECTORY."""
    from shmguard.commands.webhook import certs

    paths, names = certs(directory, name, namespace, sans, days, force)
    click.echo(f"shmguard: wrote {', '.join(paths)} for {', '.join(names)}", err=True)
    return 0

@cli.command()
@job_options
@click.option("-i", "--in-place", is_flag=True, help="Rewrite the files (atomically) instead of printing.")
@click.option("--check", is_flag=True, help="Change nothing; print a diff of what would change and exit 1 if anything would.")
@click.option("--follow-symlinks", is_flag=True, help="With -i, patch the file a symlink points to (else a symlink is refused).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object on stderr (every template, what changed or why not).")
@click.option("--kind", "kinds", multiple=True, metavar="KIND", help="Only objects of this kind (`Job`, or with its group: `batch.volcano.sh/Job`); repeatable.")
@click.option("--name", "names", multiple=True, metavar="PATTERN", help="Only objects whose name matches (shell pattern); repeatable.")
@click.option("-l", "--selector", "labels", multiple=True, metavar="KEY[=VALUE]", help="Only objects with this label; repeatable (all must match).")
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS", help="Only objects in this namespace; repeatable.")
@click.option("--opt-in", is_flag=True, help='Only templates whose object or template is annotated shmguard.io/skip: "false".')
@click.option("--container", metavar="NAME[,NAME]", help="The container(s) that run the DataLoader (default: the first that is not a known sidecar).")
@click.option("--memory", metavar="SIZE", help="A memory limit for the DataLoader containers: given to those with none (default: "
                   "none given), a lower one raised to it; never below what the job needs.")
@click.option("--size-unsized", is_flag=True, help="Give an existing memory /dev/shm without sizeLimit the job's size (default: keep it unsized).")
@click.option("--include-init", is_flag=True, help="Mount /dev/shm into init containers and sidecars too.")
@click.option("--all-templates", is_flag=True, help="Size every pod template, not only the training ones (a server, a "
                   "database, a proxy: see the README's Kubernetes section for how a template is judged).")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
def patch(job, in_place, check, follow_symlinks, as_json, kinds, names, labels, namespaces, opt_in, container, memory,
          size_unsized, include_init, all_templates, files) -> int:
    """Add or fix the /dev/shm emptyDir, its mount and the memory limits in every pod template of FILES (or stdin).

    Finds the pod templates of Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet,
    Job, CronJob, the Kubeflow jobs (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob,
    JAXJob), Trainer runtimes, KubeRay, JobSet, Volcano (and its JobTemplate, CronJob),
    LeaderWorkerSet, Argo (and the objects its resource steps create), Tekton, KServe,
    Knative, Kubeflow Notebook and `kind: List`; inside Katib Experiments and Trials and
    AppWrappers (read by the wrapped object's kind); compiled Kubeflow Pipelines steps
    (their need told); and of any other object by shape. By default a template is
    sized unless affirmative evidence says it does not train (a command that only
    sleeps or fetches, a database, proxy, operator, hub, exporter or serving image, a
    serving kind), which the "left alone" line names; with the job options given, a
    template with no evidence either way is sized (--all-templates sizes every one);
    shmguard.io/skip: "true" leaves one alone. shmguard.io/*
    annotations on an object or template override the job options. Never lowers a
    limit or a request, never shrinks a /dev/shm. Only the lines that must change are
    changed: comments, order, quoting and layout stay. Patching twice changes nothing.
    """
    from shmguard.commands.patch import json_failure, patch_options
    from shmguard.commands.patch import patch as run_patch
    from shmguard.errors import ShmguardError

    notes: list[str] = []  # with --json, inside the one object
    try:
        selection = patch_options(in_place, check, files, kinds, names, labels, namespaces, opt_in, container, memory,
                                  size_unsized, include_init, all_templates)
        defaults = job.defaults(notes.append if as_json else note)
    except ShmguardError as exc:
        if not as_json:
            raise
        return json_failure(exc, notes, sys.stderr)
    return run_patch(defaults, list(files), in_place=in_place, check=check, follow_symlinks=follow_symlinks,
                     options=selection, as_json=as_json, notes=notes)


@cli.command("fn")
def fn_command() -> int:
    """KRM function: a ResourceList on stdin, the same with pod templates sized on stdout.

    The job and options come from functionConfig (a ConfigMap's data: workers,
    batch-size, sample-shape, … and kind, name, selector, namespace, opt-in,
    container, memory, size-unsized, include-init). One result per pod template,
    with its severity. For kustomize (as a container or exec transformer), kpt fn
    and anything that speaks ResourceList. Exit 1 when a result is an error.
    """
    import sys

    from shmguard.manifests import yamlio
    from shmguard.manifests.krm import run

    text = sys.stdin.read(yamlio.MAX_INPUT_BYTES + 1)
    docs = [d for d in yamlio.load(text, "stdin") if d is not None]
    if len(docs) != 1:
        from shmguard.errors import UsageError

        raise UsageError(f"shmguard fn reads one ResourceList on stdin, not {len(docs)} documents")
    resource_list, code = run(docs[0])
    click.echo(yamlio.dump([resource_list]), nl=False)
    return code


@cli.command("explain")
@job_options
@click.option("--host", metavar="URL", help="The Docker API to ask (default: DOCKER_HOST, else the local socket); "
                                            "Podman's socket works too, e.g. unix:///run/podman/podman.sock.")
@click.option("--tail", type=click.IntRange(min=1, max=1_000_000), default=2000, show_default=True,
              help="Log lines to read: the container's last N, or the last N of a log (a FILE or stdin).")
@click.option("--shm-size", "shm_size", metavar="SIZE", help="A log on stdin: the /dev/shm the container had (64m, 64Mi).")
@click.option("--memory-limit", "memory_limit", metavar="SIZE", help="A log on stdin: the container's memory limit.")
@click.option("--exit-code", "exit_code", type=int, help="A log on stdin: the container's exit code.")
@click.option("--oom-killed", "oom_killed", is_flag=True, help="A log on stdin: the container was OOM-killed.")
@click.option("--platform", type=click.Choice(SPELLED_FOR),
              help="A log on stdin: spell the fix for this platform (default: what the log shows, else Docker's "
                   "and Kubernetes').")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.argument("container", metavar="[CONTAINER|FILE|-]", required=False)
def explain_command(job, container, host, tail, shm_size, memory_limit, exit_code, oom_killed, platform,
                    as_json) -> int:
    """Explain why a container died: was it shared memory, and what is the exact fix?

    CONTAINER is read through the Docker API (inspect and the log's tail; Podman
    through its Docker-compatible socket). A FILE (an argument that names a file
    here) is read as a log or a Pod object, and `-` or no argument reads stdin:
    a Pod object (kubectl get pod NAME -o yaml) or a log (kubectl logs NAME), which --shm-size,
    --memory-limit, --exit-code and --oom-killed describe. The job options (or the
    container's SHMGUARD_* variables and shmguard.io/* annotations) give the sizes.
    Exit 1 when it finds a shared-memory failure, 0 when not, 2 on bad usage or
    when the container cannot be read.
    """
    from shmguard.commands.explain import describe_sizes, explain

    flag_values = job.values(note)
    stdin = None
    if container == "-" or (not container and not sys.stdin.isatty()):
        stdin = getattr(sys.stdin, "buffer", sys.stdin)  # read in bounded memory by explain (--tail)
    facts = {"shm_size": describe_sizes(shm_size, "--shm-size"), "memory_limit": describe_sizes(memory_limit, "--memory-limit"),
             "exit_code": exit_code, "oom_killed": oom_killed, "platform": platform}
    return explain(container, flag_values, stdin, host, tail, facts, as_json, echo=click.echo)


@cli.command("clean")
@click.option("--dir", "directory", default="/dev/shm", show_default=True, metavar="DIR", help="The directory to clean.")
@click.option("--uid", metavar="UID", help="Whose segments: a uid or user name (default: SLURM_JOB_UID, else yours).")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--root", hidden=True, help="Read /proc and DIR under this root (tests).")
def clean_command(directory, uid, dry_run, as_json, root) -> int:
    """Remove PyTorch segments (torch_<pid>_*, …) in /dev/shm that no process can use any more.

    Only the given user's files, only when their creator pid is gone and no process has them open or
    mapped; what cannot be decided (a container's pid namespace, processes it cannot inspect) is kept
    and said. For a Slurm Epilog, a Docker host or any shared node. Exit 0, or 1 when a file to remove
    could not be removed.
    """
    from shmguard.commands.clean import run as run_clean

    return run_clean(directory, uid, dry_run, as_json, root, echo=click.echo)


@cli.command("measure")
@click.option("--dataset", required=True, metavar="MODULE:CALLABLE", help="A callable returning your Dataset or IterableDataset.")
@click.option("--batch-size", required=True, envvar=ENV_VARS["batch_size"], metavar="B", help="Samples per batch.")
@click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help="Your DataLoader's collate_fn (default: default_collate).")
@click.option("--samples", type=click.IntRange(min=1, max=100_000), default=32, show_default=True, help="Samples to read (random, seeded).")
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=0, show_default=True, help="Seed for the sample order.")
@click.option("--sharing-strategy", "sharing_strategy", type=click.Choice(SHARING_STRATEGIES),
              default=SHARING_STRATEGIES[0], show_default=True, envvar=ENV_VARS["sharing_strategy"],
              help="torch.multiprocessing sharing strategy (file_system adds a 64-byte header to every segment).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Samples read so far on stderr (default: when stderr is a terminal and not --json).")
def measure_command(dataset, batch_size, collate_fn, samples, seed, sharing_strategy, as_json, show_progress) -> int:
    """Measure the bytes a real batch of your dataset puts through shared memory.

    Builds batches with the DataLoader's collate and lists every tensor in them: in a
    worker each becomes its own segment in /dev/shm, rounded up to pages (the batch
    taking the most counts when samples vary). Numpy arrays, strings and other
    objects go through the worker's pipe and are listed apart. Prints the options
    that describe the job to check, run, render and patch.
    Needs torch. Exit 2 when the module cannot be imported or your code raises
    (its traceback is shown).
    """
    import json

    from shmguard.commands.measure import report_json, report_text
    from shmguard.job import parse_count
    from shmguard.measuring import measure
    from shmguard.progress import Reporter, wanted

    reading = Reporter("shmguard measure", wanted(show_progress, as_json), every=0.5)
    result = measure(dataset, parse_count("batch_size", batch_size, 1), samples=samples, seed=seed, collate_spec=collate_fn,
                     sharing_strategy=sharing_strategy, progress=lambda done, total, what: reading(done, total, what))
    from shmguard.jsonout import stamp

    click.echo(json.dumps(stamp(report_json(result)), indent=2) if as_json else report_text(result))
    return 0


@cli.command("tune")
@click.option("--dataset", required=True, metavar="MODULE:CALLABLE", help="A callable returning your Dataset.")
@click.option("--batch-size", required=True, envvar=ENV_VARS["batch_size"], metavar="B", help="Samples per batch.")
@click.option("--collate-fn", "collate_fn", metavar="MODULE:CALLABLE", help="Your DataLoader's collate_fn.")
@click.option("--workers", "workers", metavar="LIST", help="num_workers to try, e.g. 0,2,4,8 (default: 0, 1, 2, 4, … up to the CPUs).")
@click.option("--prefetch-factors", metavar="LIST", help="prefetch factors to try (default: 2).")
@click.option("--batches", type=click.IntRange(min=1, max=100_000), default=20, show_default=True, help="Batches timed per step.")
@click.option("--plot", "plot", metavar="FILE.png", help="Also write a bar chart of the throughput as a PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="A line per step on stderr (default: when stderr is a terminal and not --json).")
def tune_command(dataset, batch_size, collate_fn, workers, prefetch_factors, batches, plot, as_json, show_progress) -> int:
    """Sweep num_workers on your DataLoader and recommend the smallest within 5% of the best throughput.

    Each step runs real batches and reports batches/s, the peak /dev/shm and memory;
    steps that would not fit in the free /dev/shm are skipped. Needs torch.
    """
    import json

    from shmguard.commands import tune as tuning
    from shmguard.job import parse_count

    sweep = tuning.parse_list(workers, "--workers", 0) if workers else None
    factors = tuning.parse_list(prefetch_factors, "--prefetch-factors", 1) if prefetch_factors else None

    from shmguard.progress import Reporter, wanted

    report = Reporter("shmguard tune", wanted(show_progress, as_json))
    reading = Reporter("shmguard tune", report.enabled, every=0.5)

    def progress(step, done, total, best) -> None:
        what = step.skipped or f"{step.batches_per_second:.1f} batches/s"
        lead = f"; best so far num_workers={best.workers} ({best.batches_per_second:.1f} batches/s)" if best else ""
        report(done, total, f"num_workers={step.workers} prefetch_factor={step.prefetch_factor}: {what}{lead}",
               force=True)

    result = tuning.tune(dataset, parse_count("batch_size", batch_size, 1), sweep, factors, batches, collate_fn,
                         progress=progress, measure_progress=lambda done, total, what: reading(done, total, what))
    if plot:
        tuning.write_png(plot, result)
    from shmguard.jsonout import stamp

    click.echo(json.dumps(stamp(tuning.as_json(result)), indent=2) if as_json else tuning.table(result))
    return 0 if result.recommended else 1


@cli.command("health", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def health_command(args) -> int:
    """Container healthcheck: is /dev/shm a tmpfs with room for the job (see `shmguard health --help`).

    Listed here for --help only: `shmguard health` is dispatched before click loads (shmguard.main), so that
    it imports the standard library alone.
    """
    from shmguard.health import main as health_main

    return health_main(list(args))


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


@cli.group("exporter", invoke_without_command=True)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=9808, show_default=True,
              help="Port of /metrics and /healthz (0: any free one, printed on stderr).")
@click.option("--address", default="::", show_default=True,
              help="Address to listen on (:: is every IPv6 and IPv4 address; 0.0.0.0 where the host has no IPv6).")
@click.option("--interval", default="1s", show_default=True, metavar="DURATION",
              help="Time between passes over the containers (100ms to 1h): the resolution of the peak.")
@source_options
@click.option("--once", is_flag=True, help="Take one pass, print it (Prometheus text format) and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the pass as one JSON object.")
@click.pass_context
def exporter(ctx, port, address, interval, host, kubelet_root, node_name, api_server, containerd_state, once,
             as_json) -> int:
    """Serve live /dev/shm and memory metrics of every running container for Prometheus (/metrics, /healthz).

    Per container of the Docker or Podman engine (or, with --kubelet-root, per
    memory emptyDir of the node's pods): /dev/shm size, use, peak and what the
    declared job needs (its SHMGUARD_* variables), the memory limit, use and
    shmem of its cgroup. `shmguard exporter render k8s` writes the DaemonSet,
    alerts and dashboard. Exit 2 on a bad option or a port in use.
    """
    if ctx.invoked_subcommand is not None:
        return 0
    from shmguard.exporter.command import run_exporter

    return run_exporter(port=port, address=address, interval=interval, host=host, kubelet_root=kubelet_root,
                        node_name=node_name, api_server=api_server, once=once, as_json=as_json,
                        containerd_state=containerd_state)


@exporter.group("render")
def exporter_render() -> None:
    """Print what runs the exporter in a cluster."""


@exporter_render.command("k8s")
@click.option("--namespace", default="shmguard", show_default=True, help="Namespace of the DaemonSet and Service.")
@click.option("--name", default="shmguard-exporter", show_default=True, help="Name of every object.")
@click.option("--image", default="shmguard-webhook:latest", show_default=True,
              help="An image with shmguard and its webhook extra (prometheus_client).")
@click.option("--kubelet-root", "kubelet_root", default="/var/lib/kubelet", show_default=True, metavar="DIR",
              help="The kubelet's root directory on the nodes.")
@click.option("--interval", default="5s", show_default=True, metavar="DURATION", help="Time between passes.")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=9808, show_default=True)
@click.option("--dashboard", "dashboard_path", type=click.Path(dir_okay=False), metavar="FILE.json",
              help="Also write the Grafana dashboard here (it is in a ConfigMap of the output too).")
@click.option("--runbook-base", "runbook_base", metavar="URL",
              help="Where your team serves shmguard's docs/runbooks.md: each alert's runbook_url is URL#<alert>.")
@click.option("--containerd-state", "containerd_state", metavar="DIR",
              help="containerd's state directory on the nodes [default: /run/containerd], for the runtime's own "
                   "/dev/shm of pods that mount no emptyDir there; '' leaves it out (CRI-O).")
@click.option("--host-network", "host_network", is_flag=True, help="Run on the node's network.")
@click.option("--api-server", "api_server", metavar="URL",
              help="The Kubernetes API to list the node's pods from (default: the in-cluster one).")
def exporter_render_k8s(namespace, name, image, kubelet_root, interval, port, dashboard_path, runbook_base,
                        containerd_state, host_network, api_server) -> int:
    """Print the DaemonSet (node mode), its ServiceAccount and ClusterRole (get/list pods), Service, ServiceMonitor,
    PrometheusRule with the alerts, and a ConfigMap with the Grafana dashboard."""
    from shmguard.exporter.command import render_k8s

    click.echo(render_k8s(namespace=namespace, name=name, image=image, kubelet_root=kubelet_root, interval=interval,
                          port=port, dashboard_path=dashboard_path, runbook_base=runbook_base,
                          containerd_state=containerd_state, host_network=host_network, api_server=api_server),
               nl=False)
    return 0


@exporter_render.command("rules")
@click.option("--runbook-base", "runbook_base", metavar="URL",
              help="Where your team serves shmguard's docs/runbooks.md: each alert's runbook_url is URL#<alert>.")
def exporter_render_rules(runbook_base) -> int:
    """Print the alerts as a Prometheus rules file (for a Prometheus without the operator: rule_files)."""
    from shmguard.exporter.command import render_rules

    click.echo(render_rules(runbook_base), nl=False)
    return 0


@cli.command("top")
@source_options
@click.option("--interval", default="1s", show_default=True, metavar="DURATION", help="Time between frames.")
@click.option("--once", is_flag=True, help="Print one frame as plain text and exit.")
def top(host, kubelet_root, node_name, api_server, containerd_state, interval, once) -> int:
    """Show every container's /dev/shm live: size, use, peak and what its job needs, as bars, the ones heading for
    a Bus error (or an OOM kill) first. The exporter's readers, without Prometheus. Ctrl-C leaves (exit 0)."""
    from shmguard.exporter.command import make_source
    from shmguard.exporter.server import parse_interval
    from shmguard.exporter.top import run_top

    seconds = parse_interval(interval)
    source = make_source(host=host, kubelet_root=kubelet_root, node_name=node_name, api_server=api_server,
                         containerd_state=containerd_state)
    return run_top(source, interval=seconds, once=once)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code instead of exiting (the boundary: shmguard.errors.guarded)."""

    def invoke() -> int:
        try:
            result = cli.main(args=argv, prog_name="shmguard", standalone_mode=False)
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.ClickException as exc:
            exc.show()
            return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
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
