"""The exposition: prometheus_client's text format of the last pass, bounded by what runs now; peaks; --json."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from shmguard.exporter.metrics import Reading, Row, Sample, Target, as_json, exposition, with_peaks
from shmguard.exporter.server import Exporter
from tests.support.exporter import Replay, reference_text


def row(key: str, used: int | None = 10, memory: tuple = (None, None, None), errors: tuple = (), **more) -> Row:
    limit, usage, shmem = memory
    return Row(Target(key=key, id=key[:12], name=f"c-{key}", **more),
               Reading(shm_size=100, shm_used=used, memory_limit=limit, memory_usage=usage, memory_shmem=shmem,
                       errors=errors))


def parsed(exporter: Exporter) -> dict:
    """{metric name: {(label items): value}} of the exposition as Prometheus parses it."""
    out: dict = {}
    for family in text_string_to_metric_families(exporter.exposition().decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_peaks_are_kept_by_key_and_forgotten_with_the_target():
    first, peaks = with_peaks([row("a", 50), row("b", 5)], {})
    assert [r.peak for r in first] == [50, 5]
    second, peaks = with_peaks([row("a", 20), row("b", 9)], peaks)
    assert [r.peak for r in second] == [50, 9]
    third, peaks = with_peaks([row("b", None)], peaks)  # a is gone; b not readable this pass
    assert [r.peak for r in third] == [9] and peaks == {"b": 9}


def test_the_exposition_follows_the_last_pass_only():
    running = Sample(rows=(row("a" * 64, 40, memory=(1000, 500, 40), image="img:1", compose_project="p",
                               shm_required=80),
                           row("b" * 64, 10)), source_up=True, taken_at=1.0)
    exporter = Exporter(Replay(running, Sample(rows=(row("b" * 64, 12),), source_up=False, taken_at=2.0)), 1.0)
    exporter.step()
    metrics = parsed(exporter)
    a = (("container", ""), ("id", "a" * 12), ("name", "c-" + "a" * 64), ("namespace", ""), ("pod", ""))
    assert metrics["shmguard_shm_used_bytes"][a] == 40
    assert metrics["shmguard_shm_required_bytes"] == {a: 80}  # b declares no job: no series, not a 0
    assert metrics["shmguard_memory_shmem_bytes"] == {a: 40}
    info = next(iter(k for k in metrics["shmguard_container_info"] if ("id", "a" * 12) in k))
    assert ("image", "img:1") in info and ("compose_project", "p") in info
    assert metrics["shmguard_engine_up"][()] == 1
    exporter.step()
    metrics = parsed(exporter)
    assert all(("id", "a" * 12) not in labels for family in metrics.values() for labels in family)
    assert len(metrics["shmguard_container_info"]) == 1 and metrics["shmguard_engine_up"][()] == 0
    assert metrics["shmguard_exporter_targets"][()] == 1


def test_label_values_are_escaped_as_the_format_wants():
    odd = Sample(rows=(Row(Target(key="k", id="k", name='we"ird\\name\n'), Reading(shm_size=1, shm_used=1)),),
                 taken_at=1.0)
    exporter = Exporter(Replay(odd), 1.0)
    exporter.step()
    assert any(('name', 'we"ird\\name\n') in labels for labels in parsed(exporter)["shmguard_shm_size_bytes"])


def test_json_names_every_field():
    data = as_json(Sample(rows=(row("a", 3, errors=("x",)),), source_up=True, taken_at=5.0, duration=0.01))
    assert data["targets"][0]["shm_used"] == 3 and data["targets"][0]["errors"] == ["x"]
    assert data["source_up"] is True and data["mode"] == "engine"


def as_parsed(text: str) -> list:
    return [(family.name, family.documentation, family.type,
             sorted((s.name, tuple(sorted(s.labels.items())), float(s.value)) for s in family.samples))
            for family in text_string_to_metric_families(text)]


def test_the_text_is_what_prometheus_client_would_write():
    # Hostile names (quotes, backslashes, newlines, non-ASCII), a value of 0, sizes past 2**53, unknowns left out.
    rows = (row("a" * 64, 0, memory=(2**62 + 1, 7, 0), image='reg/"img"\\:1\n', compose_project="pröject",
                shm_required=2**53 + 1, namespace="ns", pod="p-0", container="trainer"),
            row("b" * 64, None, memory=(None, 5, None)),
            Row(Target(key="c", id="c", name="c", shm_size_limit=64 << 20, shm_unbounded=True), Reading(), 3))
    for mode, up in (("engine", True), ("kubelet", False)):
        sample = Sample(rows=rows, mode=mode, source_up=up, taken_at=1764000000.123456, duration=0.0071)
        ours = exposition(sample).decode()
        assert as_parsed(ours) == as_parsed(reference_text(sample))
        required = next(line for line in ours.splitlines() if line.startswith("shmguard_shm_required_bytes{"))
        assert required.startswith('shmguard_shm_required_bytes{container="trainer",id="aaaaaaaaaaaa",')
        assert required.endswith(f"}} {2**53 + 1}")  # bytes as digits, exact
    empty = Sample(rows=(), source_up=False)
    assert as_parsed(exposition(empty).decode()) == as_parsed(reference_text(empty))


def test_each_metric_row_carries_its_json_field_and_the_schema_has_each():
    """Issue 39.2: a metric row names its `--once --json` field; the fields and the schema come from the rows."""
    import json

    from shmguard.exporter.metrics import INFO_LABELS, JSON_FIELDS, METRICS
    from tests.support.paths import CHECKOUT

    target = Target(key="k", id="i", name="n", shm_required=11, shm_size_limit=12, shm_unbounded=True)
    reading = Reading(shm_size=21, shm_used=22, memory_limit=23, memory_usage=24, memory_shmem=25)
    flat = as_json(Sample(rows=(Row(target, reading, 31),)))["targets"][0]
    assert len({metric.json for metric in METRICS}) == len(METRICS)
    for metric in METRICS:
        assert flat[metric.json] == metric.value(Row(target, reading, 31)) is not None, metric.name
    schema = json.loads((CHECKOUT / "shmguard" / "schemas" / "exporter.json").read_text())
    item = schema["properties"]["targets"]["items"]
    assert tuple(item["required"]) == tuple(item["properties"]) == JSON_FIELDS == tuple(flat)
    assert JSON_FIELDS == (*INFO_LABELS, *(metric.json for metric in METRICS), "errors")
