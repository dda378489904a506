"""The Grafana dashboard of the exporter's metrics (pure data, Grafana's dashboard JSON model).

One row of time series per question: how full is each /dev/shm (and its peak against what
the job needs), how close are the shm pages and the rest to the memory limit, and a table
naming every container (image, compose project and service, pod). A `datasource` variable
picks the Prometheus; `namespace` and `name` variables narrow the panels.
"""

from __future__ import annotations

UID = "shmguard-exporter"
SELECTOR = '{namespace=~"$namespace", name=~"$name"}'


def query(expr: str, legend: str, ref: str) -> dict:
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr, "legendFormat": legend,
            "refId": ref}


def timeseries(panel_id: int, title: str, targets: list[dict], unit: str, grid: tuple[int, int, int, int],
               description: str) -> dict:
    x, y, w, h = grid
    return {
        "id": panel_id, "type": "timeseries", "title": title, "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": targets,
    }


def variable(name: str, label: str, expr: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": expr, "refId": name}, "definition": expr, "refresh": 2, "includeAll": True,
            "multi": True, "allValue": ".*", "current": {}, "sort": 1}


def queries() -> list[str]:
    """Every PromQL expression of the dashboard, with its variables set to match everything (the tests run them
    on a real Prometheus)."""
    out = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append(target["expr"].replace("$namespace", ".*").replace("$name", ".*"))
    return out


def dashboard() -> dict:
    who = "{{name}} {{pod}}"
    panels = [
        timeseries(1, "/dev/shm used (share of its size)",
                   [query(f"shmguard_shm_used_bytes{SELECTOR} / shmguard_shm_size_bytes{SELECTOR}", who, "A")],
                   "percentunit", (0, 0, 12, 8),
                   "Above 85% for a minute fires ShmguardShmNearlyFull: the next batches may not fit."),
        timeseries(2, "/dev/shm used, peak, size and what the job needs",
                   [query(f"shmguard_shm_used_bytes{SELECTOR}", f"used {who}", "A"),
                    query(f"shmguard_shm_peak_bytes{SELECTOR}", f"peak {who}", "B"),
                    query(f"shmguard_shm_size_bytes{SELECTOR}", f"size {who}", "C"),
                    query(f"shmguard_shm_required_bytes{SELECTOR}", f"job needs {who}", "D")],
                   "bytes", (12, 0, 12, 8),
                   "The peak is the highest use sampled since the exporter saw the container; 'job needs' comes "
                   "from its SHMGUARD_* variables, as `shmguard check` computes it."),
        timeseries(3, "Memory: use, shm pages and limit",
                   [query(f"shmguard_memory_usage_bytes{SELECTOR}", f"use {who}", "A"),
                    query(f"shmguard_memory_shmem_bytes{SELECTOR}", f"shm pages {who}", "B"),
                    query(f"shmguard_memory_limit_bytes{SELECTOR}", f"limit {who}", "C")],
                   "bytes", (0, 8, 12, 8),
                   "/dev/shm pages are charged to the memory limit: when use reaches it the container is "
                   "OOM-killed, which looks like a Bus error."),
        timeseries(4, "Memory use (share of the limit)",
                   [query(f"shmguard_memory_usage_bytes{SELECTOR} / shmguard_memory_limit_bytes{SELECTOR}", who, "A")],
                   "percentunit", (12, 8, 12, 8),
                   "Above 90% with shm pages over a quarter of the limit fires ShmguardShmNearMemoryLimit."),
        {
            "id": 5, "type": "table", "title": "Containers", "gridPos": {"x": 0, "y": 16, "w": 24, "h": 8},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "description": "Every /dev/shm the exporter reports, with its names.",
            "targets": [dict(query(f"shmguard_container_info{SELECTOR}", "", "A"), format="table", instant=True)],
            "transformations": [{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True,
                                                                                 "__name__": True}}}],
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {"showHeader": True},
        },
    ]
    return {
        "uid": UID,
        "title": "shmguard: /dev/shm and memory per container",
        "tags": ["shmguard", "shm"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus", "current": {},
             "hide": 0},
            variable("namespace", "Namespace", "label_values(shmguard_container_info, namespace)"),
            variable("name", "Container", 'label_values(shmguard_container_info{namespace=~"$namespace"}, name)'),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }
