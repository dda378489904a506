"""Minimal-diff YAML edits: golden manifests whose diff is only the patched lines, generated manifests
whose edited text loads as exactly the patched documents, idempotence, and the per-document fall-back."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmguard import sizing
from shmguard.job import make_job
from shmguard.manifests import yamlio
from shmguard.manifests.delta import ADD, APPEND, REMOVE, SET, Op, diff
from shmguard.manifests.podspec import PatchOptions, patch_documents
from shmguard.manifests.yamledit import edit_text, patch_text, render_scalar, unified_diff
from tests.support.paths import DATA

GOLDEN = DATA / "yamledit" / "golden"
JOB = make_job(workers="1", batch_size="1", sample_bytes="1k")
BIG_JOB = make_job(workers="4", batch_size="64", sample_shape="3,224,224")


def asked(job):
    """Options that ask for a memory limit and a sizeLimit on an unsized /dev/shm (`patch --memory …
    --size-unsized`): without them both are left as they are (#20 items 2 and 5), and these tests are about
    where the editor puts the new lines."""
    return PatchOptions(memory=sizing.memory_needed(job), size_unsized=True, all_templates=True)


def patch(text: str, job=JOB):
    return patch_text(text, "test.yaml", lambda docs: list(patch_documents(docs, job, asked(job)).changes))


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # line ends as they are


@pytest.mark.parametrize("name", sorted(p.name[:-len(".in.yaml")] for p in GOLDEN.glob("*.in.yaml")))
def test_golden_manifests(name):
    source = read(GOLDEN / f"{name}.in.yaml")
    result = patch(source)
    if os.environ.get("SHMGUARD_REGEN_GOLDEN"):  # after a sizing rule changed: review the diff of the .out files
        (GOLDEN / f"{name}.out.yaml").write_bytes(result.text.encode("utf-8"))
    expected = read(GOLDEN / f"{name}.out.yaml")
    assert result.text == expected
    # The edited text is exactly the patched documents, and patching it again changes nothing.
    patched = yamlio.load(source, "x")
    patch_documents(patched, JOB, asked(JOB))
    assert yamlio.load(result.text, "x") == patched
    again = patch(result.text)
    assert again.text == result.text and not again.changes
    # The diff made from the edits is the one difflib makes from the two texts.
    assert "".join(unified_diff(source, result.edits, "a", "b")) == "".join(
        difflib.unified_diff(source.splitlines(keepends=True), result.text.splitlines(keepends=True), "a", "b"))
    if name.startswith("aliased"):
        assert [f.document for f in result.fallbacks] == [1] and "anchored (&res)" in result.fallbacks[0].reason
    else:
        assert not result.fallbacks
        # Only lines the patch had to change: every removed line is a scalar that was replaced.
        removed = [line for line in difflib.ndiff(source.splitlines(), result.text.splitlines()) if line[:2] == "- "]
        # (a flow collection is one line: it changes where it gets an item)
        assert all(any(word in line for word in ("memory: ", "volumes: []", "resources: {}", "Master: {"))
                   for line in removed), removed


def test_documents_around_a_fallback_stay_byte_for_byte():
    source = read(GOLDEN / "aliased-resources.in.yaml")
    result = patch(source)
    tail = source[source.index("---\n"):]
    assert result.text.endswith(tail)
    assert result.text.startswith(source[:source.index("apiVersion")])  # its leading comments stay too
    assert "document 1 (Deployment/a)" in str(result.fallbacks[0])


def test_unchanged_text_is_byte_identical():
    text = ("# c\r\n---\r\nkind: ConfigMap\r\ndata: {a: '1'}   \r\n---\r\n# Source: x\r\n---\r\n\r\n"
            "apiVersion: v1\nkind: Pod\r\nspec: {containers: [{name: c, volumeMounts: [{name: s, mountPath: /dev/shm}], "
            "resources: {limits: {memory: 8Gi}}}], volumes: [{name: s, emptyDir: {medium: Memory, sizeLimit: 1Gi}}]}\r\n---")
    result = patch(text)
    assert result.text == text and not result.changes and not result.fallbacks


@pytest.mark.parametrize("text", [
    "# just a comment\n",
    "---\n# Source: chart/templates/empty.yaml\n---\n# Source: chart/templates/other.yaml\n",
    "kind: ConfigMap\ndata: {a: b}\n---\n",
    "\n\n---\n\n...\n",
    "",
    "kind: ConfigMap  # no newline at the end",
])
def test_empty_and_comment_only_documents_pass_through(text):
    result = patch(text)
    assert result.text == text and not result.changes


def test_comments_and_block_scalars_with_brackets_are_not_nesting():
    text = ("# " + "[" * 501 + "\nkind: ConfigMap\ndata:\n  script: |\n    echo '[[[[[[[[' {{{{\n"
            "    " + "[" * 600 + "\n")
    assert patch(text).text == text


def test_byte_order_mark_and_no_final_newline():
    text = "\ufeffapiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c"
    result = patch(text)
    assert result.text.startswith("\ufeffapiVersion: v1\nkind: Pod\n") and not result.text.endswith("\n")
    assert result.text.endswith("      sizeLimit: 64Mi")
    doc = yaml.safe_load(result.text[1:])
    assert doc["spec"]["volumes"][0]["name"] == "dshm"


def test_indentation_follows_the_file():
    four = ("apiVersion: apps/v1\nkind: Deployment\nspec:\n    template:\n        spec:\n            containers:\n"
            "                -   name: c\n                    image: x\n")
    out = patch(four).text
    assert "                -   name: c\n                    image: x\n" in out
    assert ("                    volumeMounts:\n"
            "                        -   name: dshm\n                            mountPath: /dev/shm\n") in out
    assert "                    resources:\n                        limits:\n" in out
    assert "            volumes:\n                -   name: dshm\n                    emptyDir:\n" \
           "                        medium: Memory\n" in out


def test_a_value_a_merge_key_brought_in_is_overridden_in_the_mapping():
    # The container's resources come from the merge source; the patch sets them on the container, so a
    # key written in the container overrides the merged one and the source stays as it was.
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nx-base: &base\n  name: c\n  resources: null\n"
            "spec:\n  containers:\n  - <<: *base\n    image: x\n")
    result = patch(text)
    assert not result.fallbacks
    assert result.text.startswith(text)
    assert result.text[len(text):].startswith("    resources:\n      limits:\n        memory: 377Mi\n"
                                              "    volumeMounts:\n    - name: dshm\n      mountPath: /dev/shm\n")
    docs = yamlio.load(result.text, "x")
    assert docs[0]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "377Mi"
    assert docs[0]["x-base"] == {"name": "c", "resources": None}


def test_a_change_inside_a_merge_source_falls_back_and_the_other_documents_are_edited():
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nx-base: &base\n  name: c\n  resources: {limits: {memory: 1Mi}}\n"
            "spec:\n  containers:\n  - <<: *base\n    image: x\n---\napiVersion: v1\nkind: Pod  # second\nmetadata: {name: q}\n"
            "spec:\n  containers:\n  - name: c\n    image: x\n")
    result = patch(text)
    assert [f.document for f in result.fallbacks] == [1] and "anchored (&base)" in result.fallbacks[0].reason
    assert result.text.endswith("---\napiVersion: v1\nkind: Pod  # second\nmetadata: {name: q}\nspec:\n  containers:\n  - name: c\n"
                                "    image: x\n    resources:\n      limits:\n        memory: 377Mi\n    volumeMounts:\n"
                                "    - name: dshm\n      mountPath: /dev/shm\n  volumes:\n  - name: dshm\n    emptyDir:\n"
                                "      medium: Memory\n      sizeLimit: 64Mi\n")


def test_a_merge_key_that_the_patch_does_not_touch_is_edited_in_place():
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nx-env: &env {name: A, value: '1'}\nspec:\n  containers:\n"
            "  - name: c\n    env:\n    - <<: *env\n      value: '2'\n")
    result = patch(text)
    assert not result.fallbacks and result.text.startswith(text)


def test_quoting_of_a_replaced_scalar_is_kept():
    text = ("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: x\n    resources:\n"
            "      limits: {memory: '1Mi'}\n      requests: {memory: \"1Mi\"}\n    volumeMounts: [{name: s, mountPath: /dev/shm}]\n"
            "  volumes: [{name: s, emptyDir: {medium: Memory}}]\n")
    out = patch(text).text
    assert "limits: {memory: '377Mi'}" in out and 'requests: {memory: "377Mi"}' in out
    assert "emptyDir: {medium: Memory, sizeLimit: 64Mi}" in out


def test_a_null_value_gets_a_block_below_its_key_keeping_its_comment():
    text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    resources: ~  # none yet\n    image: x\n"
    out = patch(text).text
    assert "    resources:  # none yet\n      limits:\n        memory: 377Mi\n    image: x\n" in out


def test_diff_operations():
    before = {"a": {"b": 1, "c": [1]}, "d": None, "e": "x"}
    after = {"a": {"b": 2, "c": [1, {"k": "v"}], "n": {}}, "d": {"m": 1}}
    assert diff(before, after) == [Op(SET, ("a", "b"), None, 2), Op(APPEND, ("a", "c"), None, {"k": "v"}),
                                   Op(ADD, ("a",), "n", {}), Op(SET, ("d",), None, {"m": 1}), Op(REMOVE, ("e",))]
    assert diff(before, before) == [] and diff([1, 2], [1]) == [Op(REMOVE, (1,))]
    assert diff({"x": 1}, {"x": "1"}) == [Op(SET, ("x",), None, "1")]


def test_a_removal_falls_back_for_that_document_only():
    text = "kind: A\nx: 1  # c\n---\nkind: B\ny: [1, 2]  # d\n"
    documents = yamlio.compose(text, "t")
    before = [d.data for d in documents]
    after = [{"kind": "A", "x": 2}, {"kind": "B"}]
    edited = edit_text(text, documents, before, after)
    assert edited.text == "kind: A\nx: 2  # c\n---\nkind: B\n"
    assert [f.document for f in edited.fallbacks] == [2] and "removed y" in edited.fallbacks[0].reason


@given(st.one_of(st.text(max_size=20), st.sampled_from(["yes", "No", "~", "null", "1e3", "0x1F", "1:20", "- a", "#",
                                                        "a: b", "'q'", '"', "true", "2020-01-01", "", " x", "\t"])),
       st.sampled_from(["", "'", '"']))
def test_rendered_scalars_read_back_as_the_same_string(value, style):
    assume_loadable = yaml.safe_load(f"k: {render_scalar(value, style)}\n")
    assert assume_loadable == {"k": value}
    assert yaml.safe_load(f"{{k: {render_scalar(value, style)}}}") == {"k": value}


# --- generated manifests -----------------------------------------------------------------------------

NAMES = st.sampled_from(["c", "trainer", "side-car", "x"])
QUANTITIES = st.sampled_from(["1Mi", "64Mi", "512Mi", "4Gi", "100G", 1073741824])


@st.composite
def pod_specs(draw):
    containers = []
    for i in range(draw(st.integers(1, 3))):
        container: dict = {"name": f"{draw(NAMES)}{i}", "image": "img:1"}
        resources = draw(st.sampled_from(["none", "null", "empty", "limits", "both", "limits-null"]))
        if resources == "null":
            container["resources"] = None
        elif resources == "empty":
            container["resources"] = {}
        elif resources == "limits":
            container["resources"] = {"limits": {"memory": draw(QUANTITIES), "cpu": "1"}}
        elif resources == "both":
            container["resources"] = {"limits": {"memory": draw(QUANTITIES)}, "requests": {"memory": draw(QUANTITIES)}}
        elif resources == "limits-null":
            container["resources"] = {"limits": None}
        if draw(st.booleans()):
            container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        containers.append(container)
    spec: dict = {"containers": containers}
    volumes = draw(st.sampled_from(["none", "empty", "data", "shm"]))
    if volumes == "empty":
        spec["volumes"] = []
    elif volumes == "data":
        spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    elif volumes == "shm":
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"sizeLimit": draw(QUANTITIES)}}]
    return spec


@st.composite
def manifests(draw):
    docs = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["Pod", "Deployment", "Job", "CronJob", "ConfigMap"]))
        doc: dict = {"apiVersion": "v1", "kind": kind, "metadata": {"name": f"m{i}", "labels": {"app": "x"}}}
        if kind == "Pod":
            doc["spec"] = draw(pod_specs())
        elif kind in ("Deployment", "Job"):
            doc["spec"] = {"template": {"metadata": {"labels": {"app": "x"}, "annotations": {"note": "a [\nb {\n"}},
                                        "spec": draw(pod_specs())}}
        elif kind == "CronJob":
            doc["spec"] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": draw(pod_specs())}}}}
        else:
            doc["data"] = {"k": "v", "script": "echo '[{'\n"}
        docs.append(doc)
    return docs


class Writer:
    """Writes data as YAML in styles drawn by hypothesis: indentation, sequences indented or not, flow
    collections, quoting, comments, blank lines, CRLF."""

    def __init__(self, draw) -> None:
        self.draw = draw
        self.step = draw(st.sampled_from([2, 4]))
        self.sequence = draw(st.sampled_from([0, self.step]))
        self.newline = draw(st.sampled_from(["\n", "\r\n"]))

    def scalar(self, value) -> str:
        if value is None:
            return self.draw(st.sampled_from(["null", "~", ""]))
        if isinstance(value, str):
            quote = self.draw(st.sampled_from(["", "'", '"']))
            return render_scalar(value, quote)
        return render_scalar(value)

    def flow(self, value) -> str:
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {self.flow(v) if v is not None else 'null'}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.flow(v) for v in value) + "]"
        return self.scalar(value) or "null"

    def comment(self) -> str:
        return self.draw(st.sampled_from(["", "", "  # note [x]"]))

    def block(self, value, indent: int) -> list[str]:
        pad = " " * indent
        lines = []
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, (dict, list)) and item and not self.draw(st.integers(0, 4)) == 0:
                    lines.append(f"{pad}{key}:{self.comment()}")
                    lines.extend(self.block(item, indent + (self.step if isinstance(item, dict) else self.sequence)))
                elif isinstance(item, (dict, list)):
                    lines.append(f"{pad}{key}: {self.flow(item)}{self.comment()}")
                elif isinstance(item, str) and item.endswith("\n"):  # a block scalar
                    lines.append(f"{pad}{key}: |{self.comment()}")
                    lines.extend(f"{pad}  {line}" for line in item.splitlines())
                else:
                    lines.append(f"{pad}{key}: {self.scalar(item)}".rstrip() + self.comment())
                extra = self.draw(st.integers(0, 12))
                if extra == 0:
                    lines.append("")
                elif extra == 1:
                    lines.append(" " * self.draw(st.integers(0, indent)) + "# a comment line: [{")

        else:
            for item in value:
                if isinstance(item, dict) and item:
                    inner = self.block(item, indent + 2)
                    inner[0] = pad + "- " + inner[0][indent + 2:]
                    lines.extend(inner)
                else:
                    lines.append(f"{pad}- {self.flow(item)}")
        return lines

    def stream(self, docs) -> str:
        parts = []
        for i, doc in enumerate(docs):
            head = "---" + self.newline if i or self.draw(st.booleans()) else ""
            parts.append(head + self.draw(st.sampled_from(["", "# Source: x" + self.newline]))
                         + self.newline.join(self.block(doc, 0)) + self.newline)
        return "".join(parts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), manifests(), st.sampled_from([JOB, BIG_JOB]))
def test_edited_text_loads_as_exactly_the_patched_documents(data, docs, job):
    text = Writer(data.draw).stream(docs)
    assert yamlio.load(text, "x") == docs
    expected = yamlio.plain_copy(docs)
    changes = list(patch_documents(expected, job, asked(job)).changes)
    result = patch(text, job)
    assert not result.fallbacks
    assert yamlio.load(result.text, "x") == expected
    assert list(result.changes) == changes
    again = patch(result.text, job)
    assert again.text == result.text and not again.changes
    assert apply_unified(text, "".join(unified_diff(text, result.edits, "a", "b"))) == result.text
    # Lines are only added, except the line of a replaced scalar or of a flow collection that grew:
    # each operation changes at most one line that was there.
    removed = [line for line in difflib.ndiff(text.splitlines(), result.text.splitlines()) if line[:2] == "- "]
    assert len(removed) <= len(diff(docs, expected))
    assert all(any(s in line for s in ("{", "[", "memory:", "medium:", "sizeLimit:", "resources:", "limits:"))
               for line in removed), removed
    if "\r\n" in text:
        assert result.text.count("\n") == result.text.count("\r\n")


def apply_unified(text: str, patch_text: str) -> str:
    """Apply a unified diff (as `patch` would), checking every context and removed line."""
    import re

    old = text.splitlines(keepends=True)
    lines = patch_text.splitlines(keepends=True)[2:]
    out: list[str] = []
    at = 0
    i = 0
    while i < len(lines):
        match = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", lines[i])
        assert match, lines[i]
        start = int(match.group(1)) - (0 if match.group(2) == "0" else 1)
        out.extend(old[at:start])
        at = start
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            tag, line = lines[i][0], lines[i][1:]
            if i + 1 < len(lines) and lines[i + 1].startswith("\\ No newline"):
                line = line[:-1]
                i += 1
            if tag in " -":
                assert old[at] == line, (old[at], line)
                at += 1
            if tag in " +":
                out.append(line)
            i += 1
    return "".join(out + old[at:])


def test_unified_diff_of_edits_at_the_end_without_a_final_newline():
    text = "a: 1\nb: [x]"
    edits = ((3, 4, "2"), (10, 10, ", y"))
    made = "".join(unified_diff(text, edits, "f", "f"))
    assert made == "--- f\n+++ f\n@@ -1,2 +1,2 @@\n-a: 1\n+a: 2\n-b: [x]\n\\ No newline at end of file\n+b: [x, y]\n" \
                   "\\ No newline at end of file\n"
    assert apply_unified(text, made) == "a: 2\nb: [x, y]"


def test_anchored_but_unaliased_collections_are_edited_in_place():
    text = ("apiVersion: v1\nkind: Pod\nspec:\n  containers: &cs\n    - &c name: c\n      image: x\n"
            "      resources: &r {limits: {memory: 1Mi}}\n  volumes: !!seq\n  - name: data\n")
    result = patch(text)
    assert not result.fallbacks
    assert result.text.startswith("apiVersion: v1\nkind: Pod\nspec:\n  containers: &cs\n    - &c name: c\n      image: x\n"
                                  "      resources: &r {limits: {memory: 377Mi}}\n      volumeMounts:\n")
    assert "  volumes: !!seq\n  - name: data\n  - name: dshm\n    emptyDir:\n" in result.text


def test_a_scalar_alias_that_the_patch_replaces_is_replaced_and_its_anchor_stays():
    text = ("apiVersion: v1\nkind: Pod\nx-mem: &mem 1Mi\nspec:\n  containers:\n  - name: c\n    resources:\n"
            "      limits: {memory: *mem}  # shared\n")
    result = patch(text)
    assert not result.fallbacks
    assert "x-mem: &mem 1Mi\n" in result.text and "      limits: {memory: 377Mi}  # shared\n" in result.text


ALIAS_LAYOUTS = {
    "shared-limits": "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    resources: {limits: &l {memory: 1Mi}}\n"
                     "  - name: b\n    resources: {limits: *l}\n",
    "shared-container-list": "kind: Job\nx: &cs\n- {name: a}\nspec:\n  template:\n    spec:\n      containers: *cs\n",
    "shared-volumes": "apiVersion: v1\nkind: Pod\nx: &v []\nspec:\n  volumes: *v\n  containers:\n  - name: a\n",
    "merged-container": "apiVersion: v1\nkind: Pod\nx: &c {name: a, resources: {limits: {memory: 1Mi}}}\nspec:\n  containers:\n"
                        "  - <<: *c\n    image: i\n  - <<: *c\n    name: b\n",
    "merged-list": "apiVersion: v1\nkind: Pod\nx: &m {volumeMounts: []}\ny: &n {name: a}\nspec:\n  containers:\n  - <<: [*n, *m]\n",
    "aliased-key": "apiVersion: v1\nkind: Pod\nk: &k containers\nspec:\n  *k : [{name: a}]\n",
    "aliased-spec": "apiVersion: apps/v1\nkind: Deployment\nx: &s {containers: [{name: a}]}\nspec:\n  template:\n    spec: *s\n",
}


@pytest.mark.parametrize("name", sorted(ALIAS_LAYOUTS))
@pytest.mark.parametrize("job", [JOB, BIG_JOB], ids=["small", "big"])
def test_aliases_and_merge_keys_end_as_the_patched_documents(name, job):
    text = ALIAS_LAYOUTS[name] + "---\n# next\nkind: ConfigMap  # kept\n"
    expected = yamlio.load(text, "x")
    patch_documents(expected, job, asked(job))
    result = patch(text, job)
    assert yamlio.load(result.text, "x") == expected
    assert result.text.endswith("---\n# next\nkind: ConfigMap  # kept\n")
    assert all(f.document == 1 for f in result.fallbacks)
    again = patch(result.text, job)
    assert again.text == result.text and not again.changes


NEW_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-1000, 10**12), st.floats(allow_nan=False, width=32),
              st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text("abc-_/.:", min_size=1, max_size=5),
                                                                         inner, max_size=3)),
    max_leaves=6)


def collections_of(value, path=()):
    """(path, dict or list) for every collection in value."""
    if isinstance(value, (dict, list)):
        yield path, value
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from collections_of(item, path + (key,))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), manifests())
def test_any_adds_sets_and_appends_end_as_the_changed_documents(data, docs):
    """Not only shmguard's patch: any change of the kinds a patch makes, anywhere, is placed in the text."""
    text = Writer(data.draw).stream(docs)
    documents = yamlio.compose(text, "x")
    before = [d.data for d in documents]
    after = yamlio.plain_copy(before)
    touched: set = set()
    for _ in range(data.draw(st.integers(1, 6))):
        index = data.draw(st.integers(0, len(after) - 1))
        path, target = data.draw(st.sampled_from(list(collections_of(after[index]))))
        new = data.draw(NEW_VALUES)
        if isinstance(target, list):
            if target and data.draw(st.booleans()):
                position = data.draw(st.integers(0, len(target) - 1))
                if not isinstance(target[position], (dict, list)):
                    target[position] = new if not isinstance(new, (dict, list)) else str(new)
            else:
                target.append(new)
        else:
            key = data.draw(st.one_of(st.sampled_from(sorted(target) or ["k"]), st.text("xyz-", min_size=1, max_size=4)))
            if (key in target and isinstance(target[key], (dict, list))) or (index, path, key) in touched:
                continue
            touched.add((index, path, key))
            if key in target and target[key] is not None and isinstance(new, (dict, list)):
                new = str(new)  # a scalar turned into a collection is re-dumped; keep to what a patch does
            target[key] = new
    edited = edit_text(text, documents, before, after)
    assert yamlio.load(edited.text, "x") == after
    assert not edited.fallbacks


def test_two_entries_into_an_empty_flow_collection_get_a_comma_between():
    text = "a: {}\nb: []\n"
    documents = yamlio.compose(text, "x")
    edited = edit_text(text, documents, [{"a": {}, "b": []}], [{"a": {"k": 1, "x": None}, "b": [1, {"w": "z"}]}])
    assert edited.text == "a: {k: 1, x: null}\nb: [1, {w: z}]\n" and not edited.fallbacks
    # #33.12: a key kubectl's YAML reads as a bool (`y`) is quoted.
    edited = edit_text(text, documents, [{"a": {}, "b": []}], [{"a": {}, "b": [{"y": "z"}]}])
    assert edited.text == "a: {}\nb: [{'y': z}]\n"


def test_a_replaced_block_scalar_keeps_the_lines_after_it():
    text = "a: |\n  one [\n  two {\n\n# c\nb: >-\n  x\n"
    documents = yamlio.compose(text, "x")
    edited = edit_text(text, documents, [{"a": "one [\ntwo {\n", "b": "x"}], [{"a": "new", "b": "it's"}])
    assert edited.text == "a: new\n\n# c\nb: 'it''s'\n" and not edited.fallbacks


def test_27_8_an_anchored_container_every_alias_changes_alike_is_edited_once_and_keeps_every_comment():
    """KubeRay's RayJob sample (tests/data/manifests/kuberay-rayjob-resources.yaml), its worker group made to share
    the head's container through an anchor: both pods get the same /dev/shm mount through it, so the anchored
    container is edited once and no comment is lost (before: the document was re-written whole)."""
    real = read(DATA / "manifests" / "kuberay-rayjob-resources.yaml")
    worker = real[real.index("          - name: ray-worker"):real.index("\n\n######")]
    text = real.replace("          - name: ray-head\n", "          - &container\n            name: ray-head\n")
    text = text.replace(worker, "          - *container\n          volumes:\n          - name: code-sample\n"
                                "            configMap: {name: ray-job-code-sample}")
    result = patch_text(text, "rayjob.yaml", lambda docs: list(patch_documents(docs, JOB).changes))
    assert not result.fallbacks
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert [line for line in result.text.splitlines() if line.lstrip().startswith("#")] == comments
    assert result.text.count("mountPath: /dev/shm") == 1 and "          - *container\n" in result.text
    docs = yamlio.load(result.text, "x")
    head = docs[0]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    worker_pod = docs[0]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    for spec in (head, worker_pod):
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        assert any(v["name"] == mount["name"] and v["emptyDir"]["medium"] == "Memory" for v in spec["volumes"])
    expected = yamlio.load(text, "x")
    patch_documents(expected, JOB)
    assert docs == expected
