"""Every `--json` output validates against its shipped JSON Schema (draft 2020-12) and carries schema_version."""

from __future__ import annotations

import json

import jsonschema
import pytest

from shmguard import main, schemas
from shmguard.commands.tune import Step, TuneResult, as_json, recommend
from shmguard.jsonout import SCHEMA_VERSION, stamp
from shmguard.measuring import Measurement
from tests.support import needs
from tests.support.paths import CHECKOUT, DATA

ROOT = str(CHECKOUT)
JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]


def validate(name: str, data: dict) -> None:
    jsonschema.Draft202012Validator(schemas.load(name)).validate(data)
    assert data["schema_version"] == SCHEMA_VERSION


def cli_json(capsys, args, stream="out"):
    code = main(args)
    captured = capsys.readouterr()
    return code, json.loads(getattr(captured, stream))


@pytest.mark.parametrize("name", schemas.NAMES)
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    schema = schemas.load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_an_unknown_schema_is_refused():
    with pytest.raises(ValueError):
        schemas.load("health")


def test_check(capsys, monkeypatch):
    for var in ("SHMGUARD_WORKERS", "SHMGUARD_BATCH_SIZE", "SHMGUARD_SAMPLE_SHAPE"):
        monkeypatch.delenv(var, raising=False)
    code, data = cli_json(capsys, ["check", "--json", *JOB, "--root", str(DATA / "docker-v1")])
    validate("check", data)
    assert data["verdict"] in ("PASS", "WARN", "FAIL")


def test_run_dry_run(capsys):
    code, data = cli_json(capsys, ["run", "--dry-run", "--json", *JOB, "--memory", "2g", "-e", "HF_TOKEN=x",
                                   "demo:latest", "--", "python", "train.py"])
    assert code == 0
    validate("run", data)
    assert data["plan"]["environment"]["HF_TOKEN"] == "***"


def test_run_result_with_a_diagnosis():
    from shmguard.engine.plan import RunOptions, make_plan, post_mortem
    from shmguard.job import make_job

    plan = make_plan(make_job(workers=4, batch_size=64, sample_shape="3,224,224"),
                     RunOptions(image="demo", shm_size=64 * 2**20))
    found = post_mortem(1, "RuntimeError: unable to allocate shared memory(shm) for file </torch_1>: "
                           "No space left on device (28)", False, plan, shm_peak=60 * 2**20)
    # The object run prints (shmguard/engine/run.py), built the same way; the real one: tests/integration/test_explain.py.
    data = stamp({"exit_code": 1, "container": "c", "container_id": "abc", "shm_size_bytes": plan.shm_bytes,
                  "required_shm_bytes": plan.required_shm, "peak_shm_bytes": 60 * 2**20,
                  "diagnosis": found.as_dict(), "interrupted": False, "removed": True, "engine_note": None})
    validate("run", data)
    with pytest.raises(jsonschema.ValidationError):
        validate("run", {**data, "diagnosis": "a string, as before schema 1"})


@pytest.mark.needs_torch
def test_measure(capsys, monkeypatch):
    needs.module("torch")
    monkeypatch.chdir(ROOT)
    code, data = cli_json(capsys, ["measure", "--json", "--dataset", "tests.support.datasets:fixed",
                                   "--batch-size", "4", "--samples", "4"])
    validate("measure", data)


@pytest.mark.needs_torch
def test_tune(capsys, monkeypatch):
    needs.module("torch")
    monkeypatch.chdir(ROOT)
    code, data = cli_json(capsys, ["tune", "--json", "--dataset", "tests.support.datasets:fixed",
                                   "--batch-size", "4", "--workers", "0", "--batches", "2"])
    validate("tune", data)
    assert data["recommended"]["workers"] == 0


def test_tune_with_skipped_steps_and_no_recommendation():
    steps = [Step(0, 2, 0, None, skipped="would not fit in /dev/shm")]
    result = TuneResult(Measurement("m:f", 16, 32, 2, 1000, 1000), tuple(steps), recommend(steps))
    validate("tune", stamp(as_json(result)))


@pytest.mark.parametrize("fixture", ["pods/oom-unbounded-shm.yaml", "pods/enospc-default-shm.yaml",
                                     "checkpoint-disk-full/logs.txt", "public/nccl-1589-attach.log"])
def test_explain(capsys, monkeypatch, fixture):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO((DATA / "explain" / fixture).read_text()))
    code, data = cli_json(capsys, ["explain", "--json"])
    validate("explain", data)
    assert code == (1 if data["blames_shared_memory"] else 0)


def test_patch(capsys, tmp_path):
    """The real `patch --json` summary (on stderr): a file with a template to size and one that cannot be read."""
    good = tmp_path / "job.yaml"
    good.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec:\n  template:\n    spec:\n"
                    "      containers: [{name: t, image: x, resources: {limits: {memory: 1Gi}}}]\n---\n"
                    "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n")
    bad = tmp_path / "broken.yaml"
    bad.write_text("a: [\n")
    args = ["patch", "--workers", "1", "--batch-size", "1", "--sample-bytes", "1k", "--json", "--check"]
    assert main([*args, str(good)]) == 1
    data = json.loads(capsys.readouterr().err)
    validate("patch", data)
    assert data["changes"] > 0 and data["files"][0]["templates"][0]["status"] == "changed"
    assert main([*args, str(good), str(bad)]) == 2
    data = json.loads(capsys.readouterr().err)  # with --json, stderr is exactly the one object
    validate("patch", data)
    assert data["errors"] and data["files"][1]["error"]
    data["files"][0]["templates"][0]["status"] = "patched"
    with pytest.raises(jsonschema.ValidationError):
        validate("patch", data)


def test_the_verdicts_the_schemas_list_are_the_diagnosiss():
    """The explain and run schemas list every verdict a diagnosis gives, and no other (diagnosis.VERDICTS)."""
    from shmguard.diagnosis import VERDICTS

    for name in ("explain", "run"):
        enums = [e for e in _enums(schemas.load(name)) if "no-failure" in e]
        assert enums and all(sorted(e) == sorted(VERDICTS) for e in enums), (name, enums)


def _enums(node):
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list):
            yield node["enum"]
        for value in node.values():
            yield from _enums(value)
    elif isinstance(node, list):
        for value in node:
            yield from _enums(value)
