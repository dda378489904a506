"""Write charts/shmguard from the code: the templates are the trees of `render webhook` and `exporter render k8s`
(shmguard.webhook.deploy, shmguard.exporter.render) written as Helm templates, values.yaml, values.schema.json and
the README's table come from the values table (shmguard.chart.values).

    python3 -m shmguard.chart [DIR]     # default charts/shmguard of this checkout

tests/unit/chart checks that the committed chart is what this writes, so a change to either renderer that is not
carried into the chart fails there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from shmguard.chart import tree, values

CHART_VERSION = "0.1.0"
WEBHOOK_SWITCH = "webhook.enabled"
EXPORTER_SWITCH = "exporter.enabled"
GENERATED = "# Written by `python3 -m shmguard.chart` from shmguard's code: edit the code, not this file.\n"


def chart_yaml() -> str:
    from shmguard import __version__

    return (GENERATED +
            "apiVersion: v2\n"
            "name: shmguard\n"
            "description: The shmguard admission webhook (sizes the /dev/shm of training Pods at creation) and "
            "exporter (every pod's /dev/shm, its memory and its job's need, for Prometheus)\n"
            "type: application\n"
            f"version: {CHART_VERSION}\n"
            f'appVersion: "{__version__}"\n'
            "kubeVersion: \">=1.20.0-0\"\n"
            "keywords: [pytorch, dataloader, shm, admission-webhook, prometheus-exporter]\n")


def part(switch: str, trees: list, preamble: str = "") -> str:
    body = tree.helm_template(trees, preamble)
    return GENERATED.replace("# ", "{{- /* ", 1).rstrip("\n") + " */}}\n" + \
        f"{{{{- if .Values.{switch} }}}}\n{body}{{{{- end }}}}\n"


def webhook_template() -> str:
    from shmguard.webhook.deploy import CERTS_TEMPLATE, webhook_documents

    return part(WEBHOOK_SWITCH, webhook_documents(), CERTS_TEMPLATE)


def exporter_template() -> str:
    from shmguard.exporter.render import exporter_documents

    return part(EXPORTER_SWITCH, exporter_documents())


def values_yaml() -> str:
    """values.yaml: each value with its help above it."""
    import yaml

    lines = [GENERATED.rstrip("\n"), "# Every value is described in README.md; values.schema.json checks them."]
    written: set[str] = set()
    for setting in values.settings():
        *parents, leaf = setting.path.split(".")
        for depth, parent in enumerate(parents):
            prefix = ".".join(parents[: depth + 1])
            if prefix not in written:
                written.add(prefix)
                lines.append(f"{'  ' * depth}{parent}:")
        pad = "  " * len(parents)
        lines.append(f"{pad}# {setting.help}")
        dumped = yaml.safe_dump({leaf: setting.default}, default_flow_style=False, sort_keys=False).rstrip("\n")
        lines.extend(pad + line for line in dumped.splitlines())
    return "\n".join(lines) + "\n"


def values_table() -> str:
    rows = ["| value | default | what it does |", "|---|---|---|"]
    for setting in values.settings():
        default = json.dumps(setting.default, sort_keys=False)
        text = setting.help.replace("|", "\\|")
        rows.append(f"| `{setting.path}` | `{default}` | {text} |")
    return "\n".join(rows) + "\n"


README_HEAD = """\
# The shmguard chart

The shmguard admission webhook and exporter, each switchable. The templates are made from the code that
`shmguard render webhook` and `shmguard exporter render k8s` print (`python3 -m shmguard.chart` writes this
folder), so with the same settings the chart renders exactly what those commands render (a test with real Helm
compares them: `tests/integration/test_helm.py`).

```sh
helm install shmguard charts/shmguard --namespace shmguard --create-namespace
kubectl label namespace ml shmguard.io/webhook=enabled          # the namespaces whose Pods it sizes (opt-in)
helm install shmguard charts/shmguard -n shmguard --set exporter.serviceMonitor.enabled=true \\
    --set exporter.prometheusRule.enabled=true                  # with the Prometheus operator
```

- **The webhook**: ServiceAccount, Deployment, PodDisruptionBudget, Service, Mutating- and
  ValidatingWebhookConfiguration. The serving certificate is made by Helm at install (`webhook.certs.mode:
  generate`: a CA and a certificate for the Service's names, in the Secret `<name>-tls`, kept across upgrades),
  or by cert-manager, or by you (`provided`). Uninstalling removes both WebhookConfigurations with the rest: none
  is left to block Pods.
- **The exporter**: ServiceAccount, ClusterRole (get and list pods) and its binding, a DaemonSet in node mode
  (the kubelet root and the cgroup hierarchy read-only), a headless Service; a ServiceMonitor, a PrometheusRule
  with the alerts, and a ConfigMap with the Grafana dashboard, each behind its switch (the first two need the
  Prometheus operator's CRDs, so they are off by default and a cluster without them installs).

On a cluster without `policy/v1` (Kubernetes 1.20) the PodDisruptionBudget is `policy/v1beta1`: the chart asks
the cluster. Where the apiserver cannot reach the webhook's Service (no kube-proxy beside it; a node on loopback,
whose addresses no Endpoints object takes), `webhook.url` makes it call `https://HOST:PORT` instead, with
`webhook.hostNetwork`; the certificate Helm makes then names that host too. `tests/integration/test_kube_helm.py`
installs, upgrades, rolls back and uninstalls it with Helm 3 and Helm 4 on the project's Kubernetes v1.20.2.

Values that contradict each other stop `helm install` before anything is made: the schema refuses `provided`
certificates without their CA and the exporter without the kubelet root, and the templates refuse both parts
off, a ServiceMonitor or PrometheusRule without the exporter, and the operator's kinds on a cluster without its
CRDs.

## Values

"""


def readme() -> str:
    return README_HEAD + values_table()


HELMIGNORE = ".git/\n*.swp\n*.bak\n*.tmp\n*~\n"

NOTES = """\
{{- if .Values.webhook.enabled }}
The webhook {{ include "shmguard.webhookName" . }} sizes the Pods labelled shmguard.io/webhook=enabled in the namespaces
labelled shmguard.io/webhook=enabled (by default; webhook.namespaceSelector and webhook.objectSelector).
{{- end }}
{{- if .Values.exporter.enabled }}
The exporter {{ include "shmguard.exporterName" . }} serves every node's pod /dev/shm on port {{ .Values.exporter.port }}:
  kubectl -n {{ .Release.Namespace }} port-forward daemonset/{{ include "shmguard.exporterName" . }} {{ .Values.exporter.port }}
{{- end }}
"""


def files() -> dict[str, str]:
    """The chart's files by their path in it."""
    return {
        "Chart.yaml": chart_yaml(),
        "values.yaml": values_yaml(),
        "values.schema.json": json.dumps(values.schema(), indent=2) + "\n",
        "README.md": readme(),
        ".helmignore": HELMIGNORE,
        "templates/_helpers.tpl": values.HELPERS_TEMPLATE,
        "templates/checks.yaml": values.CHECKS_TEMPLATE,
        "templates/webhook.yaml": webhook_template(),
        "templates/exporter.yaml": exporter_template(),
        "templates/NOTES.txt": NOTES,
    }


GUIDE = "docs/guides/helm.md"  # the chart's README is also the documentation site's page on it


def guide() -> str:
    return readme().replace("# The shmguard chart", "# The Helm chart: charts/shmguard", 1)


def write(directory: str | os.PathLike, guide_path: str | os.PathLike | None = None) -> list[Path]:
    """Write the chart into directory (each file atomically), and its guide page when given; the paths written."""
    from shmguard.files import write_atomic

    out = []
    texts: list[tuple[Path, str]] = [(Path(directory) / rel, text) for rel, text in files().items()]
    if guide_path is not None:
        texts.append((Path(guide_path), guide()))
    for path, text in texts:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(path), text)
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    args = sys.argv[1:] if argv is None else argv
    repo = Path(__file__).resolve().parents[2]
    if args:
        paths = write(args[0])
    else:
        paths = write(repo / "charts" / "shmguard", repo / GUIDE)
    for path in paths:
        print(path)
    return 0
