"""charts/shmguard is what `python3 -m shmguard.chart` writes from the renderers' code (so one source remains), its
values table is complete and its schema refuses the contradictions; the tree's two readers agree on the parts
Python can judge alone (tests/integration/test_helm.py runs real Helm over the same chart)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from shmguard.chart import build, tree, values

CHART = Path(__file__).resolve().parents[3] / "charts" / "shmguard"


def test_the_committed_chart_is_what_the_code_writes():
    stale = [rel for rel, text in build.files().items()
             if not (CHART / rel).exists() or (CHART / rel).read_text() != text]
    assert not stale, f"charts/shmguard is stale in {stale}: run `python3 -m shmguard.chart`"
    written = {str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_file()}
    assert written == set(build.files()), "a file in charts/shmguard that the code does not write"


def used_values() -> set[str]:
    text = "".join((CHART / "templates" / name).read_text() for name in ("webhook.yaml", "exporter.yaml",
                                                                        "checks.yaml", "_helpers.tpl", "NOTES.txt"))
    return set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text))


def test_every_value_is_in_the_table_and_every_table_value_is_used():
    paths = {s.path for s in values.settings()}
    used = used_values()
    parents = {p.rsplit(".", 1)[0] for p in paths}
    assert used <= paths | parents, used - paths - parents
    assert paths <= used | {"image.repository", "image.tag"}, paths - used  # these two in shmguard.image
    assert 'printf "%s:%s" .Values.image.repository .Values.image.tag' in (CHART / "templates" / "_helpers.tpl").read_text()


def test_values_yaml_and_readme_hold_every_value():
    assert yaml.safe_load((CHART / "values.yaml").read_text()) == values.defaults()
    readme = (CHART / "README.md").read_text()
    for setting in values.settings():
        assert f"| `{setting.path}` |" in readme


def schema_errors(overrides: dict) -> list[str]:
    data = json.loads(json.dumps(values.defaults()))
    for path, value in overrides.items():
        *parents, leaf = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    validator = jsonschema.Draft7Validator(json.loads((CHART / "values.schema.json").read_text()))
    return [e.message for e in validator.iter_errors(data)]


def test_the_defaults_meet_the_schema():
    assert schema_errors({}) == []


@pytest.mark.parametrize("overrides", [
    {"webhook.certs.mode": "provided"},  # no CA: every call would fail TLS
    {"webhook.certs.mode": "provided", "webhook.certs.caBundle": "not a certificate"},
    {"exporter.kubeletRoot": ""},  # the exporter on with no node access
    {"exporter.kubeletRoot": "var/lib/kubelet"},
    {"webhook.failurePolicy": "ignore"},
    {"webhook.timeoutSeconds": 31},
    {"webhook.jobDefaults": {"workerz": 4}},
    {"webhook.jobDefaults": {"workers": [4]}},
    {"webhook.name": "Bad_Name"},
    {"exporter.interval": "5 seconds"},
    {"exporter.port": 0},
    {"exporter.serviceMonitor": {"enabled": True, "interval": "15s", "extra": 1}},
])
def test_the_schema_refuses(overrides):
    assert schema_errors(overrides)


@pytest.mark.parametrize("overrides", [
    {"exporter.enabled": False, "exporter.kubeletRoot": ""},  # off: its node access does not matter
    {"webhook.certs.mode": "cert-manager"},
    {"webhook.jobDefaults": {"workers": 4, "sample_shape": "3,224,224"}},
])
def test_the_schema_takes(overrides):
    assert schema_errors(overrides) == []


def test_the_tree_evaluates_when_and_pairs():
    flag = tree.Value("on")
    doc = {"a": tree.When(tree.Truthy(flag), 1), "b": [tree.When(tree.Not(tree.Truthy(flag)), "x"), "y",
                                                        tree.Pairs(tree.Value("m"), "--d")],
           "c": tree.Fmt("{0}-{1}", tree.Value("n"), 3), "d": tree.Choose(tree.Equals(tree.Value("n"), "k"), "p", "q")}
    assert tree.evaluate(doc, {"on": True, "m": {"z": 1, "a": "s"}, "n": "k"}) == {
        "a": 1, "b": ["y", "--d", "a=s", "--d", "z=1"], "c": "k-3", "d": "p"}
    assert tree.evaluate(doc, {"on": False, "m": {}, "n": "j"}) == {"b": ["x", "y"], "c": "j-3", "d": "q"}
    assert tree.documents([tree.When(tree.Truthy(flag), {"kind": "A"}), {"kind": "B"}], {"on": False}) == [
        {"kind": "B"}]


def test_the_helm_side_of_the_tree():
    flag = tree.Value("on", ".Values.on")
    assert tree.Fmt("{0}.{1}.svc", tree.Value("n"), tree.Value("ns", ".Release.Namespace")).expr() == \
        'printf "%[1]v.%[2]v.svc" (.Values.n) (.Release.Namespace)'
    text = tree.helm_template([tree.When(tree.Truthy(flag), {"kind": "A", "list": [tree.Pairs(tree.Value("m"), "-d")],
                                                             "alert": "{{ $labels.pod }}"})])
    assert text.splitlines() == ['{{- if .Values.on }}', '---', 'kind: "A"', 'list:',
                                 '  {{- range $key, $value := .Values.m }}', '  - "-d"',
                                 '  - {{ printf "%s=%v" $key $value | toJson }}', '  {{- end }}',
                                 'alert: {{ toJson "{{ $labels.pod }}" }}', '{{- end }}']


def test_the_guide_page_is_the_charts_readme():
    assert (CHART.parents[1] / build.GUIDE).read_text() == build.guide()
