"""Kubernetes documents written once over settings, with two readers: `evaluate` gives the plain documents (what
`shmguard render webhook` and `exporter render k8s` print) and `helm_template` writes the same documents as a Helm
template (charts/shmguard), so the chart and the commands cannot drift apart.

A tree is plain data (dicts, lists, strings, numbers, bools) in which these nodes may stand:

- Value(key, helm): a setting. evaluate() takes settings[key]; the template writes the Go expression `helm`
  (by default `.Values.<key>`), inline as JSON, which YAML reads as it is;
- Fmt(pattern, *nodes): a string made of nodes, `{0}` standing for the first (printf with `%[1]v` in Go);
- B64(node): base64 of a string (b64enc);
- Choose(cond, then, otherwise): one of two scalars (sprig's ternary);
- When(cond, node): present only when cond holds: a document, a dict entry or a list item;
- Pairs(value, flag): in a list, `flag`, `name=value` for each entry of a mapping setting, in key order (a Go
  range over a map is in key order too).

Conditions: Truthy(node), Equals(node, constant), Not(cond), All(*conds); truth is Go's (an empty map, list or
string, 0 and false are false), which is Python's for these values.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

ABSENT = object()  # what a When whose condition fails evaluates to: left out of its dict or list


class Node:
    """A piece of a tree that is not plain data."""

    def evaluate(self, settings: dict) -> Any:
        raise NotImplementedError

    def expr(self) -> str:
        """The Go template expression of the node's value."""
        raise NotImplementedError


class Value(Node):
    def __init__(self, key: str, helm: str | None = None) -> None:
        self.key = key
        self.helm = helm or f".Values.{key}"

    def evaluate(self, settings: dict) -> Any:
        return copy.deepcopy(settings[self.key])  # each document its own copy of a mapping setting

    def expr(self) -> str:
        return self.helm

    def __repr__(self) -> str:
        return f"Value({self.key!r})"


class Fmt(Node):
    def __init__(self, pattern: str, *args: Any) -> None:
        self.pattern = pattern
        self.args = args

    def evaluate(self, settings: dict) -> str:
        return self.pattern.format(*(evaluate(arg, settings) for arg in self.args))

    def expr(self) -> str:
        go = re.sub(r"\{(\d+)\}", lambda m: f"%[{int(m.group(1)) + 1}]v", self.pattern.replace("%", "%%"))
        return f"printf {json.dumps(go)} " + " ".join(f"({go_expr(arg)})" for arg in self.args)


class B64(Node):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def evaluate(self, settings: dict) -> str:
        return base64.b64encode(str(evaluate(self.inner, settings)).encode()).decode("ascii")

    def expr(self) -> str:
        return f"b64enc ({go_expr(self.inner)})"


class Cond:
    def holds(self, settings: dict) -> bool:
        raise NotImplementedError

    def expr(self) -> str:
        raise NotImplementedError


class Truthy(Cond):
    def __init__(self, node: Any) -> None:
        self.node = node

    def holds(self, settings: dict) -> bool:
        return bool(evaluate(self.node, settings))

    def expr(self) -> str:
        return go_expr(self.node)


class Equals(Cond):
    def __init__(self, node: Any, constant: Any) -> None:
        self.node = node
        self.constant = constant

    def holds(self, settings: dict) -> bool:
        return evaluate(self.node, settings) == self.constant

    def expr(self) -> str:
        return f"eq ({go_expr(self.node)}) {go_literal(self.constant)}"


class Not(Cond):
    def __init__(self, cond: Cond) -> None:
        self.cond = cond

    def holds(self, settings: dict) -> bool:
        return not self.cond.holds(settings)

    def expr(self) -> str:
        return f"not ({self.cond.expr()})"


class All(Cond):
    def __init__(self, *conds: Cond) -> None:
        self.conds = conds

    def holds(self, settings: dict) -> bool:
        return all(c.holds(settings) for c in self.conds)

    def expr(self) -> str:
        return "and " + " ".join(f"({c.expr()})" for c in self.conds)


class Choose(Node):
    def __init__(self, cond: Cond, then: Any, otherwise: Any) -> None:
        self.cond, self.then, self.otherwise = cond, then, otherwise

    def evaluate(self, settings: dict) -> Any:
        return evaluate(self.then if self.cond.holds(settings) else self.otherwise, settings)

    def expr(self) -> str:
        return f"ternary ({go_expr(self.then)}) ({go_expr(self.otherwise)}) ({self.cond.expr()})"


class When(Node):
    def __init__(self, cond: Cond, node: Any) -> None:
        self.cond, self.node = cond, node

    def evaluate(self, settings: dict) -> Any:
        return evaluate(self.node, settings) if self.cond.holds(settings) else ABSENT


class Pairs(Node):
    def __init__(self, value: Value, flag: str) -> None:
        self.value, self.flag = value, flag

    def evaluate(self, settings: dict) -> list:
        mapping = evaluate(self.value, settings) or {}
        return [item for key in sorted(mapping) for item in (self.flag, f"{key}={mapping[key]}")]


def evaluate(tree: Any, settings: dict) -> Any:
    """The plain data of a tree under these settings (a When that fails is left out)."""
    if isinstance(tree, Pairs):
        raise TypeError("Pairs stands only in a list")
    if isinstance(tree, Node):
        return tree.evaluate(settings)
    if isinstance(tree, dict):
        out = {}
        for key, node in tree.items():
            value = evaluate(node, settings)
            if value is not ABSENT:
                out[key] = value
        return out
    if isinstance(tree, (list, tuple)):
        items: list = []
        for node in tree:
            if isinstance(node, Pairs):
                items.extend(node.evaluate(settings))
                continue
            value = evaluate(node, settings)
            if value is not ABSENT:
                items.append(value)
        return items
    return tree


def documents(trees: list, settings: dict) -> list[dict]:
    """The documents of a list of document trees (a document under a failed When is left out)."""
    return [doc for doc in (evaluate(tree, settings) for tree in trees) if doc is not ABSENT]


# --- the Helm side -------------------------------------------------------------------------------------------

def go_literal(value: Any) -> str:
    """A constant as a Go template literal (JSON's string escapes are Go's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if value is None:
        return "nil"
    if isinstance(value, str):
        return json.dumps(value)
    return f"(fromJson {json.dumps(json.dumps(value, sort_keys=True))})"


def go_expr(node: Any) -> str:
    return node.expr() if isinstance(node, (Node, Cond)) else go_literal(node)


SAFE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")


def yaml_key(key: str) -> str:
    return key if SAFE_KEY.fullmatch(key) and key.lower() not in ("y", "n", "yes", "no", "on", "off", "true",
                                                                   "false", "null") else json.dumps(key)


def inline(node: Any) -> str:
    """A scalar (or a setting of any shape) on one line: JSON, which YAML reads as it is. A constant string with
    `{{` in it (an alert's $labels, a dashboard's legend) goes through the template as a Go string."""
    if isinstance(node, Node):
        return "{{ toJson (" + node.expr() + ") }}"
    if isinstance(node, str) and ("{{" in node or "}}" in node):
        return "{{ toJson " + json.dumps(node) + " }}"
    return json.dumps(node)


def is_block(node: Any) -> bool:
    return isinstance(node, (dict, list, tuple)) and len(node) > 0


def block(node: Any, indent: int) -> list[str]:
    """The lines of a dict or list at this indent."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, When):
                lines.append(f"{pad}{{{{- if {value.cond.expr()} }}}}")
                lines.extend(entry(f"{pad}{yaml_key(key)}:", value.node, indent))
                lines.append(f"{pad}{{{{- end }}}}")
            else:
                lines.extend(entry(f"{pad}{yaml_key(key)}:", value, indent))
        return lines
    for item in node:
        if isinstance(item, Pairs):
            lines.append(f"{pad}{{{{- range $key, $value := {item.value.expr()} }}}}")
            lines.append(f"{pad}- {json.dumps(item.flag)}")
            lines.append(f'{pad}- {{{{ printf "%s=%v" $key $value | toJson }}}}')
            lines.append(f"{pad}{{{{- end }}}}")
        elif isinstance(item, When):
            lines.append(f"{pad}{{{{- if {item.cond.expr()} }}}}")
            lines.extend(list_item(item.node, indent))
            lines.append(f"{pad}{{{{- end }}}}")
        else:
            lines.extend(list_item(item, indent))
    return lines


def entry(head: str, value: Any, indent: int) -> list[str]:
    if is_block(value):
        return [head, *block(value, indent + 2)]
    return [f"{head} {inline(value)}"]


def list_item(item: Any, indent: int) -> list[str]:
    pad = " " * indent
    if not is_block(item):
        return [f"{pad}- {inline(item)}"]
    inner = block(item, indent + 2)
    if inner[0].lstrip().startswith("{{"):
        return [f"{pad}-", *inner]
    return [f"{pad}- {inner[0][indent + 2:]}", *inner[1:]]


def helm_template(trees: list, preamble: str = "") -> str:
    """The documents as a Helm template: each a `---` document, those under a When inside `if`/`end`."""
    lines = [preamble.rstrip("\n")] if preamble else []
    for tree in trees:
        if isinstance(tree, When):
            lines.append(f"{{{{- if {tree.cond.expr()} }}}}")
            lines.append("---")
            lines.extend(block(tree.node, 0))
            lines.append("{{- end }}")
        else:
            lines.append("---")
            lines.extend(block(tree, 0))
    return "\n".join(lines) + "\n"
