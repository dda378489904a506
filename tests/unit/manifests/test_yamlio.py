"""The bounded YAML loader: the same data as PyYAML's safe loader for manifests, and every limit acting
while it parses (issue #18: alias cycles, deep nesting, huge documents, merge keys)."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shmguard.manifests import yamlio
from shmguard.manifests.templates import ManifestError


def refused(text: str) -> str:
    with pytest.raises(ManifestError) as exc:
        yamlio.load(text, "in.yaml")
    message = str(exc.value)
    assert message.startswith("in.yaml: ") and "\n" not in message
    return message


@pytest.mark.parametrize("text", [
    "kind: ConfigMap\nx: &a [*a]\n",
    "x: &a {y: *a}\n",
    "x: &a\n  y:\n  - z: *a\n",
])
def test_alias_cycles_are_refused(text):
    assert "a cycle" in refused(text)


@pytest.mark.parametrize("text", [
    "- " * 30_000 + "x",  # segfaulted libyaml's recursive composer
    "- " * 400 + "x",
    "a: " + "[" * 400 + "]" * 400 + "\n",  # passed the old pre-scan, crashed the dumper
    "a: " + "{b: " * 250 + "}" * 250 + "\n",
    "a:\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(1, 250)),
], ids=["30000-dashes", "400-dashes", "400-brackets", "250-braces", "250-indents"])
def test_deep_nesting_is_refused(text):
    assert f"nested too deeply to be a manifest (more than {yamlio.MAX_NESTING} levels)" in refused(text)


def test_nesting_up_to_the_limit_loads_and_dumps():
    from shmguard.job import make_job
    from shmguard.manifests.podspec import PatchOptions, patch_documents
    from shmguard.manifests.yamledit import patch_text

    ALL = PatchOptions(all_templates=True)

    depth = yamlio.MAX_NESTING
    for deep in ("[" * (depth - 1) + "x" + "]" * (depth - 1),
                 "\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(1, depth - 1)) + "  z: 1"):
        # The shared container list makes the document fall back to the dumper, at the deepest nesting.
        text = f"apiVersion: v1\nkind: Pod\nx: &c [{{name: a, image: x}}]\ndeep: {deep}\nspec:\n  containers: *c\n"
        job = make_job(workers="1", batch_size="1", sample_bytes="1k")
        result = patch_text(text, "x", lambda docs: list(patch_documents(docs, job, ALL).changes))
        assert len(result.fallbacks) == 1
        assert yaml.safe_load(result.text)["deep"] == yaml.safe_load(text)["deep"]


def test_node_budget_acts_while_parsing(monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_DOCUMENT_NODES", 1000)
    # The syntax error at the end is never reached: the budget stops the parser first.
    text = "kind: ConfigMap\nitems:\n" + "- x\n" * 5000 + "bad: [unclosed\n"
    message = refused(text)
    assert "more than 1,000 YAML nodes in one document" in message and "stopped reading at line 998," in message


def test_input_budget_counts_all_documents(monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_INPUT_NODES", 1000)
    text = "---\n".join("kind: ConfigMap\nitems: [" + ", ".join(["x"] * 300) + "]\n" for _ in range(5))
    assert "more than 1,000 YAML nodes in one input; split the manifest" in refused(text)


def test_alias_bomb_is_named():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8))
    assert "alias bomb" in refused(bomb)


def test_merge_keys_are_accepted_as_kubectl_does():
    text = ("base: &base {image: x, env: [a]}\nextra: &extra {pull: Always, image: y}\n"
            "one: {<<: *base, image: z}\ntwo:\n  <<: [*extra, *base]\n  name: n\n")
    assert yamlio.load(text, "x") == list(yaml.safe_load_all(text))
    assert yamlio.load(text, "x")[0]["two"] == {"pull": "Always", "image": "y", "env": ["a"], "name": "n"}


def test_duplicate_keys_are_refused_but_a_merged_key_may_be_overridden():
    assert "duplicate key 'kind'" in refused("kind: Pod\nkind: Deployment\n")
    assert yamlio.load("b: &b {k: 1}\nm: {<<: *b, k: 2}\n", "x") == [{"b": {"k": 1}, "m": {"k": 2}}]


@pytest.mark.parametrize("text, message", [
    ("kind: !!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
    ("a: !!python/name:os.system\n", "not valid YAML"),
    ("a: *nowhere\n", "undefined alias"),
    ("kind: Pod\nspec: [unclosed\n", "not valid YAML at line 3"),
    ("? [a, b]\n: c\n", "a mapping or a list as a mapping key"),
    ("a: {<<: 1}\n", "a merge key (<<) needs a mapping"),
])
def test_bad_yaml_is_one_line(text, message):
    assert message in refused(text)


def test_comments_and_block_scalars_hold_any_brackets():
    text = "# " + "[" * 501 + "\nkind: ConfigMap\ndata:\n  a: |\n    {{{{ [[[[ \"'\n  b: >\n    " + "[" * 600 + "\n"
    assert yamlio.load(text, "x") == [yaml.safe_load(text)]


def test_empty_and_comment_only_documents():
    text = "---\n# Source: a\n---\nkind: A\n---\n"
    documents = yamlio.compose(text, "x")
    assert [d.data for d in documents] == [None, {"kind": "A"}, None]
    assert documents[0].node is None and text[documents[1].node.start:].startswith("kind: A")


def test_positions_are_characters_of_the_text_even_after_a_byte_order_mark():
    text = "\ufeffk: é\nx: [a]\r\ny: 1\n"
    (document,) = yamlio.compose(text, "x")
    (k, v), (x, seq), (y, one) = document.node.value
    assert text[k.start:k.end] == "k" and text[v.start:v.end] == "é"
    assert text[seq.start:seq.end] == "[a]" and text[one.start:one.end] == "1"


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text("abcXYZ:-# 019.", max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text("abkz", min_size=1, max_size=4), inner,
                                                                       max_size=4)), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=3), st.booleans())
def test_loads_what_pyyaml_loads(documents, flow):
    text = yaml.safe_dump_all(documents, default_flow_style=flow)
    assert yamlio.load(text, "x") == list(yaml.safe_load_all(text))
