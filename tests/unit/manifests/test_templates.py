"""The finder's rules on small inputs: group and kind, the general rule for unknown kinds, names, Pods made by
operators (what the webhook sees), and bad input."""

from __future__ import annotations

import pytest

from shmguard.manifests import podspec
from shmguard.manifests.templates import ManifestError, find_templates, group_of, is_pod_spec


def containers():
    return [{"name": "c", "image": "x"}]  # fresh each time: patching changes them in place

DEFAULTS = {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"}
ALL = podspec.PatchOptions(all_templates=True)  # about finding and sizing, not which templates are training ones


def names(doc):
    return [(t.name, t.path) for t in find_templates(0, doc)]


def test_group_of():
    assert group_of({"apiVersion": "v1"}) == ""
    assert group_of({"apiVersion": "batch.volcano.sh/v1alpha1"}) == "batch.volcano.sh"
    assert group_of({"kind": "Pod"}) is None and group_of({"apiVersion": " "}) is None


def test_group_and_kind_both_decide():
    batch = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": containers()}}}}
    assert names(batch) == [("Job/j", "spec.template.spec")]
    volcano = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
               "spec": {"tasks": [{"name": "w", "template": {"spec": {"containers": containers()}}}]}}
    assert names(volcano) == [("Job/v tasks[w]", "spec.tasks[0].template.spec")]
    other = {"apiVersion": "example.com/v1", "kind": "Job", "metadata": {"name": "o"},
             "spec": {"runner": {"template": {"metadata": {}, "spec": {"containers": containers()}}}}}
    assert names(other) == [("Job/o runner.template", "spec.runner.template.spec")]


def test_the_general_rule_finds_pod_specs_in_unknown_kinds_and_only_those():
    doc = {"apiVersion": "example.com/v1", "kind": "Trainer", "metadata": {"name": "t"}, "spec": {
        "roles": [{"name": "a", "pod": {"spec": {"containers": containers()}}},
                  {"name": "b", "podSpec": {"containers": containers(), "volumes": []}}],
        "notes": {"containers": [{"name": "only-a-name"}]},  # no image: not a PodSpec
        "script": "containers: [{name: c, image: x}]"}}  # a string is not parsed
    assert names(doc) == [("Trainer/t roles[0].pod", "spec.roles[0].pod.spec"),
                          ("Trainer/t roles[1].podSpec", "spec.roles[1].podSpec")]
    assert not is_pod_spec({"containers": []}) and not is_pod_spec({"containers": ["x"]})


def test_a_list_is_searched_item_by_item():
    doc = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": containers()}}}}]}
    (template,) = find_templates(0, doc)
    assert (template.name, template.path, template.container_paths) == (
        "Deployment/d", "items[1].spec.template.spec", ["items[1].spec.template.spec.containers[0]"])


def test_pods_made_by_operators_keep_their_role():
    ray = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h", "labels": {"ray.io/node-type": "head"}},
           "spec": {"containers": [{"name": "ray-head", "image": "ray", "command": ["/bin/bash", "-lc", "--"],
                                    "args": ["ulimit -n 65536; ray start --head --num-cpus=0 --block"]}]}}
    result = podspec.size_pod(ray, DEFAULTS)
    assert result.status == "skipped" and "num-cpus 0" in result.reason
    launcher = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "l", "labels": {"training.kubeflow.org/job-role": "launcher"}}, "spec": {"containers": containers()}}
    assert "launcher" in podspec.size_pod(launcher, DEFAULTS).reason
    launcher["metadata"]["annotations"] = {"shmguard.io/skip": "false"}
    assert podspec.size_pod(launcher, DEFAULTS).status == "changed"
    # #27.2: a launcher Pod asking for accelerators trains too (MPIJob runLauncherAsWorker, which its Pod does not say).
    gpu_launcher = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "l", "labels": {"training.kubeflow.org/job-role": "launcher"}},
                    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}
    assert podspec.size_pod(gpu_launcher, DEFAULTS).status == "changed"


@pytest.mark.parametrize("doc, message", [
    ({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"}, "spec": {}}, "spec.headGroupSpec is missing"),
    ({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
      "spec": {"headGroupSpec": {"template": {"spec": {"containers": containers()}}}, "workerGroupSpecs": {"a": 1}}},
     "spec.workerGroupSpecs should be a list, not dict"),
    ({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
      "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}}, "spec.pytorchReplicaSpecs.Worker.template is missing"),
    ({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "i"},
      "spec": {"predictor": {"minReplicas": 1}}}, "spec.predictor has no containers nor a model"),
    ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"},
      "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": "x"}}]}}, "should be a mapping, not str"),
])
def test_bad_templates_are_named_by_document_and_path(doc, message):
    with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace(".", r"\.")):
        find_templates(0, doc)
    summary = podspec.patch_documents([doc], DEFAULTS)
    assert summary.errors and message in summary.errors[0].reason


def test_a_new_volume_never_takes_a_name_in_use_and_a_null_empty_dir_is_fixed():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"volumes": [{"name": "dshm", "configMap": {"name": "c"}}], "containers": [containers()[0]]}}
    podspec.size_pod(pod, DEFAULTS, ALL)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["dshm", "dshm-1"]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "dshm-1", "mountPath": "/dev/shm"}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"volumes": [{"name": "shm", "emptyDir": None}],
                    "containers": [{**containers()[0], "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}]}}
    result = podspec.size_pod(pod, DEFAULTS, ALL)
    assert pod["spec"]["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "368Mi"}}]
    assert result.status == "changed"


def test_null_resources_and_limits_take_an_asked_limit():
    for resources in (None, {}, {"limits": None, "requests": None}, {"limits": {}}):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}
        result = podspec.size_pod(pod, DEFAULTS, podspec.PatchOptions(memory=2 * 1024**3, all_templates=True))
        assert result.status == "changed" and pod["spec"]["containers"][0]["resources"]["limits"] == {"memory": "2Gi"}
