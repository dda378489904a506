"""Job options and SHMGUARD_* variables: validated once, errors name the option."""

from __future__ import annotations

import pytest

from shmguard.errors import UsageError
from shmguard.job import ENV_VARS, job_from_env, make_job
from tests.support import needs
from tests.support.paths import CHECKOUT


def test_shape_and_dtype_give_sample_bytes():
    job = make_job(workers="4", batch_size="64", sample_shape="3,224,224")
    assert job.sample_bytes == 3 * 224 * 224 * 4
    assert job.batch_bytes == 64 * 602112
    assert job.prefetch_factor == 2 and job.procs_per_node == 1 and job.gpus == 0
    assert make_job(workers=1, batch_size=1, sample_shape="3x224x224", dtype="uint8").sample_bytes == 150528
    assert make_job(workers=1, batch_size=1, sample_shape="10", dtype="torch.float16").sample_bytes == 20


def test_sample_bytes_takes_sizes():
    assert make_job(workers=2, batch_size=8, sample_bytes="588KiB").sample_bytes == 588 * 1024


@pytest.mark.parametrize("kwargs, message", [
    ({"workers": "-1", "batch_size": "1", "sample_bytes": "1"}, "--workers must be at least 0"),
    ({"workers": "two", "batch_size": "1", "sample_bytes": "1"}, "--workers must be a whole number"),
    ({"workers": "1", "batch_size": "0", "sample_bytes": "1"}, "--batch-size must be at least 1"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3,x,224"}, "--sample-shape"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3,0,224"}, "--sample-shape"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "lots"}, "--sample-bytes"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "0"}, "--sample-bytes"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3", "dtype": "float33"}, "--dtype"),
    ({"workers": "1", "batch_size": "1"}, "sample size"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3", "sample_bytes": "4"}, "not both"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "prefetch_factor": "0"}, "--prefetch-factor"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "procs_per_node": "0"}, "--procs-per-node"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "sharing_strategy": "shm"}, "--sharing-strategy"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "pin_memory": "maybe"}, "--pin-memory"),
    ({"batch_size": "1", "sample_bytes": "4"}, "--workers"),
])
def test_bad_values_name_the_option(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("-", r"\-")):
        make_job(**kwargs)


def test_env_round_trip():
    job = make_job(workers=3, batch_size=16, sample_shape="3,32,32", prefetch_factor=4, procs_per_node=2,
                   gpus=1, pin_memory=True, sharing_strategy="file_system")
    assert job_from_env(job.to_env()) == job


def test_env_without_a_job_is_none():
    assert job_from_env({}) is None
    assert job_from_env({"SHMGUARD_WORKERS": ""}) is None


def test_env_with_bad_values_is_a_usage_error():
    with pytest.raises(UsageError):
        job_from_env({"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "big"})


# --- one Job record from the options on (issue 26.1) ---

@pytest.mark.parametrize("values", [
    dict(workers=4, batch_size=64, sample_shape="3,224,224"),
    dict(workers=2, batch_size=8, sample_bytes="1k", prefetch_factor=4, procs_per_node=2, gpus=2, pin_memory=True,
         sharing_strategy="file_system", nccl_transport="p2p"),
    dict(workers=3, batch_size=16, sample_bytes="12k", collate="list", tensors_per_sample=3),
    dict(workers=1, batch_size=2, sample_bytes="100", batch_segments="4096x3,100"),
    dict(workers=0, batch_size=1, sample_shape="10", dtype="uint8"),
    dict(workers=2, batch_size=4, sample_bytes="1k", gpus=8, nccl_version="2.21.5"),
])
def test_a_job_goes_back_to_its_values_and_comes_back_the_same(values):
    job = make_job(**values)
    assert make_job(**job.to_values()) == job
    assert job.to_env() == {ENV_VARS[name]: value for name, value in job.to_values().items()}


def test_job_options_hold_every_job_option():
    from shmguard.options import JOB_KEYS, JobOptions

    assert set(JobOptions.__annotations__) == {*JOB_KEYS, "dataset", "collate_fn"}


def test_job_options_are_never_rewritten_only_replaced():
    from shmguard.options import JobOptions

    given = {"workers": "4", "batch_size": "8", "sample_bytes": "1k", "image": "kept"}
    options = JobOptions.take(given)
    assert given == {"image": "kept"}  # the job's values are taken out, the command's own stay
    job, notes = options.job(["torchrun", "--nproc_per_node=2", "train.py"], {})
    assert options.procs_per_node is None
    assert job.procs_per_node == 2 and notes == [
        "shmguard: 2 processes per node (from --nproc_per_node=2 in the command)"]


@pytest.mark.needs_torch
def test_patch_and_render_with_dataset_size_the_same_job(tmp_path, capsys, monkeypatch):
    """Issue 27.7: `patch --dataset` carried only part of the measured job (not its segments, collate, tensors
    per sample or NCCL transport), so it sized another job than `render --dataset`."""
    needs.module("torch")
    import yaml

    from shmguard import main

    monkeypatch.chdir(CHECKOUT)
    job = ["--dataset", "tests.support.datasets:detection", "--collate-fn", "tests.support.datasets:zip_collate",
           "--batch-size", "4", "--workers", "2",
           "--collate", "list", "--tensors-per-sample", "2", "--nccl-transport", "p2p", "--gpus", "2"]
    assert main(["render", "k8s", *job, "--image", "x", "--kind", "pod"]) == 0
    rendered = yaml.safe_load(capsys.readouterr().out)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: train\nspec:\n  containers:\n"
                        "  - name: train\n    image: x\n    resources:\n      limits:\n"
                        "        nvidia.com/gpu: 2\n        memory: 1Mi\n")
    assert main(["patch", *job, str(manifest)]) == 0
    patched = yaml.safe_load(capsys.readouterr().out)

    def sizes(pod):
        (shm,) = [v for v in pod["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
        return shm["emptyDir"]["sizeLimit"], pod["spec"]["containers"][0]["resources"]["limits"]["memory"]

    assert sizes(patched) == sizes(rendered)


# --- the option table (issue 39.2): every place an option shows up is made from, or tested against, its row ---

def test_every_option_row_names_its_flag_variable_annotation_and_setting_from_its_name():
    from shmguard.job import FLAG, NAMES, OPTIONS, VALUE

    assert len(set(NAMES)) == len(NAMES)
    for option in OPTIONS:
        assert option.kind in (VALUE, FLAG)
        dashed = option.name.replace("_", "-")
        assert (option.flag, option.env, option.annotation, option.setting) == (
            f"--{dashed}", f"SHMGUARD_{option.name.upper()}", f"shmguard.io/{dashed}", dashed)


def test_the_job_record_make_job_and_job_options_have_one_field_per_row():
    import inspect

    from shmguard.job import NAMES, Job
    from shmguard.options import JobOptions

    assert set(inspect.signature(make_job).parameters) == {*NAMES, "nccl_env"}
    assert set(NAMES) <= set(Job.__annotations__)
    assert set(JobOptions.__annotations__) == {*NAMES, "dataset", "collate_fn"}
    # Every option the model reads goes back to text (Job.to_values, what run and render hand the container).
    job = make_job(workers=2, batch_size=3, sample_shape="2,2", dtype="uint8", prefetch_factor=3, procs_per_node=2,
                   gpus=2, sharing_strategy="file_system", collate="list", tensors_per_sample=2,
                   batch_segments="4096x3", nccl_transport="p2p", nccl_version="2.21.5", pin_memory=True)
    assert set(job.to_values()) == set(NAMES) - {"sample_bytes"}  # the shape form stands for the sample


@pytest.mark.parametrize("argv, expected", [([], None), (["--pin-memory"], "1"), (["--no-pin-memory"], "0")])
def test_a_flag_row_is_declared_the_same_to_click_and_to_argparse(argv, expected):
    """pin-memory was declared by hand in both parsers; now every row, a flag too, declares itself."""
    import click
    from click.testing import CliRunner

    from shmguard.corecli import check_parser
    from shmguard.job import OPTIONS

    seen = {}

    @click.command()
    def command(**values):
        seen.update(values)

    for option in reversed(OPTIONS):
        declarations, settings = option.click_declaration()
        command = click.option(*declarations, **settings)(command)
    assert CliRunner().invoke(command, argv, env={}).exit_code == 0
    clicked = {True: "1", False: "0", None: None}[seen["pin_memory"]]
    parsed = vars(check_parser().parse_args(argv))
    assert clicked == parsed["pin_memory"] == expected
    values = ["--workers", "4", "--batch-size", "8"]
    CliRunner().invoke(command, values, env={})
    assert (seen["workers"], seen["batch_size"]) == tuple(vars(check_parser().parse_args(values))[k]
                                                          for k in ("workers", "batch_size")) == ("4", "8")


def test_the_api_reads_each_rows_dataloader_attribute_into_the_option_of_its_name(monkeypatch):
    """A row's `api` is the DataLoader attribute the Python API reads the option from (api.loader.settings_of)."""
    from shmguard.api import loader
    from shmguard.job import OPTIONS

    monkeypatch.setattr(loader, "_sharing_strategy", lambda: "file_system")
    attributes = {"dataset": [], "batch_sampler": None, "num_workers": 3, "batch_size": 7, "prefetch_factor": 5,
                  "pin_memory": True}
    fake = type("Loader", (), attributes)()
    settings = loader.settings_of(fake)
    read = [option for option in OPTIONS if option.api]
    assert {option.name for option in read} <= set(loader.Settings.__annotations__)
    for option in read:
        assert getattr(settings, option.name) == attributes[option.api], option.name
