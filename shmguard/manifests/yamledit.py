"""Minimal-diff edits of YAML text: change only the lines a patch had to change.

`shmguard patch` changes the loaded documents as plain dicts; re-dumping them would lose
comments, key order, quoting, flow style and anchors. Instead, the difference between
the documents before and after the patch is computed as a short list of operations
(set a scalar, add a key to a mapping, append an item to a sequence, or give a null
value a mapping or a list) and each is applied to the text at the position of its node
(shmguard.manifests.yamlio keeps them). New content follows the file: the indentation
of the siblings, sequences indented under their key or not, flow style inside flow
collections, the quoting of the scalar it replaces, the file's line ends.

An anchored node that aliases use elsewhere is edited once, at the anchor, when every use
of it gets the same change (head and workers sharing one container through `&c`/`*c`):
the comments and the aliases stay. An edit that cannot be placed safely (through an
alias to a node whose uses change differently, into a node a merge key `<<` uses, a value
with an explicit tag, a removal) makes that one document fall back to being re-dumped
whole; the result says which and why. A value that a merge key brought in is overridden
by a key written in the merging mapping.
"""

from __future__ import annotations

import bisect
import difflib
import math
import re
from typing import Any, Callable, Iterator

from shmguard.manifests import yamlio
from shmguard.manifests.delta import ADD, APPEND, REMOVE, SET, Op, diff
from shmguard.manifests.templates import where_of
from shmguard.manifests.yamlio import ALIAS, MAPPING, SCALAR, SEQUENCE, Document, Node
from shmguard.record import Record


class Fallback(Record):
    """A document (1-based) that was re-dumped whole instead of edited, and why."""

    document: int
    where: str  # "document 2 (Deployment/web)"
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: re-written whole, its comments and formatting lost, because {self.reason}"


class Edited(Record):
    """The edited text, the documents that had to be re-dumped, and the edits made: (start, end,
    replacement) in the original text, sorted and not overlapping (for unified_diff)."""

    text: str
    fallbacks: tuple[Fallback, ...]
    edits: tuple[tuple[int, int, str], ...] = ()


class PatchedText(Record):
    """What patch_text made: the new text, the patch's own words for each change, and the fallbacks."""

    text: str
    changes: tuple[str, ...]
    fallbacks: tuple[Fallback, ...]
    edits: tuple[tuple[int, int, str], ...] = ()


class _Unsafe(Exception):
    """An edit that cannot be placed in the text safely; the document is re-dumped instead."""


class _FromMerge(_Unsafe):
    """The key is not written in the mapping: a merge key (<<) brought it in."""


def _path_text(path: tuple) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "the document"


# Plain scalars written without quotes: a conservative set that cannot start an indicator,
# hold a comment, a flow indicator or a ": "; whether it still reads back as a string is
# asked of the loader's own resolver.
_PLAIN = re.compile(r"[A-Za-z0-9_/.][A-Za-z0-9_/.+=@%~-]*\Z")
_resolved: dict[str, bool] = {}


def _reads_as_string(text: str) -> bool:
    """Whether every reader takes the plain scalar for a string: PyYAML (YAML 1.1), YAML 1.2 and kubectl's."""
    known = _resolved.get(text)
    if known is None:
        import yaml

        tag = yaml.resolver.Resolver().resolve(yaml.nodes.ScalarNode, text, (True, False))
        known = _resolved[text] = tag == "tag:yaml.org,2002:str" and not yamlio.ambiguous(text)
    return known


def render_scalar(value: Any, style: str = "") -> str:
    """A scalar as YAML that reads back as the same value; style is the quoting to keep ("", "'", '"')."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value).lower()
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text  # as PyYAML: 1.0e+20
    if not isinstance(value, str):
        raise _Unsafe(f"a new value of type {type(value).__name__} has no plain YAML form")
    if style == '"':
        return _double_quoted(value)
    if style == "'" and "\n" not in value and value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    if _PLAIN.match(value) and _reads_as_string(value):
        return value
    if "\n" not in value and value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    return _double_quoted(value)


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def _double_quoted(value: str) -> str:
    """A double-quoted YAML scalar; characters YAML does not print are escaped (\\x, \\u, \\U)."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable() and ch != "\ufeff":
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _json(value: Any) -> str:
    """A value as JSON (for a JSON file): `{"name": "dshm", "emptyDir": {"medium": "Memory"}}`."""
    import json

    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise _Unsafe(f"a new value of type {type(value).__name__} has no JSON form") from None


def is_json(text: str) -> bool:
    """Whether the text is a JSON object or array (kubectl takes JSON files; a patched one must stay JSON)."""
    import json

    body = text.lstrip("\ufeff \t\r\n")
    if body[:1] not in ("{", "["):
        return False
    try:
        return isinstance(json.loads(body), (dict, list))
    except ValueError:
        return False  # YAML flow (unquoted keys, trailing commas), not JSON


def render_flow(value: Any, key_quote: str = "", value_quote: str = "") -> str:
    """A value in flow style ({a: b, c: [d]}), for insertion into a flow collection; keys and string values quoted
    as given (the document's own quoting, _Style)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{render_scalar(k, key_quote)}: {render_flow(v, key_quote, value_quote)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(render_flow(v, key_quote, value_quote) for v in value) + "]"
    return render_scalar(value, value_quote if isinstance(value, str) else "")


class _Style(Record):
    step: int  # indentation of a mapping nested in a mapping
    sequence: int  # indentation of a block sequence under its key (0: `key:\n- item`)
    item: int = 2  # where an item starts after its dash (2: `- name`, 4: `-   name`)
    key_quote: str = ""  # how keys are quoted when the document quotes every key ('"', "'"), else ""
    value_quote: str = ""  # the same for string values


def render_block(value: Any, indent: int, style: _Style) -> list[str]:
    """A mapping or a list as block YAML lines (without line ends), indented by indent spaces."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unsafe("a new key that is not a string")
            head = f"{pad}{render_scalar(key, style.key_quote)}:"
            if isinstance(item, dict) and item:
                lines.append(head)
                lines.extend(render_block(item, indent + style.step, style))
            elif isinstance(item, list) and item:
                lines.append(head)
                lines.extend(render_block(item, indent + style.sequence, style))
            else:
                lines.append(f"{head} {_inline(item, style.value_quote)}")
    elif isinstance(value, list):
        dash = "-" + " " * (style.item - 1)
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = render_block(item, indent + style.item, style)
                inner[0] = f"{pad}{dash}{inner[0][indent + style.item:]}"
                lines.extend(inner)
            else:
                lines.append(f"{pad}{dash}{_inline(item, style.value_quote)}")
    else:
        lines.append(pad + render_scalar(value))
    return lines


def _literal_block(span: str, value: Any, newline: str) -> str | None:
    """A new value for a literal block scalar (`|`, `|-`), written as one with the same header and indentation
    (an Argo resource template's manifest stays a readable block), or None when it cannot be (another header, a
    value that does not end as the header says, a first line that starts with a space)."""
    if not isinstance(value, str) or "\n" not in span:
        return None
    header, _, body = span.partition("\n")
    header = header.rstrip()
    if header not in ("|", "|-") or not value or value[0] in " \t" or (header == "|") != value.endswith("\n"):
        return None
    if value.endswith("\n\n") or any(not ch.isprintable() for ch in value.replace("\n", "").replace("\t", "")):
        return None
    first = next((line for line in body.splitlines() if line.strip()), None)
    if first is None:
        return None
    pad = first[: len(first) - len(first.lstrip(" "))]
    lines = [pad + line if line else "" for line in value.removesuffix("\n").split("\n")]
    return header + newline + newline.join(lines)


def _inline(value: Any, quote: str = "") -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return render_scalar(value, quote if isinstance(value, str) else "")


class _DocumentEditor:
    """Turns one document's operations into text edits (start, end, replacement)."""

    def __init__(self, text: str, document: Document, newline: str, file_style: Callable[[], _Style],
                 as_json: bool = False) -> None:
        self.text = text
        self.json = as_json  # a JSON file: new values are written as JSON, so that it stays JSON
        self.root = document.node
        self.newline = newline
        self.file_style = file_style
        self._style: _Style | None = None
        self.edits: list[tuple[int, int, str]] = []
        self._filled: set[int] = set()  # empty flow collections that got an entry
        self.shared: set[int] = set()  # anchored nodes edited once for all their uses (_share_anchored)

    # -- positions ---------------------------------------------------------------------------------------
    def column(self, index: int) -> int:
        return index - (self.text.rfind("\n", 0, index) + 1)

    def content_end(self, node: Node) -> int:
        """Where a node's own text ends (a block collection's end mark is at the next token, past comments)."""
        while node.kind in (MAPPING, SEQUENCE) and not node.flow and node.value:
            last = node.value[-1]
            if node.kind == MAPPING:
                key, value = last
                if value.end <= key.end:  # an empty value
                    return key.end if value.start < key.end else value.end
                node = value
            else:
                node = last
        return node.end

    def line_after(self, index: int) -> tuple[int, str]:
        """Where a new line goes after the line holding index, and what must come before it."""
        text = self.text
        if index > 0 and text[index - 1] == "\n":
            return index, ""
        end = text.find("\n", index)
        if end < 0:
            return len(text), self.newline
        return end + 1, ""

    def lines_at(self, index: int, lines: list[str]) -> None:
        at, prefix = self.line_after(index)
        nl = self.newline
        body = nl.join(lines)
        self.edits.append((at, at, prefix + body + ("" if prefix else nl)))

    def style(self) -> _Style:
        if self._style is None:
            found = _find_style(self.text, self.root) if self.root is not None else (None,) * 5
            fallback = self.file_style()
            theirs: tuple[Any, ...] = (fallback.step, fallback.sequence, fallback.item, fallback.key_quote,
                                       fallback.value_quote)
            values: list[Any] = [m if m is not None else t for m, t in zip(found, theirs)]
            self._style = _Style(*values)
        return self._style

    def scalar(self, value: Any, style: str = "") -> str:
        return _json(value) if self.json else render_scalar(value, style)

    def flow(self, value: Any) -> str:
        if self.json:
            return _json(value)
        style = self.style()
        return render_flow(value, style.key_quote, style.value_quote)

    # -- finding nodes ----------------------------------------------------------------------------------
    def find(self, path: tuple, replacing: bool = False) -> tuple[Node, Node | None, Node | None, bool]:
        """(node, its parent collection, its key node, whether it is inside a flow collection); with
        replacing, the node may be an alias (replacing `*x` by a value leaves the anchor as it was)."""
        node = self.root
        assert node is not None
        parent = key_node = None
        flow = False
        for depth, step in enumerate(path):
            self._check_plain(node, path[:depth], self.shared)
            flow = flow or node.flow
            parent = node
            if node.kind == MAPPING:
                pair = self._pair(node, step, path[:depth + 1])
                key_node, node = pair
            elif node.kind == SEQUENCE and isinstance(step, int) and 0 <= step < len(node.value):
                key_node, node = None, node.value[step]
            else:
                raise _Unsafe(f"{_path_text(path[:depth + 1])} is not where the patch expects it")
        if not (replacing and node.kind == ALIAS):
            self._check_plain(node, path, self.shared)
        return node, parent, key_node, flow or node.flow

    @staticmethod
    def _check_plain(node: Node, path: tuple, shared: set[int] | frozenset = frozenset()) -> None:
        if node.kind == ALIAS:
            raise _Unsafe(f"the change at {_path_text(path)} goes through the alias *{node.value.anchor}")
        if node.aliased and id(node) not in shared:
            raise _Unsafe(f"{_path_text(path)} is anchored (&{node.anchor}) and used through an alias elsewhere, "
                          f"so a change to it would change them all")

    @staticmethod
    def _pair(node: Node, key: Any, path: tuple) -> tuple[Node, Node]:
        if not isinstance(key, str):
            raise _Unsafe(f"{_path_text(path)} has a key that is not a string")
        for key_node, value_node in node.value:
            target = key_node.value if key_node.kind == ALIAS else key_node
            if target.kind == SCALAR and target.data == key and isinstance(target.data, str):
                return key_node, value_node
        if node.merged:
            raise _FromMerge(f"{_path_text(path)} comes from a merge key (<<) source")
        raise _Unsafe(f"{_path_text(path)} was not found in the text")

    # -- operations --------------------------------------------------------------------------------------
    def apply(self, op: Op) -> None:
        if op.kind == REMOVE:
            raise _Unsafe(f"the patch removed {_path_text(op.path)}")
        if op.kind == SET:
            self.set_value(op.path, op.value)
        elif op.kind == ADD:
            self.add_key(op.path, op.key, op.value)
        elif op.kind == APPEND:
            self.append_item(op.path, op.value)

    def set_value(self, path: tuple, value: Any) -> None:
        if not path:
            raise _Unsafe("the patch replaced the whole document")
        try:
            node, parent, key_node, flow = self.find(path, replacing=True)
        except _FromMerge:
            self.find(path[:-1])  # the mapping itself must be safe to edit
            if not isinstance(path[-1], str):
                raise
            # A key written in the mapping overrides the merged one: the merge source stays as it is.
            self.add_key(path[:-1], path[-1], value)
            return
        if node.kind == ALIAS and not isinstance(value, (dict, list)):
            self.edits.append((node.start, node.end, self.scalar(value)))
            return
        if node.kind == ALIAS and value and not flow and parent is not None and parent.kind == MAPPING and key_node is not None:
            # `key: *c` whose use changes differently from the anchor's others: this use is written out in full
            # under its key (the anchor and its other aliases stay as they are).
            if self.text.find("\n", key_node.end, node.start) >= 0:
                raise _Unsafe(f"the alias at {_path_text(path)} is not on its key's line")
            start = node.start
            while start > key_node.end and self.text[start - 1] in " \t":
                start -= 1
            self.edits.append((start, node.end, ""))
            style = self.style()
            indent = self.column(key_node.start) + (style.step if isinstance(value, dict) else style.sequence)
            self.lines_at(node.end, render_block(value, indent, style))
            return
        if node.kind != SCALAR:
            raise _Unsafe(f"the patch replaced the {node.kind} at {_path_text(path)}")
        if node.tagged or node.anchor is not None:
            raise _Unsafe(f"{_path_text(path)} has a tag or an anchor")
        if node.style in ("|", ">"):
            if isinstance(value, (dict, list)):
                raise _Unsafe(f"the patch turned the block scalar at {_path_text(path)} into a {type(value).__name__}")
            # A block scalar's span runs to the start of the next line, blank lines included: keep those.
            span = self.text[node.start:node.end]
            end = node.start + len(span.rstrip())
            literal = _literal_block(span, value, self.newline) if node.style == "|" else None
            self.edits.append((node.start, end, literal if literal is not None else render_scalar(value)))
            return
        empty = node.start == node.end
        lead = " " if empty and self.text[node.start - 1:node.start] not in (" ", "\t") else ""
        if not isinstance(value, (dict, list)):
            self.edits.append((node.start, node.end, lead + self.scalar(value, node.style)))
            return
        if node.data is not None:
            raise _Unsafe(f"the patch turned the scalar at {_path_text(path)} into a {type(value).__name__}")
        if flow or not value:
            self.edits.append((node.start, node.end, lead + (self.flow(value) if flow else _inline(value))))
            return
        if parent is None or parent.kind != MAPPING or key_node is None:
            raise _Unsafe(f"the null at {_path_text(path)} is not the value of a key in a block mapping")
        # `key:` or `key: null` gets its block below the key's line.
        if not empty:  # `key: null  # c` becomes `key:  # c`
            start = node.start
            while start > key_node.end and self.text[start - 1] in " \t":
                start -= 1
            self.edits.append((start, node.end, ""))
        indent = self.column(key_node.start)
        style = self.style()
        indent += style.step if isinstance(value, dict) else style.sequence
        self.lines_at(node.end, render_block(value, indent, style))

    def add_key(self, path: tuple, key: Any, value: Any) -> None:
        node, _parent, _key, flow = self.find(path)
        if node.kind != MAPPING:
            raise _Unsafe(f"the patch added a key to {_path_text(path)}, which is not a mapping in the text")
        if not isinstance(key, str):
            raise _Unsafe(f"the patch added a key that is not a string to {_path_text(path)}")
        if flow:
            entry = f"{_json(key) if self.json else render_scalar(key, self.style().key_quote)}: {self.flow(value)}"
            self._flow_insert(node, entry, "{", path)
            return
        indent = self.column(node.value[0][0].start)
        head = f"{' ' * indent}{render_scalar(key, self.style().key_quote)}:"
        if isinstance(value, (dict, list)) and value:
            style = self.style()
            lines = [head, *render_block(value, indent + (style.step if isinstance(value, dict) else style.sequence),
                                         style)]
        else:
            lines = [f"{head} {_inline(value, self.style().value_quote)}"]
        self.lines_at(self.content_end(node), lines)

    def append_item(self, path: tuple, value: Any) -> None:
        node, _parent, _key, flow = self.find(path)
        if node.kind != SEQUENCE:
            raise _Unsafe(f"the patch appended to {_path_text(path)}, which is not a list in the text")
        if flow:
            self._flow_insert(node, self.flow(value), "[", path)
            return
        first = node.value[0]
        at = self.text.rfind("-", node.start, first.start)  # the first dash (the node starts at its anchor or tag)
        if at < 0:
            raise _Unsafe(f"the list at {_path_text(path)} could not be found in the text")
        dash = self.column(at)
        offset = first.start - at if self.text.find("\n", at, first.start) < 0 else self.style().item
        offset = max(offset, 2)
        if isinstance(value, (dict, list)) and value:
            lines = render_block(value, dash + offset, self.style())
            lines[0] = " " * dash + "-" + " " * (offset - 1) + lines[0][dash + offset:]
        else:
            lines = [" " * dash + "-" + " " * (offset - 1) + _inline(value, self.style().value_quote)]
        self.lines_at(self.content_end(node), lines)

    def _flow_insert(self, node: Node, entry: str, opener: str, path: tuple) -> None:
        if node.value:
            last = node.value[-1]
            end = max(last[0].end, last[1].end) if node.kind == MAPPING else last.end
            self.edits.append((end, end, ", " + entry))
        elif self.text[node.start:node.start + 1] == opener:  # empty: the first entry has no comma before it
            first = id(node) not in self._filled
            self._filled.add(id(node))
            self.edits.append((node.start + 1, node.start + 1, entry if first else ", " + entry))
        else:
            raise _Unsafe(f"the flow collection at {_path_text(path)} could not be found in the text")


def _anchor_uses(root: Node) -> tuple[dict[int, list[tuple]], dict[int, tuple], set[int]]:
    """Where each anchored node that aliases use appears: (node id -> every path it has in the data, its own
    first), the path of its definition, and the anchored nodes a merge key (<<) uses.

    The data paths include those reached through another alias (an anchor nested in an anchored node,
    `container: &c {volumeMounts: &m [...]}`, is used wherever *c is, as well as wherever *m is) and through a
    merge key: a mapping that merges `<<: *t` uses t, and what t holds under the keys it does not write itself."""
    uses: dict[int, list[tuple]] = {}
    definitions: dict[int, tuple] = {}
    merged: set[int] = set()
    # (node, its path in the data, whether it is written there (not reached through an alias), counted already,
    # the keys not to follow (written in the mapping that merges it))
    stack: list[tuple[Node, tuple, bool, bool, frozenset]] = [(root, (), True, False, frozenset())]
    while stack:
        node, path, written, counted, skip = stack.pop()
        if node.kind == ALIAS:
            uses.setdefault(id(node.value), []).append(path)
            stack.append((node.value, path, False, True, skip))  # what the alias brings in, nested anchors too
            continue
        if node.aliased and not counted:
            uses.setdefault(id(node), []).append(path)
        if node.aliased and written:
            definitions[id(node)] = path
        if node.kind == MAPPING:
            own = frozenset(_key_data(k) for k, _v in node.value if _key_data(k) is not yamlio._MERGE_KEY)
            for key, value in node.value:
                data = _key_data(key)
                if key.kind == SCALAR and data is yamlio._MERGE_KEY:
                    for source in value.value if value.kind == SEQUENCE else [value]:
                        target = source.value if source.kind == ALIAS else source
                        merged.add(id(target))
                        if target.aliased:
                            uses.setdefault(id(target), []).append(path)
                        stack.append((target, path, False, True, own | skip))
                    continue
                if data in skip:
                    continue
                stack.append((value, path + (data,), written, False, frozenset()))
        elif node.kind == SEQUENCE:
            stack.extend((item, path + (index,), written, False, frozenset()) for index, item in enumerate(node.value))
    for key, paths in uses.items():  # the definition first, each path once
        unique = list(dict.fromkeys(paths))
        if key in definitions and definitions[key] in unique:
            unique.remove(definitions[key])
            unique.insert(0, definitions[key])
        uses[key] = unique
    return uses, definitions, merged


def _key_data(key: Node):
    return key.value.data if key.kind == ALIAS else key.data


def _child(node: Node, step) -> tuple[Node | None, Node | None]:
    """The value of key (or item) step in a collection node as the data sees it, and the anchored merge source
    it comes from when a merge key (<<) brings it in (the first source that has it, as YAML merges)."""
    if node.kind == SEQUENCE:
        return (node.value[step], None) if isinstance(step, int) and 0 <= step < len(node.value) else (None, None)
    if node.kind != MAPPING:
        return None, None
    for key, value in node.value:
        if _key_data(key) == step and _key_data(key) is not yamlio._MERGE_KEY:
            return value, None
    for key, value in node.value:
        if key.kind == SCALAR and key.data is yamlio._MERGE_KEY:
            for source in value.value if value.kind == SEQUENCE else [value]:
                target = source.value if source.kind == ALIAS else source
                found, through = _child(target, step)
                if found is not None:
                    return found, through or target
    return None, None


def _through_anchor(root: Node, container: tuple) -> tuple[Node, tuple] | None:
    """The innermost anchored node (with aliases or merge keys using it) a change to the collection at
    `container` goes through, and the path of that use; None when it goes through none. Editing that node once,
    at its definition, changes every place it appears (see _anchor_uses)."""
    found: tuple[Node, tuple] | None = None
    node = root
    for depth in range(len(container) + 1):
        if node.kind == ALIAS:
            node = node.value
        if node.aliased:
            found = (node, container[:depth])
        if depth == len(container):
            break
        child, source = _child(node, container[depth])
        if child is None:
            return found  # not in the text: the editor says so
        if source is not None and source.aliased:
            found = (source, container[:depth])  # the merge source holds it: a change goes through it
        node = child
    return found


def _share_anchored(root: Node, ops: list[Op], strict: bool = True, after: Any = None) -> tuple[list[Op], set[int]]:
    """The operations with those that go through an anchored node folded into one edit at its definition, when
    the uses of it that change (the definition, each alias, each mapping that merges it) all get the same change;
    and the nodes the folded edits may pass through (the anchored node, and any anchored node its definition sits
    in). strict: every use must get that change (else _Unsafe); not strict, uses that do not change are let be,
    for the caller to check the result (a merge key's user that writes the key itself)."""
    if not any(True for _ in _aliased_nodes(root)):
        return ops, set()
    uses, definitions, merged = _anchor_uses(root)
    out: list[Op | tuple[int]] = []
    per_use: dict[int, dict[tuple, list[Op]]] = {}
    anchors: dict[int, Node] = {}
    for op in ops:
        container = op.path[:-1] if op.kind in (SET, REMOVE) else op.path
        through = _through_anchor(root, container)
        if through is None:
            out.append(op)
            continue
        node, use = through
        if id(node) not in per_use:
            per_use[id(node)] = {}
            anchors[id(node)] = node
            out.append((id(node),))  # where its folded operations go
        relative = Op(op.kind, op.path[len(use):], op.key, op.value)
        per_use[id(node)].setdefault(use, []).append(relative)
    folded: list[Op] = []
    passable: set[int] = set()
    for item in out:
        if isinstance(item, Op):
            folded.append(item)
            continue
        target = item[0]
        node, changes = anchors[target], per_use[target]
        first = next(iter(changes.values()))
        where = _path_text(definitions.get(target, ()))
        if target not in definitions:
            raise _Unsafe(f"the anchored node &{node.anchor} is not written where the change goes")
        if any(c != first for c in changes.values()) or (strict and set(changes) != set(uses.get(target, []))):
            how = "a merge key (<<) uses it" if target in merged else "used through an alias elsewhere"
            unsafe = _Unsafe(f"{where} is anchored (&{node.anchor}) and {how}, and not every use of it gets the same "
                             f"change")
            if after is None or target in merged:
                raise unsafe
            # The anchor gets its own use's change; every other use that changes differently is written out in
            # full where its alias is (the document is read back by the caller).
            own = changes.get(definitions[target], [])
            folded += [Op(o.kind, definitions[target] + o.path, o.key, o.value) for o in own]
            for use in uses.get(target, []):
                if use != definitions[target] and changes.get(use, []) != own:
                    folded.append(Op(SET, use, None, _data_at(after, use, unsafe)))
            passable.add(target)
            passable.update(_anchored_on(root, definitions[target]))
            continue
        folded += [Op(o.kind, definitions[target] + o.path, o.key, o.value) for o in first]
        passable.add(target)
        passable.update(_anchored_on(root, definitions[target]))
    return folded, passable


def _data_at(data: Any, path: tuple, unsafe: _Unsafe) -> Any:
    for step in path:
        try:
            data = data[step]
        except (KeyError, IndexError, TypeError):
            raise unsafe from None
    return data


def _anchored_on(root: Node, path: tuple) -> set[int]:
    """The anchored nodes written on the way to path (an anchor defined inside another one's definition)."""
    out: set[int] = set()
    node = root
    for step in path:
        if node.aliased:
            out.add(id(node))
        if node.kind == MAPPING:
            node = next((v for k, v in node.value if (k.value if k.kind == ALIAS else k).data == step), node)
        elif node.kind == SEQUENCE and isinstance(step, int) and 0 <= step < len(node.value):
            node = node.value[step]
    return out


def _aliased_nodes(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.kind == ALIAS:
            yield node
        elif node.kind == MAPPING:
            stack.extend(v for pair in node.value for v in pair)
        elif node.kind == SEQUENCE:
            stack.extend(node.value)


def _find_style(text: str, root: Node, budget: int = 5000) -> tuple:
    """How this document indents and quotes: (a mapping under its key, a sequence under its key, an item after
    its dash, the quote every key is written with, the quote every string value is written with), None where it
    has no example; a quote is "" when the document writes some keys (values) plain or mixes quotes."""
    step = sequence = item = None
    keys: set[str] = set()
    values: set[str] = set()
    stack = [root]
    while stack and budget:
        budget -= 1
        node = stack.pop()
        if node.kind == SEQUENCE:
            stack.extend(node.value)
            if item is None and not node.flow and node.value and text.find("\n", node.start, node.value[0].start) < 0:
                item = node.value[0].start - node.start
            values.update(v.style for v in node.value if v.kind == SCALAR and isinstance(v.data, str) and
                          v.style in ("", "'", '"'))
        if node.kind != MAPPING:
            continue
        for key, value in node.value:
            if key.kind == SCALAR:
                keys.add(key.style)
            if value.kind == SCALAR and isinstance(value.data, str) and value.style in ("", "'", '"'):
                values.add(value.style)
            if node.flow:
                continue
            if value.kind in (MAPPING, SEQUENCE) and not value.flow and value.value:
                if text.find("\n", key.end, value.start) < 0:
                    stack.append(value)
                    continue  # `- - x` or similar: no indentation to learn
                key_col = key.start - (text.rfind("\n", 0, key.start) + 1)
                col = value.start - (text.rfind("\n", 0, value.start) + 1)
                if value.kind == MAPPING and step is None and col > key_col:
                    step = col - key_col
                elif value.kind == SEQUENCE and sequence is None and col >= key_col:
                    sequence = col - key_col
                stack.append(value)
            elif value.kind in (MAPPING, SEQUENCE):
                stack.append(value)
    key_quote = (next(iter(keys)) if len(keys) == 1 else "") if keys else None
    value_quote = (next(iter(values)) if len(values) == 1 else "") if values else None
    return step, sequence, item, key_quote, value_quote


def edit_text(text: str, documents: list[Document], before: list, after: list) -> Edited:
    """The text changed only where before and after (plain data, one per document) differ.

    documents are text's documents as yamlio.compose gave them; a document whose change
    cannot be placed in the text is re-dumped whole (see Fallback).
    """
    if len(documents) != len(before) or len(before) != len(after):
        raise ValueError("documents, before and after must have one entry per document")
    newline = "\r\n" if "\r\n" in text else "\n"
    as_json = is_json(text)
    cache: dict[str, _Style] = {}

    def file_style() -> _Style:
        if "style" not in cache:
            seen: list = [None] * 5
            for document in documents:
                if document.node is not None and None in seen:
                    found = _find_style(text, document.node)
                    seen = [mine if mine is not None else theirs for mine, theirs in zip(seen, found)]
            step, sequence, item, key_quote, value_quote = seen
            cache["style"] = _Style(step or 2, sequence if sequence is not None else 0, item or 2, key_quote or "",
                                    value_quote or "")
        return cache["style"]

    edits: list[tuple[int, int, str]] = []
    fallbacks: list[Fallback] = []
    for index, (document, old, new) in enumerate(zip(documents, before, after)):
        ops = diff(old, new)
        if not ops:
            continue
        doc_edits: list[tuple[int, int, str]]
        try:
            if document.node is None:
                raise _Unsafe("it was empty")
            try:
                doc_edits = _edit_document(text, document, ops, newline, file_style, as_json, strict=True)
            except _Unsafe as exc:
                if not any(True for _ in _aliased_nodes(document.node)):
                    raise
                # Anchors and merge keys: the changes that go through an anchored node are made once, at it, when
                # the uses that change agree; the document is then read back to check it says what it should.
                try:
                    doc_edits = _edit_document(text, document, ops, newline, file_style, as_json, strict=False,
                                               after=new)
                except _Unsafe:
                    raise exc from None
                if not _reads_back(text, document, doc_edits, new):
                    raise exc from None
        except _Unsafe as exc:
            where = where_of(index, new) if isinstance(new, dict) else f"document {index + 1}"
            fallbacks.append(Fallback(index + 1, where, str(exc)))
            doc_edits = [_redump(text, document, new, newline, as_json)]
        edits.extend(doc_edits)
    if not edits:
        return Edited(text, tuple(fallbacks))
    pieces = []
    at = 0
    for start, end, replacement in edits:
        pieces.append(text[at:start])
        pieces.append(replacement)
        at = end
    pieces.append(text[at:])
    return Edited("".join(pieces), tuple(fallbacks), tuple(edits))


def _edit_document(text: str, document: Document, ops: list[Op], newline: str, file_style, as_json: bool,
                   strict: bool, after: Any = None) -> list[tuple[int, int, str]]:
    """The text edits of one document's operations, sorted; _Unsafe when one cannot be placed safely. Not
    strict, with the data wanted (after): uses of an anchor that change differently are written out in full."""
    assert document.node is not None  # an empty document is re-dumped before this
    editor = _DocumentEditor(text, document, newline, file_style, as_json)
    ops, editor.shared = _share_anchored(document.node, ops, strict, None if strict else after)
    for op in ops:
        editor.apply(op)
    doc_edits = sorted(editor.edits, key=lambda edit: edit[0])  # stable: same place keeps op order
    for (_, end, _), (start, _, _) in zip(doc_edits, doc_edits[1:]):
        if start < end:
            raise _Unsafe("two of its changes overlap in the text")
    return doc_edits


def _reads_back(text: str, document: Document, edits: list[tuple[int, int, str]], wanted: Any) -> bool:
    """Whether the document, edited, reads back as the data wanted (checks an edit made through anchors and merge
    keys that the uses did not all ask for)."""
    pieces, at = [], document.start
    for start, end, replacement in edits:
        pieces.append(text[at:start])
        pieces.append(replacement)
        at = end
    pieces.append(text[at:document.end])
    try:
        got = yamlio.compose("".join(pieces), "the edited document")
    except Exception:  # noqa: BLE001 - any failure to read it back means the edit is not the one wanted
        return False
    return len(got) == 1 and got[0].data == wanted


def _redump(text: str, document: Document, data: Any, newline: str, as_json: bool = False) -> tuple[int, int, str]:
    """One edit that replaces the document's content (not its `---`, nor comments before or after) by a dump
    (JSON for a JSON file)."""
    if as_json:
        import json

        dumped = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    else:
        dumped = yamlio.dump([data])
    if dumped.endswith("...\n"):
        dumped = dumped[:-4]
    if newline != "\n":
        dumped = dumped.replace("\n", newline)
    node = document.node
    if node is None:  # an empty document: the dump goes at its end
        start = end = document.end
        line_start = text.rfind("\n", 0, start) + 1
        prefix = "" if not text[line_start:start].strip() else newline
        return start, end, prefix + dumped
    start = node.start
    line_start = text.rfind("\n", 0, start) + 1
    prefix = "" if not text[line_start:start].strip() else newline
    editor = _DocumentEditor(text, document, newline, lambda: _Style(2, 0))
    end, missing_line_end = editor.line_after(editor.content_end(node))
    if missing_line_end:  # the document ended the file without a line end: so does its dump
        dumped = dumped.rstrip("\r\n")
    return start, end, prefix + dumped


def patch_text(text: str, source: str, mutate: Callable[[list], list[str]]) -> PatchedText:
    """Load text, let mutate change its documents in place (returning what it changed, in words), and edit
    the text to match: the one entry point for `shmguard patch` and anything else that patches YAML text.

    A text whose lines end in CR alone (old Mac files) is edited as LF text and given back its CRs; one that
    mixes CR-only with LF line ends is refused (ManifestError): no edit could follow both."""
    bare = text.count("\r") - text.count("\r\n")
    if bare:
        if "\n" in text:
            from shmguard.manifests.templates import ManifestError

            raise ManifestError(f"{source}: mixes line ends ending in CR alone with LF ones: make them one kind "
                                f"(dos2unix, or tr '\\r' '\\n') and patch it again")
        patched = patch_text(text.replace("\r", "\n"), source, mutate)
        edits = tuple((start, end, replacement.replace("\n", "\r")) for start, end, replacement in patched.edits)
        return patched.replace(text=patched.text.replace("\n", "\r"), edits=edits)
    with yamlio.no_gc():
        documents = yamlio.compose(text, source)
        after = [document.data for document in documents]
        before = [yamlio.plain_copy(data) for data in after]
        changes = mutate(after)
        edited = edit_text(text, documents, before, after)
    return PatchedText(edited.text, tuple(changes), edited.fallbacks, edited.edits)


def unified_diff(text: str, edits: tuple[tuple[int, int, str], ...] | list, fromfile: str, tofile: str,
                 context: int = 3) -> Iterator[str]:
    """The unified diff of text and text with edits applied, made from the edits themselves: linear in the
    text, where difflib's matcher takes minutes on a manifest of 10,000 templates."""
    if not edits:
        return
    starts = [0]
    index = text.find("\n")
    while index >= 0:
        starts.append(index + 1)
        index = text.find("\n", index + 1)
    if starts[-1] == len(text) and len(starts) > 1:
        starts.pop()  # no line after the final line end
    lines = len(starts)

    def line_of(offset: int) -> int:
        return min(bisect.bisect_right(starts, offset) - 1, lines - 1) if text else 0

    def line_start(number: int) -> int:
        return starts[number] if number < lines else len(text)

    # Each edit, widened to whole lines: (first old line, end old line, [edits]); merged where they touch.
    blocks: list[list] = []
    for start, end, replacement in edits:
        first = line_of(start)
        if start == end and start == line_start(first) and replacement.endswith("\n"):
            last = first  # whole lines put before line `first`
        else:
            last = line_of(max(end - 1, start)) + 1
        if blocks and first < blocks[-1][1] or (blocks and first == blocks[-1][1] and first == last == blocks[-1][0]):
            blocks[-1][1] = max(blocks[-1][1], last)
            blocks[-1][2].append((start, end, replacement))
        else:
            blocks.append([first, last, [(start, end, replacement)]])
    # The old and new lines of each block, then hunks with `context` lines around them.
    changes: list[tuple[int, int, list[str], list[str]]] = []
    for first, last, block_edits in blocks:
        a, b = line_start(first), line_start(last)
        pieces, at = [], a
        for start, end, replacement in block_edits:
            pieces.append(text[at:start])
            pieces.append(replacement)
            at = end
        pieces.append(text[at:b])
        old_lines, new_lines = text[a:b].splitlines(keepends=True), "".join(pieces).splitlines(keepends=True)
        if old_lines and new_lines:  # a replaced stretch (a re-dumped document): the lines that differ in it
            matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
            changes.extend((first + i1, first + i2, old_lines[i1:i2], new_lines[j1:j2])
                           for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")
        else:
            changes.append((first, last, old_lines, new_lines))
    yield f"--- {fromfile}\n"
    yield f"+++ {tofile}\n"
    shift = 0  # new line number minus old line number before the current hunk
    index = 0
    while index < len(changes):
        group = [changes[index]]
        while index + 1 < len(changes) and changes[index + 1][0] - group[-1][1] <= 2 * context:
            index += 1
            group.append(changes[index])
        index += 1
        old_from = max(group[0][0] - context, 0)
        old_to = min(group[-1][1] + context, lines)
        new_from = old_from + shift
        body: list[str] = []
        at = old_from
        added = 0
        for first, last, old_lines, new_lines in group:
            body.extend(" " + _line(text, starts, n, lines) for n in range(at, first))
            body.extend("-" + line for line in old_lines)
            body.extend("+" + line for line in new_lines)
            added += len(new_lines) - len(old_lines)
            at = last
        body.extend(" " + _line(text, starts, n, lines) for n in range(at, old_to))
        new_length = old_to - old_from + added
        yield f"@@ -{_range(old_from, old_to - old_from)} +{_range(new_from, new_length)} @@\n"
        for line in body:
            yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        shift += added


def _line(text: str, starts: list[int], number: int, lines: int) -> str:
    return text[starts[number]:starts[number + 1] if number + 1 < lines else len(text)]


def _range(start: int, length: int) -> str:
    """A unified diff's line range: 1-based, the length left out when it is 1, the line before when empty."""
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"
