"""`shmguard exporter` and `shmguard exporter render k8s`: options checked, the source chosen, the work handed on."""

from __future__ import annotations

import importlib.util
from typing import Any

from shmguard.errors import UsageError


def run_exporter(*, port: int, address: str, interval: str, host: str | None, kubelet_root: str | None,
                 node_name: str | None, once: bool, as_json: bool, api_server: str | None = None, root=None,
                 out=None, err=None, containerd_state: str | None = None) -> int:
    """Check every option before anything starts (a bad one is exit 2), then serve or take one pass."""
    from shmguard.exporter.server import once as take_once
    from shmguard.exporter.server import parse_interval, serve

    seconds = parse_interval(interval)
    if as_json and not once:
        raise UsageError("--json goes with --once (the server speaks the Prometheus text format)")
    source = make_source(host=host, kubelet_root=kubelet_root, node_name=node_name, api_server=api_server, root=root,
                         containerd_state=containerd_state)
    if once:
        return take_once(source, as_json_output=as_json, out=out, err=err)
    return serve(source, address=address, port=port, interval=seconds, err=err)


def make_source(*, host: str | None, kubelet_root: str | None, node_name: str | None, api_server: str | None,
                root=None, containerd_state: str | None = None) -> Any:
    """The engine's containers, or with kubelet_root the node's pods (node mode), their options checked: what
    `exporter` serves and `top` shows."""
    source: Any
    if kubelet_root is not None:
        if host is not None:
            raise UsageError("--host and --kubelet-root do not go together: node mode reads the kubelet's volumes")
        from shmguard.exporter.kubelet import source_for_node

        source = source_for_node(kubelet_root, node_name, root=root, api_server=api_server,
                                 containerd_state=containerd_state)
    else:
        if api_server is not None or containerd_state is not None:
            option = "--api-server" if api_server is not None else "--containerd-state"
            raise UsageError(f"{option} goes with --kubelet-root (node mode)")
        if importlib.util.find_spec("docker") is None:
            raise UsageError("`shmguard exporter` needs the Docker SDK: pip install 'shmguard[exporter]'")
        from shmguard.exporter.engine import EngineSource

        source = EngineSource(host, root=root)
    return source


def render_k8s(*, namespace: str, name: str, image: str, kubelet_root: str, interval: str, port: int,
               dashboard_path: str | None, runbook_base: str | None = None,
               containerd_state: str | None = None, host_network: bool = False, api_server: str | None = None) -> str:
    """The manifests as YAML; the dashboard written atomically to dashboard_path when given."""
    import json

    from shmguard.exporter.dashboard import dashboard
    from shmguard.exporter.render import render
    from shmguard.exporter.server import parse_interval
    from shmguard.manifests.yamlio import dump

    parse_interval(interval)
    if not kubelet_root.startswith("/"):
        raise UsageError(f"--kubelet-root must be an absolute path, not {kubelet_root!r}")
    if dashboard_path:
        from shmguard.files import write_atomic

        write_atomic(dashboard_path, json.dumps(dashboard(), indent=2) + "\n")
    from shmguard.exporter.render import CONTAINERD_STATE
    from shmguard.exporter.rules import RUNBOOKS

    state = CONTAINERD_STATE if containerd_state is None else containerd_state
    if state and not state.startswith("/"):
        raise UsageError(f"--containerd-state must be an absolute path (or empty: none), not {state!r}")
    if api_server and not api_server.startswith(("https://", "http://")):
        raise UsageError(f"--api-server must be an http(s) URL, not {api_server!r}")
    return dump(render(namespace=namespace, name=name, image=image, kubelet_root=kubelet_root, interval=interval,
                       port=port, runbook_base=runbook_base or RUNBOOKS, containerd_state=state,
                       host_network=host_network, api_server=api_server or ""))


def render_rules(runbook_base: str | None = None) -> str:
    from shmguard.exporter.rules import RUNBOOKS, rule_file
    from shmguard.manifests.yamlio import dump

    return dump([rule_file(runbook_base or RUNBOOKS)])
