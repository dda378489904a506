"""Where the pod templates are in a manifest, and the errors that name the document and path of a bad one.

Pure functions on plain dicts (what the YAML loader gives); no I/O.
"""

from __future__ import annotations

from typing import Any, Iterator

from shmguard.errors import UsageError
from shmguard.units import parse_quantity

POD_TEMPLATE_PATHS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


class ManifestError(UsageError):
    """A manifest that cannot be patched: the message names the document and the path."""


def where_of(index: int, doc: dict) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return f"document {index + 1} ({doc.get('kind', '?')}/{meta.get('name', '?')})"


def mapping(value, where: str, path: str) -> dict:
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: {path} should be a mapping, not {type(value).__name__}")
    return value


def listing(value, where: str, path: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}: {path} should be a list, not {type(value).__name__}")
    return value


def pod_templates(doc: dict, where: str) -> Iterator[tuple[str, dict]]:
    """(path, pod spec) for every pod template in a document; nothing for kinds without one."""
    kind = doc.get("kind")
    if kind == "Pod":
        yield "spec", mapping(doc.get("spec"), where, "spec")
    elif kind in POD_TEMPLATE_PATHS:
        node: Any = doc
        path = []
        for key in POD_TEMPLATE_PATHS[kind]:
            node = mapping(node, where, ".".join(path) or "the document").get(key)
            path.append(key)
            if node is None:
                raise ManifestError(f"{where}: {'.'.join(path)} is missing")
        template = mapping(node, where, ".".join(path))
        yield ".".join(path) + ".spec", mapping(template.get("spec"), where, ".".join(path) + ".spec")
    elif kind == "PyTorchJob":
        spec = mapping(doc.get("spec"), where, "spec")
        replicas = mapping(spec.get("pytorchReplicaSpecs"), where, "spec.pytorchReplicaSpecs")
        for replica_type, replica in replicas.items():
            base = f"spec.pytorchReplicaSpecs.{replica_type}"
            template = mapping(mapping(replica, where, base).get("template"), where, f"{base}.template")
            yield f"{base}.template.spec", mapping(template.get("spec"), where, f"{base}.template.spec")


def memory_of(value, where: str, path: str) -> int:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise ManifestError(f"{where}: {path}: {exc}") from None
