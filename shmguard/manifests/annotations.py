"""The job a manifest describes about itself: `shmguard.io/*` annotations and SHMGUARD_* env.

One file (or one cluster) holds many jobs, so each object and pod template may say
what it runs. Precedence, most specific first:

1. annotations on the pod template (`spec.template.metadata.annotations`, or a Pod's own);
2. annotations on the object that holds the template (the Deployment, RayCluster, …);
3. SHMGUARD_* variables in the env of the container that runs the DataLoader;
4. the command line (`patch --workers …`) or the webhook's defaults.

Values are merged field by field (a template may change only `workers`), with the
container's devices and launcher, by shmguard.declared.declared_job: the one reader of the
job a container declares, which patch, the webhook, explain and the exporter all call.
`shmguard.io/skip: "true"` leaves a template alone; `shmguard.io/container: NAME`
names the container that runs the DataLoader (default: the first).
Pure functions on plain dicts.
"""

from __future__ import annotations

from shmguard.job import ANNOTATION_PREFIX, OPTIONS, parse_flag

PREFIX = ANNOTATION_PREFIX
# Option name -> annotation key (shmguard.io/workers, shmguard.io/batch-size, …), made from the option table.
KEYS = {option.name: option.annotation for option in OPTIONS}
SKIP = PREFIX + "skip"
CONTAINER = PREFIX + "container"
MEMORY = PREFIX + "memory"  # the memory limit to give the DataLoader container(s) when they have none


def annotation_values(annotations) -> dict[str, str]:
    """The job fields an annotations mapping sets, keyed by option name (empty values count as unset)."""
    if not isinstance(annotations, dict):
        return {}
    return {name: str(annotations[key]).strip() for name, key in KEYS.items()
            if annotations.get(key) is not None and str(annotations[key]).strip() != ""}


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
