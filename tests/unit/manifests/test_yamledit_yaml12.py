"""#33.12: what shmguard writes reads the same to YAML 1.2 readers (kubectl's kustomize, kyaml) as to PyYAML's 1.1.

PyYAML resolves `1e-4`, `1E+3` and `0o17` as strings and so writes them plain; YAML 1.2 (and kubectl's go-yaml) read
them as numbers, so `--lr 1e-4` became `0.0001`, which kubectl then refused as an argument. Every string that some
reader on the way would take for something else is quoted, in render, patch (new values and re-dumped documents) and fn.
"""

from __future__ import annotations

import pytest
import yaml

from shmguard.commands import fn as krm
from shmguard.job import make_job
from shmguard.manifests import render, yamlio
from shmguard.manifests.podspec import patch_documents
from shmguard.manifests.yamledit import patch_text, render_scalar

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
TRICKY = ["1e-4", "1E+3", "0o17", "0x1F", "0b101", "1_000", "y", "N", "on", "~", "null", ".5", "-.inf", ".NaN", "12"]


def plain_scalars(text: str) -> set[str]:
    """The scalars written without quotes (their text)."""
    return {e.value for e in yaml.parse(text) if isinstance(e, yaml.ScalarEvent) and e.style is None}


@pytest.mark.parametrize("value", TRICKY)
def test_a_string_another_reader_takes_for_a_number_is_quoted(value):
    assert yamlio.ambiguous(value)
    assert value not in plain_scalars(yamlio.dump([{"args": [value]}]))
    assert render_scalar(value)[0] in "'\""
    assert yaml.safe_load(yamlio.dump([{"args": [value]}])) == {"args": [value]}


@pytest.mark.parametrize("value", ["train.py", "--lr", "368Mi", "v1", "1e3x", "e10", "Memory", "/dev/shm", "nvidia.com/gpu"])
def test_ordinary_strings_stay_plain(value):
    assert not yamlio.ambiguous(value) and value in plain_scalars(yamlio.dump([{"a": value}]))


def test_render_keeps_the_commands_numbers_strings():
    doc = render.render_k8s(JOB, kind="job", image="train:1", name="train",
                            command=["python", "train.py", "--lr", "1e-4", "--scale", "1E+3", "--mode", "0o17"])
    text = yamlio.dump([doc])
    assert not {"1e-4", "1E+3", "0o17"} & plain_scalars(text)
    assert "- '1e-4'\n" in text


def test_fn_keeps_an_untouched_configmaps_strings():
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"lr": "1e3", "mode": "0o17"}}
    out, code = krm.run({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [config]})
    text = yamlio.dump([out])
    assert code == 0 and not {"1e3", "0o17"} & plain_scalars(text)


def test_patch_keeps_them_quoted_in_a_document_it_re_writes_whole():
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: train}\nspec:\n  initContainers:\n  - name: init\n    image: x\n"
            "    volumeMounts: &m []\n  containers:\n  - name: train\n    image: x\n    args: [--lr, '1e-4', '0o17']\n"
            "    volumeMounts: *m\n")
    result = patch_text(text, "x", lambda docs: list(patch_documents(docs, JOB).changes))
    assert result.fallbacks and not {"1e-4", "0o17"} & plain_scalars(result.text)
