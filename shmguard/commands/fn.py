"""`shmguard fn`: the patch core as a KRM function (kustomize transformer, kpt fn, any ResourceList pipeline).

The contract (https://github.com/kubernetes-sigs/kustomize/blob/master/cmd/config/docs/api-conventions/functions-spec.md):
a `config.kubernetes.io/v1` ResourceList on stdin, with the manifests in `items` and
the function's settings in `functionConfig`; the same ResourceList on stdout, items
changed in place, and `results`: one per pod template, with a severity (error,
warning, info), the object it is about and the field. Exit 1 when a result is an
error (the templates in error are left as they were).

Settings, from a ConfigMap's `data` or any other config object's `spec` (or top
level): the job (`workers`, `batch-size`, `sample-shape` or `sample-bytes`, `dtype`,
`prefetch-factor`, `procs-per-node`, `gpus`, `pin-memory`, `sharing-strategy`) and the
patch options (`kind`, `name`, `selector`, `namespace` as comma-separated lists;
`opt-in`, `container`, `memory`, `size-unsized`, `include-init`, `all-templates`). `run` is pure: dicts in, dicts
out; `fn` reads the ResourceList from a stream and writes it to another.
"""

from __future__ import annotations

from typing import Any

from shmguard.errors import UsageError
from shmguard.job import OPTIONS, describes_job, make_job, parse_flag
from shmguard.manifests.podspec import PatchOptions, asked_memory, patch_documents
from shmguard.manifests.templates import label_of
from shmguard.pod import dict_of

API_VERSION = "config.kubernetes.io/v1"
JOB_KEYS = {option.setting: option.name for option in OPTIONS}  # functionConfig key -> option name


def settings_of(config) -> dict[str, Any]:
    """The key/values of a functionConfig: a ConfigMap's data, another object's spec, or its top level."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise UsageError(f"functionConfig should be a mapping, not {type(config).__name__}")
    if isinstance(config.get("data"), dict):
        return dict(config["data"])
    if isinstance(config.get("spec"), dict):
        return dict(config["spec"])
    return {k: v for k, v in config.items() if k not in ("apiVersion", "kind", "metadata")}


def words(value) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(str(w).strip() for w in items if str(w).strip())


def job_and_options(settings: dict[str, Any]) -> tuple[dict, PatchOptions]:
    known = set(JOB_KEYS) | {"kind", "name", "selector", "namespace", "opt-in", "container", "memory",
                             "size-unsized", "include-init", "all-templates"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UsageError(f"functionConfig: unknown setting {unknown[0]!r} (known: {', '.join(sorted(known))})")
    defaults = {JOB_KEYS[k]: str(v) for k, v in settings.items() if k in JOB_KEYS and v is not None}
    if describes_job(defaults):
        make_job(**defaults)  # a bad value is one error, not one per template
    memory = settings.get("memory")
    options = PatchOptions(
        kinds=words(settings.get("kind")), names=words(settings.get("name")), labels=words(settings.get("selector")),
        namespaces=words(settings.get("namespace")), opt_in=parse_flag("opt_in", settings.get("opt-in", False)),
        container=None if settings.get("container") is None else str(settings["container"]),
        memory=None if memory is None else asked_memory(memory, "functionConfig memory"),
        size_unsized=parse_flag("size_unsized", settings.get("size-unsized", False)),
        include_init=parse_flag("include_init", settings.get("include-init", False)),
        all_templates=parse_flag("all_templates", settings.get("all-templates", False)),
        job_given=describes_job(defaults))  # the functionConfig names the job: a template with no evidence is sized
    return defaults, options


def resource_ref(obj: dict) -> dict[str, Any]:
    meta = dict_of(obj.get("metadata"))
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name") or label_of(obj)}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


def run(resource_list) -> tuple[dict, int]:
    """(the ResourceList to write, exit code). Items are sized in place."""
    if not isinstance(resource_list, dict) or resource_list.get("kind") != "ResourceList":
        raise UsageError("shmguard fn reads a ResourceList (kind: ResourceList, items: [...]) on stdin")
    items = resource_list.get("items") or []
    if not isinstance(items, list):
        raise UsageError("ResourceList.items should be a list")
    defaults, options = job_and_options(settings_of(resource_list.get("functionConfig")))
    summary = patch_documents(items, defaults, options)
    results = []
    for r in summary.results:
        obj = items[r.document - 1]
        if r.status == "changed":
            message = f"{r.name}: " + "; ".join(c.text() for c in r.changes)
        elif r.status == "unchanged":
            message = f"{r.name}: nothing to change"
        else:
            message = f"{r.name}: {'left alone' if r.status == 'skipped' else 'error'}: {r.reason}"
        if r.notes:
            message += " (" + "; ".join(r.notes) + ")"
        result: dict[str, Any] = {"message": message, "severity": r.severity}
        if isinstance(obj, dict):
            result["resourceRef"] = resource_ref(obj)
        if r.path:
            result["field"] = {"path": r.path}
        results.append(result)
    out = dict(resource_list)
    out["apiVersion"] = resource_list.get("apiVersion") or API_VERSION
    out["items"] = items
    out["results"] = results
    return out, 1 if summary.errors else 0


def fn(stdin) -> tuple[str, int]:
    """`shmguard fn`: one ResourceList read from stdin (bounded, strict YAML), sized: the YAML to write, the code."""
    from shmguard.manifests import yamlio

    text = stdin.read(yamlio.MAX_INPUT_BYTES + 1)
    docs = [d for d in yamlio.load(text, "stdin") if d is not None]
    if len(docs) != 1:
        raise UsageError(f"shmguard fn reads one ResourceList on stdin, not {len(docs)} documents")
    resource_list, code = run(docs[0])
    return yamlio.dump([resource_list]), code


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import sys

    import click

    @click.command("fn")
    def fn_command() -> int:
        """KRM function: a ResourceList on stdin, the same with pod templates sized on stdout.

        The job and options come from functionConfig (a ConfigMap's data: workers,
        batch-size, sample-shape, … and kind, name, selector, namespace, opt-in,
        container, memory, size-unsized, include-init). One result per pod template,
        with its severity. For kustomize (as a container or exec transformer), kpt fn
        and anything that speaks ResourceList. Exit 1 when a result is an error.
        """
        text, code = fn(sys.stdin)
        click.echo(text, nl=False)
        return code

    return fn_command
