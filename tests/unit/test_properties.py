"""Property tests for the parsers and pure functions: no input crashes them, and their rules hold.

Seeded (derandomize) and bounded, so CI runs the same examples every time in a few seconds.
"""

from __future__ import annotations

import copy

import kubernetes_validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmguard import model
from shmguard.job import make_job
from shmguard.manifests import podspec
from shmguard.probe import cgroup
from shmguard.probe.cpu import parse_cpu_list
from shmguard.probe.gpu import parse_cuda_visible_devices, parse_nvidia_visible_devices
from shmguard.probe.mountinfo import parse_line, parse_mountinfo
from shmguard.probe.nofile import parse_limits
from shmguard.units import docker_size, k8s_quantity, parse_quantity, parse_size

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes = st.integers(min_value=0, max_value=2**62)


@SETTINGS
@given(sizes)
def test_sizes_round_trip_never_below(n):
    assert parse_size(str(n)) == n
    assert parse_size(docker_size(n)) >= n
    assert parse_quantity(k8s_quantity(n)) >= n


@SETTINGS
@given(st.text(max_size=40))
def test_size_parsers_raise_only_value_error(text):
    for parse in (parse_size, parse_quantity):
        try:
            assert parse(text) >= 0
        except ValueError:
            pass


@SETTINGS
@given(st.text(max_size=300))
def test_text_parsers_never_crash(text):
    parse_mountinfo(text)
    cgroup.parse_proc_cgroup(text)
    parse_cuda_visible_devices(text)
    parse_nvidia_visible_devices(text)
    for parse in (cgroup.parse_cpu_max, lambda t: cgroup.parse_limit_value(t, "v2"), parse_cpu_list, parse_limits,
                  lambda t: cgroup.parse_v1_quota(t, "100000")):
        try:
            parse(text)
        except ValueError:
            pass


path_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


@SETTINGS
@given(st.text(path_chars, min_size=1, max_size=30), st.lists(st.sampled_from(["shared:1", "master:2", "unbindable"]), max_size=3))
def test_mountinfo_escapes_round_trip(name, optional):
    escaped = "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in "/mnt/" + name)
    if any(c.isspace() for c in escaped):
        return  # other whitespace cannot appear unescaped in a field
    mount = parse_line(f"36 35 98:0 / {escaped} rw {' '.join(optional)} - tmpfs shm rw,size=1k".replace("  ", " "))
    assert mount is not None and mount.mount_point == "/mnt/" + name and mount.fstype == "tmpfs"


@SETTINGS
@given(st.text(alphabet="0123456789,-GPUMI abcdef", max_size=30))
def test_cuda_visible_devices_rules(value):
    selected = parse_cuda_visible_devices(value)
    assert selected is not None
    assert len(set(selected)) == len(selected)  # duplicates empty the list instead


jobs = st.builds(
    lambda w, b, s, p, procs, pin: make_job(workers=w, batch_size=b, sample_bytes=s, prefetch_factor=p,
                                            procs_per_node=procs, pin_memory=pin),
    st.integers(0, 64), st.integers(1, 1024), st.integers(1, 2**24), st.integers(1, 16), st.integers(1, 8), st.booleans())


@SETTINGS
@given(jobs, st.sampled_from(["workers", "batch_size", "prefetch_factor", "procs_per_node"]), st.integers(1, 8))
def test_model_is_monotone_and_never_negative(job, field, step):
    bigger = job.replace(**{field: getattr(job, field) + step})
    assert 0 <= model.shm_bytes(job) <= model.shm_bytes(bigger)
    assert 0 < model.memory_bytes(job) <= model.memory_bytes(bigger)
    assert model.memory_bytes(job) >= model.shm_bytes(job)
    if job.workers == 0:
        assert model.shm_bytes(job) == 0
    else:
        assert model.shm_bytes(job) > model.seeds_formula_bytes(job)


extra_fields = st.lists(st.sampled_from([("imagePullPolicy", "IfNotPresent"), ("imagePullPolicy", "Always"),
                                         ("workingDir", "/w"), ("tty", True), ("stdin", False),
                                         ("args", ["--lr", "0.1"]), ("ports", [{"containerPort": 8080}])]),
                        max_size=4, unique_by=lambda kv: kv[0]).map(dict)


@SETTINGS
@given(st.lists(extra_fields, min_size=1, max_size=3), st.sampled_from([None, "256Mi", "1Gi", "64Gi"]),
       st.sampled_from([None, "32Mi", "2Gi"]), jobs)
def test_patch_keeps_every_field_and_is_idempotent(containers_extra, limit, size_limit, job):
    containers = []
    for i, extra in enumerate(containers_extra):
        container = {"name": f"c{i}", "image": "x", **extra}
        if limit:
            container["resources"] = {"limits": {"memory": limit}}
        containers.append(container)
    spec = {"containers": containers}
    if size_limit:
        spec["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size_limit}}]
        containers[0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    original = copy.deepcopy(doc)
    everything = podspec.PatchOptions(all_templates=True)  # a generated Pod says nothing of training (issue 27.4)
    podspec.patch_documents([doc], job, everything)
    for before, after in zip(original["spec"]["containers"], doc["spec"]["containers"]):
        for key, value in before.items():
            if key not in ("resources", "volumeMounts"):
                assert after[key] == value
        if "resources" in before:  # never lowered
            assert parse_quantity(after["resources"]["limits"]["memory"]) >= parse_quantity(before["resources"]["limits"]["memory"])
        else:  # no limit is not given one (tmpfs is capped by none either)
            assert "resources" not in after
        assert any(m["mountPath"] == "/dev/shm" for m in after["volumeMounts"])
    if size_limit:  # never shrunk
        assert parse_quantity(doc["spec"]["volumes"][0]["emptyDir"]["sizeLimit"]) >= parse_quantity(size_limit)
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)  # still a valid Pod
    again = copy.deepcopy(doc)
    assert podspec.patch_documents([again], job, everything).changes == [] and again == doc


@SETTINGS
@given(st.binary(max_size=300), st.lists(st.integers(min_value=1, max_value=40), max_size=30), st.data())
def test_replayed_output_is_copied_once_however_it_is_chunked(data, cuts, draw):
    """After an engine restart the log is replayed from the start and the bytes already copied are
    skipped: for any split of the output into chunks, before and after, it comes out whole and once."""
    import io

    from shmguard.engine.follow import Output

    def chunks(blob):
        out, i = [], 0
        for n in cuts or [len(blob) or 1]:
            out.append(blob[i:i + n])
            i += n
        out.append(blob[i:])
        return [c for c in out if c]

    copied_before = draw.draw(st.integers(min_value=0, max_value=len(data)))
    output = Output(io.TextIOWrapper(io.BytesIO(), encoding="latin-1"), io.StringIO())  # bytes in, bytes out
    for chunk in chunks(data[:copied_before]):  # what the first attach delivered before the engine died
        output.write(0, chunk)
    skip = list(output.copied)
    for chunk in chunks(data):  # the replay of the whole log
        output.write(0, chunk, skip)
    output.out.flush()
    assert output.out.buffer.getvalue() == data
    assert output.copied[0] == len(data)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([None, "128Mi", "1Gi", "64Gi"]), st.sampled_from(["none", "equal", "below", "above"])),
                min_size=1, max_size=3),
       st.sampled_from([None, "1Gi", "8Gi"]), jobs)
def test_patch_never_lowers_a_request_and_keeps_requests_equal_to_limits(resources, memory, job):
    """Issue #20: requests never lowered, never above the limit after; requests == limits stay equal (QoS class)."""
    containers = []
    for i, (limit, request_mode) in enumerate(resources):
        limits = {"memory": limit} if limit else {}
        request = {"none": None, "equal": limit, "below": "64Mi", "above": "128Gi"}[request_mode]
        requests = {"memory": request} if request else {}
        containers.append({"name": f"c{i}", "image": "x", "resources": {"limits": limits, "requests": requests}})
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}}
    original = copy.deepcopy(doc)
    options = podspec.PatchOptions(memory=None if memory is None else parse_quantity(memory), all_templates=True)
    podspec.patch_documents([doc], job, options)
    for i, (before, after) in enumerate(zip(original["spec"]["containers"], doc["spec"]["containers"])):
        b, a = before["resources"], after["resources"]
        if "memory" in b["requests"]:
            assert parse_quantity(a["requests"]["memory"]) >= parse_quantity(b["requests"]["memory"])
        if "memory" in b["limits"]:
            assert parse_quantity(a["limits"]["memory"]) >= parse_quantity(b["limits"]["memory"])
            if b["requests"].get("memory") == b["limits"]["memory"]:
                assert a["requests"]["memory"] == a["limits"]["memory"]
        if i == 0 and "memory" in a["limits"] and "memory" in a["requests"]:  # the DataLoader's: never above its limit
            assert parse_quantity(a["requests"]["memory"]) <= parse_quantity(a["limits"]["memory"])
    assert podspec.patch_documents([copy.deepcopy(doc)], job, options).changes == []
