"""Fuzzed command options (#18): any value of any job option is a one-line answer with a meaningful exit code.

`check` (argparse, standard library) and `health` (its own parser) take options and
SHMGUARD_* variables from anyone; neither may answer with a traceback or exit 70.
Seeded and bounded, like the other property tests.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmguard import main
from shmguard.declared import container_job
from shmguard.errors import UsageError
from shmguard.job import ENV_VARS
from shmguard.manifests.annotations import KEYS
from tests.support import needs

SETTINGS = settings(max_examples=150, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["nan", "inf", "-1", "0", "1e308t", "9" * 400, "3,224,224", "1k", "2g", ",", "x", "", " "]),
    st.integers(min_value=-10, max_value=10**30).map(str),
)
FLAGS = ["--workers", "--batch-size", "--sample-shape", "--dtype", "--sample-bytes", "--prefetch-factor",
         "--procs-per-node", "--gpus", "--sharing-strategy"]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(FLAGS), values), max_size=6))
def test_check_options_never_crash(capsys, options):
    argv = ["check", "--root", "/nonexistent-root"]
    for flag, value in options:
        argv += [f"{flag}={value}"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err


@SETTINGS
@given(st.dictionaries(st.sampled_from(sorted(ENV_VARS.values())), values, max_size=6))
def test_health_job_variables_never_crash(monkeypatch, capsys, env):
    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        if "\x00" not in value:
            monkeypatch.setenv(var, value)
    code = main(["health", "--root", "/nonexistent-root"])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2) and "Traceback" not in err, (env, code, err)


@SETTINGS
@given(st.dictionaries(st.sampled_from(sorted(KEYS.values())), values, max_size=6))
def test_annotations_give_a_job_none_or_a_usage_error(annotations):
    try:
        job = container_job({}, (annotations,)).job
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert job is None or job.batch_size >= 1


RUN_FLAGS = ["--cpus", "--memory", "--shm-size", "--engine-wait", "--gpus", "-e", "-v", "--mount", "--device",
             "--user", "--network", "--label", "--pull", "--entrypoint", "-w"]
RENDER_FLAGS = ["--cpus", "--memory", "--name", "--namespace", "--replicas", "--image", "-e"]
PATCH_FLAGS = ["--kind", "--name", "-l", "-n", "--container", "--memory"]
EXPLAIN_FLAGS = ["--shm-size", "--memory-limit", "--exit-code", "--tail", "--platform"]
JOB = ["--workers", "1", "--batch-size", "1", "--sample-bytes", "1k"]


def one_line_or_done(capsys, argv, codes):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in codes, (argv, code, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if code == 2:
        assert len([line for line in err.strip().splitlines() if line.startswith(("shmguard", "Error", "Usage",
                                                                                   "Try"))]) >= 1, err


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(RUN_FLAGS), values), max_size=4))
def test_run_dry_run_options_never_crash(capsys, monkeypatch, options):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # a dry run needs no engine
    argv = ["run", "--dry-run", *JOB]
    for flag, value in options:
        argv += [flag, value]
    one_line_or_done(capsys, [*argv, "img:1", "--", "true"], (0, 2, 125))  # 125: a plan that cannot work


@SETTINGS
@given(st.sampled_from(["k8s", "compose"]), st.lists(st.tuples(st.sampled_from(RENDER_FLAGS), values), max_size=4))
def test_render_options_never_crash(capsys, target, options):
    argv = ["render", target, *JOB, "--image", "demo:1"]
    for flag, value in options:
        if target == "compose" and flag in ("--namespace", "--replicas"):
            continue
        argv += [flag, value]
    one_line_or_done(capsys, argv, (0, 2))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(PATCH_FLAGS), values), max_size=4))
def test_patch_options_never_crash(capsys, monkeypatch, tmp_path_factory, options):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
                                                 "spec: {containers: [{name: c, image: x}]}\n"))
    argv = ["patch", *JOB, "--check"]
    for flag, value in options:
        argv += [flag, value]
    one_line_or_done(capsys, argv, (0, 1, 2))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(EXPLAIN_FLAGS), values), max_size=4))
def test_explain_log_options_never_crash(capsys, monkeypatch, options):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("RuntimeError: unable to allocate shared memory(shm) for file "
                                                 "</torch_1_2_3>: No space left on device (28)\n"))
    argv = ["explain", *JOB]
    for flag, value in options:
        argv += [flag, value]
    one_line_or_done(capsys, argv, (0, 1, 2))


FN_KEYS = ["workers", "batch-size", "sample-shape", "sample-bytes", "prefetch-factor", "kind", "name", "selector",
           "namespace", "opt-in", "container", "memory", "size-unsized", "include-init", "unknown"]


@SETTINGS
@given(st.dictionaries(st.sampled_from(FN_KEYS), values, max_size=6))
def test_fn_function_config_never_crashes(capsys, monkeypatch, config):
    """`shmguard fn`'s options are its functionConfig's data."""
    import io

    import yaml

    resource_list = {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
                     "functionConfig": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"},
                                        "data": config},
                     "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                "spec": {"containers": [{"name": "c", "image": "x"}]}}]}
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(resource_list)))
    one_line_or_done(capsys, ["fn"], (0, 1, 2))


MEASURE_FLAGS = ["--batch-size", "--samples", "--seed", "--sharing-strategy"]
TUNE_FLAGS = ["--batch-size", "--workers", "--prefetch-factors", "--batches"]


@pytest.mark.needs_torch
@settings(max_examples=40, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["measure", "tune"]), st.lists(st.tuples(st.sampled_from(MEASURE_FLAGS + TUNE_FLAGS), values),
                                                       min_size=1, max_size=3))
def test_measure_and_tune_options_never_crash(capsys, command, options):
    """Bad values are refused before the dataset is loaded; good ones run a tiny dataset."""

    needs.module("torch")
    allowed = MEASURE_FLAGS if command == "measure" else TUNE_FLAGS
    argv = [command, "--dataset", "tests.support.datasets:fixed", "--batch-size", "2"]
    if command == "tune":
        argv += ["--workers", "0", "--batches", "1"]
    for flag, value in options:
        if flag in allowed:
            argv += [flag, value]
    if command == "tune" and any(f == "--workers" for f, _ in options):
        return  # a real sweep of workers is the integration tests' to run
    one_line_or_done(capsys, argv, (0, 1, 2))
