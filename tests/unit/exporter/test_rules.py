"""The exporter's alerts: `promtool test rules` (Prometheus's own rule engine) on every alert, `promtool check rules`
on the full rules file, and each alert's runbook names a fix."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from shmguard.exporter import rules
from tests.support.paths import DATA

TESTS = DATA / "exporter" / "alerts.test.yaml"


def summaries_only(rule_file: dict) -> dict:
    return {"groups": [dict(group, rules=[dict(rule, annotations={"summary": rule["annotations"]["summary"]})
                                          for rule in group["rules"]]) for group in rule_file["groups"]]}


def test_every_alert_is_unit_tested_by_promtool(promtool, tmp_path):
    shutil.copy(TESTS, tmp_path / "alerts.test.yaml")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(summaries_only(rules.rule_file()), sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", "alerts.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {test["alertname"] for case in yaml.safe_load(TESTS.read_text())["tests"]
              for test in case["alert_rule_test"] if test["exp_alerts"]}
    assert tested == {rule["alert"] for rule in rules.alerts()}


def test_the_full_rules_file_passes_promtool_check(promtool, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules.rule_file(), sort_keys=False))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules.alerts())} rules found" in result.stdout


def test_the_alerts_of_the_issue_each_with_a_runbook_that_names_a_fix():
    by_name = {rule["alert"]: rule for rule in rules.alerts()}
    assert set(by_name) == {"ShmguardShmNearlyFull", "ShmguardShmBelowJob", "ShmguardShmUnbounded",
                            "ShmguardShmNearMemoryLimit"}
    assert by_name["ShmguardShmNearlyFull"]["for"] == "1m" and "0.85" in by_name["ShmguardShmNearlyFull"]["expr"]
    fixes = {"ShmguardShmNearlyFull": "--shm-size", "ShmguardShmBelowJob": "shmguard run",
             "ShmguardShmUnbounded": "sizeLimit", "ShmguardShmNearMemoryLimit": "memory limit"}
    for name, rule in by_name.items():
        assert fixes[name] in rule["annotations"]["runbook"], name
        assert rule["labels"]["severity"] in ("warning", "critical")


def test_each_alert_links_its_runbook_section(capsys):
    """Issue 38: a link from each alert to its runbook section; the section is a heading of docs/runbooks.md, whose
    anchor (the documentation site's) is the alert's name in lower case."""
    from pathlib import Path

    from shmguard.cli import main

    page = (Path(__file__).resolve().parents[3] / "docs" / "runbooks.md").read_text()
    headings = {line[3:].strip().lower() for line in page.splitlines() if line.startswith("## ")}
    for rule in rules.alerts():
        page_path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page_path == "docs/runbooks.md" and anchor == rule["alert"].lower() and anchor in headings
    assert main(["exporter", "render", "rules", "--runbook-base", "https://docs.example/shmguard/runbooks/"]) == 0
    out = capsys.readouterr().out
    assert "runbook_url: https://docs.example/shmguard/runbooks/#shmguardshmbelowjob" in out
