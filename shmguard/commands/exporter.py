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


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.commands.declare import source_options

    @click.group("exporter", invoke_without_command=True)
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
    def group(ctx, port, address, interval, host, kubelet_root, node_name, api_server, containerd_state, once,
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
        return run_exporter(port=port, address=address, interval=interval, host=host, kubelet_root=kubelet_root,
                            node_name=node_name, api_server=api_server, once=once, as_json=as_json,
                            containerd_state=containerd_state)

    @group.group("render")
    def render_group() -> None:
        """Print what runs the exporter in a cluster."""

    @render_group.command("k8s")
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
    def render_k8s_command(namespace, name, image, kubelet_root, interval, port, dashboard_path, runbook_base,
                           containerd_state, host_network, api_server) -> int:
        """Print the DaemonSet (node mode), its ServiceAccount and ClusterRole (get/list pods), Service, ServiceMonitor,
        PrometheusRule with the alerts, and a ConfigMap with the Grafana dashboard."""
        click.echo(render_k8s(namespace=namespace, name=name, image=image, kubelet_root=kubelet_root, interval=interval,
                              port=port, dashboard_path=dashboard_path, runbook_base=runbook_base,
                              containerd_state=containerd_state, host_network=host_network, api_server=api_server),
                   nl=False)
        return 0

    @render_group.command("rules")
    @click.option("--runbook-base", "runbook_base", metavar="URL",
                  help="Where your team serves shmguard's docs/runbooks.md: each alert's runbook_url is URL#<alert>.")
    def render_rules_command(runbook_base) -> int:
        """Print the alerts as a Prometheus rules file (for a Prometheus without the operator: rule_files)."""
        click.echo(render_rules(runbook_base), nl=False)
        return 0

    return group
