"""Fuzzed command options (#18): any value of any job option is a one-line answer with a meaningful exit code.

`check` (argparse, standard library) and `health` (its own parser) take options and
SHMGUARD_* variables from anyone; neither may answer with a traceback or exit 70.
Seeded and bounded, like the other property tests.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmguard import main
from shmguard.errors import UsageError
from shmguard.job import ENV_VARS
from shmguard.manifests.annotations import KEYS, resolve_job

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
        job = resolve_job({}, None, annotations)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert job is None or job.batch_size >= 1
