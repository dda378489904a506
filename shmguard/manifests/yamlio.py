"""Reading and writing manifests as YAML: strict loading, bounded while it parses, and alias-free dumping.

Loading composes the parser's events (libyaml's C parser if available) with an explicit
stack, not recursion, and builds the plain data and a light node tree with the source
position of every node at the same time (shmguard.manifests.yamledit edits the text at
those positions). Every limit acts as the events arrive, so a hostile input is refused
after at most the limit's worth of work: nesting depth, nodes per document and per input,
the size aliases expand to, and alias cycles. Duplicate keys are refused, as kubectl
does; merge keys (`<<`) are accepted, as kubectl does.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from typing import Any, Iterator

from shmguard.manifests.templates import ManifestError
from shmguard.record import Record

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a manifest larger than this is refused before parsing
# Kubernetes objects nest a few dozen levels (CRD schemas the most); the alias-free dumper
# used for a document that cannot be edited in place recurses a few frames per level.
MAX_NESTING = 200
MAX_DOCUMENT_NODES = 1_000_000  # nodes in one document, aliases expanded ("billion laughs", or just huge)
MAX_INPUT_NODES = 3_000_000  # nodes in one input, all documents together (about 1 GB of memory)

SCALAR, MAPPING, SEQUENCE, ALIAS = "scalar", "mapping", "sequence", "alias"
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"
_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "binary", "timestamp"))


class Node:
    """One node of a loaded document: where it is in the text (character offsets) and what it holds.

    kind is SCALAR, MAPPING, SEQUENCE or ALIAS; value is the scalar text, the list of
    (key node, value node) pairs as written (merge keys included), the list of item nodes,
    or the anchored node an alias refers to. data is the plain value built from it.

    Not a Record (shmguard.record), on purpose: the composer makes one per YAML node (about 420,000 for
    benchmarks/patch_scaling.py's 10,000 Deployments), and a Record's generic constructor costs about
    3.9 us against this one's 0.8 us, about a second more on that patch; nodes are also compared by
    identity (an alias is the same node), not by value.
    """

    __slots__ = ("kind", "start", "end", "style", "flow", "anchor", "tagged", "value", "data", "size", "open",
                 "aliased", "merged")

    def __init__(self, kind: str, start: int, end: int, style: str, flow: bool, anchor: str | None,
                 tagged: bool, value: Any, data: Any) -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.style = style  # scalar: "" plain, "'", '"', "|", ">"
        self.flow = flow  # collection written in flow style ({...} or [...])
        self.anchor = anchor
        self.tagged = tagged  # an explicit tag was written
        self.value = value
        self.data = data
        self.size = 1  # nodes once aliases are expanded
        self.open = False  # a collection still being composed (an alias to it would be a cycle)
        self.aliased = False  # an alias refers to this node
        self.merged = False  # a mapping with a merge key (<<)


class Document(Record, frozen=False):
    """A document of a YAML stream: its plain data, its root node (None when empty) and its span in the text.
    Mutable: the span is shifted past a byte-order mark the parser did not count (_shift)."""

    data: Any
    node: Node | None
    start: int
    end: int


def _loader_class():
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building a million small objects otherwise triggers it thousands
    of times (the data built here has no cycles to collect)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Refused(Exception):
    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


def _where(text: str, index: int | None) -> str:
    if index is None:
        return ""
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f" at line {line}, column {column}"


def compose(text: str, source: str) -> list[Document]:
    """The documents of text with their nodes; ManifestError (one line, naming source) if it is not a
    manifest shmguard can take: not YAML, too large, too deep, an alias cycle or bomb, duplicate keys."""
    import yaml

    if len(text) > MAX_INPUT_BYTES:
        raise ManifestError(f"{source}: more than the {MAX_INPUT_BYTES // 2**20} MiB shmguard patch reads; "
                            f"split the manifest")
    body = text[1:] if text.startswith("\ufeff") else text
    try:
        with no_gc():
            documents = _compose(body, yaml)
    except _Refused as exc:
        raise ManifestError(f"{source}: {exc}{_where(body, exc.index)}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(f"{source}: not valid YAML{where}: {problem}") from None
    if body is not text:
        for document in documents:
            _shift(document, 1)
    return documents


def _shift(document: Document, offset: int) -> None:
    """Move a document's positions by offset (the byte-order mark the parser did not count)."""
    document.start += offset
    document.end += offset
    seen: set[int] = set()
    stack = [document.node] if document.node is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        node.start += offset
        node.end += offset
        if node.kind == MAPPING:
            for key, value in node.value:
                stack.extend((key, value))
        elif node.kind == SEQUENCE:
            stack.extend(node.value)


def _compose(text: str, yaml) -> list[Document]:  # noqa: C901 - one loop over the events, on purpose
    from yaml import events

    loader = _loader_class()(text)
    constructors = loader.yaml_constructors
    resolve = loader.resolve
    scalar_node = yaml.nodes.ScalarNode
    resolved: dict[tuple[str, bool], str] = {}
    built: dict[tuple[str, str], Any] = {}
    documents: list[Document] = []
    stack: list[tuple[Node, list]] = []
    anchors: dict[str, Node] = {}
    input_nodes = 0
    nodes = expanded = 0
    doc_start = 0
    root: Node | None = None
    ScalarEvent, AliasEvent = events.ScalarEvent, events.AliasEvent
    MappingStartEvent, SequenceStartEvent = events.MappingStartEvent, events.SequenceStartEvent
    MappingEndEvent, SequenceEndEvent = events.MappingEndEvent, events.SequenceEndEvent
    DocumentStartEvent, DocumentEndEvent = events.DocumentStartEvent, events.DocumentEndEvent
    StreamEndEvent = events.StreamEndEvent
    get_event = loader.get_event
    try:
        while True:
            event = get_event()
            cls = event.__class__
            if cls is ScalarEvent:
                tag = event.tag
                value = event.value
                if tag is None or tag == "!":
                    tagged = False
                    implicit = event.implicit[0]
                    if implicit:
                        tag = resolved.get((value, True))
                        if tag is None:
                            tag = resolved[(value, True)] = resolve(scalar_node, value, event.implicit)
                    else:
                        tag = _STR
                else:
                    tagged = True
                if tag == _STR or tag == _VALUE:
                    data = value
                elif tag == _MERGE:
                    data = _MERGE_KEY
                else:
                    try:
                        data = built[(tag, value)]
                    except KeyError:
                        if tag not in _SCALAR_TAGS:
                            raise _Refused(f"not valid YAML: could not determine a constructor for the tag {tag!r}",
                                           event.start_mark.index) from None
                        data = built[(tag, value)] = constructors[tag](loader, scalar_node(tag, value))
                node = Node(SCALAR, event.start_mark.index, event.end_mark.index, event.style or "", False,
                            event.anchor, tagged, value, data)
                nodes += 1
                expanded += 1
            elif cls is MappingStartEvent or cls is SequenceStartEvent:
                mapping = cls is MappingStartEvent
                tag = event.tag
                tagged = tag is not None and tag != "!"
                if tagged and tag != (_MAP if mapping else _SEQ):
                    raise _Refused(f"not valid YAML: could not determine a constructor for the tag {tag!r}",
                                   event.start_mark.index)
                node = Node(MAPPING if mapping else SEQUENCE, event.start_mark.index, event.end_mark.index, "",
                            bool(event.flow_style), event.anchor, tagged, [], None)
                node.open = True
                nodes += 1
                expanded += 1
                if len(stack) >= MAX_NESTING:
                    raise _Refused(f"nested too deeply to be a manifest (more than {MAX_NESTING} levels)",
                                   event.start_mark.index)
                if event.anchor is not None:
                    anchors[event.anchor] = node
                stack.append((node, node.value if not mapping else []))
                _check_budget(nodes, expanded, input_nodes, event)
                continue
            elif cls is MappingEndEvent or cls is SequenceEndEvent:
                node, children = stack.pop()
                node.end = event.end_mark.index
                node.open = False
                if node.kind == MAPPING:
                    _finish_mapping(node, children)
                else:
                    node.data = [child.data for child in children]
                    node.size = 1 + sum(child.size for child in children)
            elif cls is AliasEvent:
                target = anchors.get(event.anchor)
                if target is None:
                    raise _Refused(f"not valid YAML: found undefined alias {event.anchor!r}", event.start_mark.index)
                if target.open:
                    raise _Refused(f"the alias *{event.anchor} refers to a collection it is inside of "
                                   f"(a cycle; a manifest cannot have one)", event.start_mark.index)
                target.aliased = True
                # Each use of an anchor gets its own copy: a patch that changes one container must not change
                # another that shares its volumeMounts through an alias, unseen (#18 item 22). The copy is
                # bounded by the expansion budget below.
                node = Node(ALIAS, event.start_mark.index, event.end_mark.index, "", False, None, False, target,
                            plain_copy(target.data))
                node.size = target.size
                nodes += 1
                expanded += target.size
            elif cls is DocumentStartEvent:
                doc_start = event.start_mark.index
                anchors = {}
                input_nodes += nodes
                nodes = expanded = 0
                root = None
                continue
            elif cls is DocumentEndEvent:
                documents.append(Document(None if root is None else root.data, _root_or_none(root),
                                          doc_start, event.end_mark.index))
                continue
            elif cls is StreamEndEvent:
                return documents
            else:
                continue
            # A finished node (scalar, alias or collection): it belongs to the collection on top of the stack.
            if event.__class__ is ScalarEvent and event.anchor is not None:
                anchors[event.anchor] = node
            if stack:
                stack[-1][1].append(node)
            else:
                root = node
            if expanded > MAX_DOCUMENT_NODES or input_nodes + nodes > MAX_INPUT_NODES:
                _check_budget(nodes, expanded, input_nodes, event)
    finally:
        loader.dispose()


_MERGE_KEY = object()  # the data of a `<<` key node


def _root_or_none(root: Node | None) -> Node | None:
    """The root node; an empty document (nothing, or comments only) has none."""
    if root is None or (root.kind == SCALAR and root.value == "" and root.style == "" and not root.tagged
                        and root.anchor is None):
        return None
    return root


def _check_budget(nodes: int, expanded: int, input_nodes: int, event) -> None:
    if expanded > MAX_DOCUMENT_NODES:
        if nodes > MAX_DOCUMENT_NODES:
            raise _Refused(f"more than {MAX_DOCUMENT_NODES:,} YAML nodes in one document, too many for a manifest; "
                           f"stopped reading", event.start_mark.index)
        raise _Refused(f"its aliases expand to more than {MAX_DOCUMENT_NODES:,} nodes (an alias bomb?); refusing it",
                       event.start_mark.index)
    if input_nodes + nodes > MAX_INPUT_NODES:
        raise _Refused(f"more than {MAX_INPUT_NODES:,} YAML nodes in one input; split the manifest (stopped reading)",
                       event.start_mark.index)


def _finish_mapping(node: Node, children: list) -> None:
    """Pair up a mapping's children and build its dict: merge keys first (the first source wins), then the
    keys written in it, which override merged ones; a key written twice is refused, as kubectl does."""
    pairs = list(zip(children[0::2], children[1::2]))
    node.value = pairs
    try:  # the common case: scalar keys, each once, no merge key
        data = {key.data: value.data for key, value in pairs}
        if len(data) == len(pairs) and _MERGE_KEY not in data:
            node.data = data
            node.size = 1 + sum(key.size + value.size for key, value in pairs)
            return
    except TypeError:
        pass
    data = {}
    size = 1
    for key, value in pairs:
        size += key.size + value.size
        if key.data is _MERGE_KEY and key.kind == SCALAR:
            node.merged = True
            sources = value.value if value.kind == SEQUENCE else [value]
            for source in sources:
                target = source.value if source.kind == ALIAS else source
                if target.kind != MAPPING:
                    raise _Refused("a merge key (<<) needs a mapping or a list of mappings", source.start)
                # source.data: an alias's own copy, so that the merged values are this mapping's, as an alias's are
                # (a mount added to a container merged in here must not appear in the anchored one unseen).
                for k, v in source.data.items():
                    data.setdefault(k, v)
    merged = set(data) if node.merged else ()
    written: set = set()
    for key, value in pairs:
        if key.data is _MERGE_KEY and key.kind == SCALAR:
            continue
        if key.kind in (MAPPING, SEQUENCE) or (key.kind == ALIAS and key.value.kind != SCALAR):
            raise _Refused("not valid YAML: a mapping or a list as a mapping key", key.start)
        k = key.data
        try:
            duplicate = k in written
        except TypeError:
            raise _Refused("not valid YAML: a mapping key that cannot be hashed", key.start) from None
        if duplicate:
            raise _Refused(f"duplicate key {k!r}", key.start)
        written.add(k)
        if k in merged:
            del data[k]  # the written key takes the merged one's place, after the merged keys
        data[k] = value.data
    node.data = data
    node.size = size


def load(text: str, source: str) -> list:
    """The plain data of every document (None for an empty one), loaded strictly and within the limits."""
    return [document.data for document in compose(text, source)]


def plain_copy(value: Any) -> Any:
    """A copy of loaded data (dicts, lists, scalars) that shares no dict or list with it, for comparing
    before and after an in-place patch. Much faster than copy.deepcopy; nesting is bounded by MAX_NESTING."""
    if isinstance(value, dict):
        return {k: plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_copy(v) for v in value]
    return value


# Plain scalars that a YAML 1.2 core-schema reader, or kubectl's YAML (go-yaml v2, YAML 1.1 with Go's number
# parsing: `1e-4`, `0o17`, `0b1`, `y`), resolves to something else than a string, where PyYAML's YAML 1.1
# resolver may not (it reads `1e-4`, `1E+3` and `0o17` as strings and so writes them unquoted).
# https://yaml.org/spec/1.2.2/#1032-tag-resolution; gopkg.in/yaml.v2 resolve.go.
OTHER_THAN_STRING = re.compile(r"""(?x)\A(?:
    ~ | null | Null | NULL
  | true | True | TRUE | false | False | FALSE
  | y | Y | yes | Yes | YES | n | N | no | No | NO | on | On | ON | off | Off | OFF
  | [-+]?[0-9][0-9_]*
  | [-+]?0o[0-7_]+ | [-+]?0x[0-9a-fA-F_]+ | [-+]?0b[01_]+
  | [-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?
  | [-+]?\.(?:inf|Inf|INF) | \.(?:nan|NaN|NAN)
)\Z""")


def ambiguous(text: str) -> bool:
    """Whether a string written plain would be read back as something else by some YAML reader on the way."""
    return text == "" or bool(OTHER_THAN_STRING.match(text))


def dump(documents: list) -> str:
    """YAML without anchors and aliases (kubectl and humans read them poorly), keys in the order given, and every
    string another reader would take for a number, a bool or null quoted (`"1e-4"`, `"0o17"`, `"y"`)."""
    import yaml

    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

    class Dumper(base):  # type: ignore[misc, valid-type]
        def ignore_aliases(self, data) -> bool:
            return True

    def represent_str(dumper, data: str):
        if ambiguous(data):
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
        return base.represent_str(dumper, data)

    Dumper.add_representer(str, represent_str)
    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, default_flow_style=False)
