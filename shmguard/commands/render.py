"""`shmguard render k8s|compose`: print manifests sized for the job."""

from __future__ import annotations

from shmguard import k8s


def dump(documents: list) -> str:
    """YAML without anchors and aliases (kubectl and humans read them poorly), keys in the order given."""
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        def ignore_aliases(self, data) -> bool:
            return True

    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, default_flow_style=False)


def render_k8s(job, **kwargs) -> str:
    return dump([k8s.render_k8s(job, **kwargs)])


def render_compose(job, **kwargs) -> str:
    return dump([k8s.render_compose(job, **kwargs)])
