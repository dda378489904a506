"""Reading and writing manifests as YAML: strict, bounded loading and alias-free dumping.

The loader is the safe one (C if available) that also refuses duplicate keys, as
kubectl does; inputs are bounded in size, nesting and alias expansion before
anything else sees them.
"""

from __future__ import annotations

from shmguard.manifests.templates import ManifestError

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a manifest larger than this is refused before parsing
MAX_NESTING = 500  # libyaml's C parser overflows its stack (a segfault) on nesting in the tens of thousands
MAX_EXPANDED_NODES = 1_000_000  # aliases expanded; bounds what re-emitting the YAML could produce ("billion laughs")


def strict_loader():
    """The safe loader (C if available) that also refuses duplicate keys, as kubectl does."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return Loader


def expanded_nodes(value, limit: int) -> int:
    """How many nodes the value has once aliases are expanded (stops counting past limit)."""
    sizes: dict[int, int] = {}
    stack = [(value, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if id(node) in sizes and not done:
            continue
        children = list(node.values()) + list(node.keys()) if isinstance(node, dict) else node
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if isinstance(child, (dict, list)) and id(child) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(child), 1) for child in children)
        sizes[id(node)] = min(total, limit + 1)
    return sizes.get(id(value), 1) if isinstance(value, (dict, list)) else 1


def too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether flow collections ([ {) nest, or block lines indent, deeper than limit: checked before parsing.

    Brackets inside a quoted scalar are skipped, quotes are followed within a line only; a
    multi-line quoted scalar with brackets may be over-counted, which errs on the side of refusing.
    """
    depth = 0
    for line in text.splitlines():
        if len(line) - len(line.lstrip(" ")) > 2 * limit:
            return True
        quote = ""
        for ch in line:
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "\"'":
                quote = ch
            elif ch in "[{":
                depth += 1
                if depth > limit:
                    return True
            elif ch in "]}":
                depth = max(0, depth - 1)
    return False


def load(text: str, source: str) -> list:
    import yaml

    if len(text) > MAX_INPUT_BYTES:
        raise ManifestError(f"{source}: more than the {MAX_INPUT_BYTES // 2**20} MiB shmguard patch reads; "
                            f"split the manifest")
    if too_deep(text):
        raise ManifestError(f"{source}: nested too deeply to be a manifest (more than {MAX_NESTING} levels)")
    try:
        docs = list(yaml.load_all(text, Loader=strict_loader()))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(f"{source}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise ManifestError(f"{source}: nested too deeply to be a manifest") from None
    for index, doc in enumerate(docs):
        if expanded_nodes(doc, MAX_EXPANDED_NODES) > MAX_EXPANDED_NODES:
            raise ManifestError(f"document {index + 1} of {source}: its aliases expand to more than "
                                f"{MAX_EXPANDED_NODES:,} nodes (an alias bomb?); refusing it")
    return docs


def dump(documents: list) -> str:
    """YAML without anchors and aliases (kubectl and humans read them poorly), keys in the order given."""
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        def ignore_aliases(self, data) -> bool:
            return True

    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, default_flow_style=False)
