"""The job a manifest describes about itself: `shmguard.io/*` annotations and SHMGUARD_* env.

One file (or one cluster) holds many jobs, so each object and pod template may say
what it runs. Precedence, most specific first:

1. annotations on the pod template (`spec.template.metadata.annotations`, or a Pod's own);
2. annotations on the object that holds the template (the Deployment, RayCluster, …);
3. SHMGUARD_* variables in the env of the container that runs the DataLoader;
4. the command line (`patch --workers …`) or the webhook's defaults.

Values are merged field by field (a template may change only `workers`), then
validated once by shmguard.job.make_job, whose messages name the option.
`shmguard.io/skip: "true"` leaves a template alone; `shmguard.io/container: NAME`
names the container that runs the DataLoader (default: the first).
Pure functions on plain dicts.
"""

from __future__ import annotations

from shmguard import nccl
from shmguard.job import ENV_VARS, make_job, parse_flag

PREFIX = "shmguard.io/"
# Option name -> annotation key: shmguard.io/workers, shmguard.io/batch-size, shmguard.io/sample-shape, …
KEYS = {name: PREFIX + name.replace("_", "-") for name in ENV_VARS}
SKIP = PREFIX + "skip"
CONTAINER = PREFIX + "container"
MEMORY = PREFIX + "memory"  # the memory limit to give the DataLoader container(s) when they have none


def annotation_values(annotations) -> dict[str, str]:
    """The job fields an annotations mapping sets, keyed by option name (empty values count as unset)."""
    if not isinstance(annotations, dict):
        return {}
    return {name: str(annotations[key]).strip() for name, key in KEYS.items()
            if annotations.get(key) is not None and str(annotations[key]).strip() != ""}


def env_values(container) -> dict[str, str]:
    """The job fields a container's literal `env` sets through SHMGUARD_* variables (valueFrom is not followed)."""
    env = container.get("env") if isinstance(container, dict) else None
    if not isinstance(env, list):
        return {}
    by_var = {var: name for name, var in ENV_VARS.items()}
    out = {}
    for item in env:
        if (isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"] in by_var
                and isinstance(item.get("value"), (str, int, float))):
            if str(item["value"]).strip() != "":
                out[by_var[item["name"]]] = str(item["value"]).strip()
    return out


def nccl_env_values(container) -> dict[str, str]:
    """The NCCL_* variables (those that change NCCL's /dev/shm) a container's literal `env` sets."""
    env = container.get("env") if isinstance(container, dict) else None
    if not isinstance(env, list):
        return {}
    return dict(nccl.env_of({item["name"]: str(item["value"]) for item in env
                             if isinstance(item, dict) and isinstance(item.get("name"), str)
                             and isinstance(item.get("value"), (str, int, float))}))


def setting(key: str, *layers) -> str | None:
    """The value of one annotation, from the most specific layer that sets it (layers most specific first)."""
    for layer in layers:
        if isinstance(layer, dict) and layer.get(key) is not None and str(layer[key]).strip() != "":
            return str(layer[key]).strip()
    return None


def skip_setting(*layers) -> bool | None:
    """`shmguard.io/skip` from the most specific layer that says anything (True, False), or None: not said."""
    for layer in layers:
        if isinstance(layer, dict) and SKIP in layer:
            return parse_flag("skip", layer[SKIP])
    return None


def skipped(*layers) -> bool:
    """Whether any annotations layer says `shmguard.io/skip: "true"` (the most specific one that says anything wins)."""
    for layer in layers:
        if isinstance(layer, dict) and SKIP in layer:
            return parse_flag("skip", layer[SKIP])
    return False


def merged_values(defaults: dict, container=None, *annotation_layers) -> dict:
    """Raw job values: defaults < container env < annotation layers (least specific first)."""
    values = {k: v for k, v in defaults.items() if v is not None}
    values.update(env_values(container))
    for layer in annotation_layers:
        values.update(annotation_values(layer))
    # A sample size given at a more specific level replaces the other way of giving it.
    return values


def describes_job(values: dict) -> bool:
    return "workers" in values or "batch_size" in values


def resolve_job(defaults: dict, container=None, *annotation_layers):
    """The Job for one pod template, or None when nothing describes one. UsageError for bad values."""
    values = merged_values(defaults, container, *annotation_layers)
    if not describes_job(values):
        return None
    # A sample size given at a more specific level (env over defaults, annotations over env) replaces the other form.
    levels = [{k: v for k, v in defaults.items() if v is not None}, env_values(container)]
    levels += [annotation_values(layer) for layer in annotation_layers]
    level = {name: max((i for i, lv in enumerate(levels) if name in lv), default=-1) for name in ("sample_bytes", "sample_shape")}
    if level["sample_bytes"] > level["sample_shape"]:
        values.pop("sample_shape", None)
        values.pop("dtype", None)
    elif level["sample_shape"] > level["sample_bytes"]:
        values.pop("sample_bytes", None)
    return make_job(**{k: v for k, v in values.items() if k in ENV_VARS}, nccl_env=nccl_env_values(container))
