"""The exposition: prometheus_client's text format of the last pass, bounded by what runs now; peaks; --json."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from shmguard.exporter.metrics import Reading, Row, Sample, Target, as_json, with_peaks
from shmguard.exporter.server import Exporter


def row(key: str, used: int | None = 10, memory: tuple = (None, None, None), errors: tuple = (), **more) -> Row:
    limit, usage, shmem = memory
    return Row(Target(key=key, id=key[:12], name=f"c-{key}", **more),
               Reading(shm_size=100, shm_used=used, memory_limit=limit, memory_usage=usage, memory_shmem=shmem,
                       errors=errors))


class Replay:
    """A source that answers with the samples given, one per pass."""

    mode = "engine"

    def __init__(self, *samples: Sample) -> None:
        self.samples = list(samples)

    def sample(self) -> Sample:
        return self.samples.pop(0)

    def close(self) -> None:
        pass


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
