"""The JSON Patch (RFC 6902) that turns one JSON document into another: jsonpatch's diff, minus the equal parts.

jsonpatch.make_patch walks both documents in Python, node by node; a Pod at
admission is mostly metadata and managedFields the sizing never touches. Here
mappings are walked key by key and subtrees that compare equal (a C-speed `==`)
are skipped; lists whose items changed in place or grew at the end are walked by
index; any other list change is diffed by jsonpatch itself (index-aware adds and
removes) with its paths put under the list's pointer.
Applying the result to the original gives the other document exactly, with one
limit: values Python holds equal inside an equal subtree (1, 1.0 and True) count
as equal; sizing never turns one into another.
"""

from __future__ import annotations


def pointer_token(key: str) -> str:
    """A mapping key as one JSON Pointer token (RFC 6901: ~ as ~0, / as ~1)."""
    return str(key).replace("~", "~0").replace("/", "~1")


def make_patch(original, mutated, path: str = "") -> list[dict]:
    """The operations that turn original into mutated."""
    if isinstance(original, dict) and isinstance(mutated, dict):
        operations: list[dict] = []
        for key in original:
            if key not in mutated:
                operations.append({"op": "remove", "path": f"{path}/{pointer_token(key)}"})
        for key, value in mutated.items():
            if key not in original:
                operations.append({"op": "add", "path": f"{path}/{pointer_token(key)}", "value": value})
            elif original[key] != value or type(original[key]) is not type(value):
                operations.extend(make_patch(original[key], value, f"{path}/{pointer_token(key)}"))
        return operations
    if isinstance(original, list) and isinstance(mutated, list):
        common = min(len(original), len(mutated))
        if mutated[:common] == original[:common] or len(original) == len(mutated):
            # Items changed in place and/or added at the end (what sizing does): walk them by index.
            operations = []
            for index in range(common):
                if original[index] != mutated[index] or type(original[index]) is not type(mutated[index]):
                    operations.extend(make_patch(original[index], mutated[index], f"{path}/{index}"))
            for index in range(len(original) - 1, common - 1, -1):
                operations.append({"op": "remove", "path": f"{path}/{index}"})
            for index in range(common, len(mutated)):
                operations.append({"op": "add", "path": f"{path}/{index}", "value": mutated[index]})
            return operations
        import jsonpatch  # items inserted or removed in between: jsonpatch's index-aware diff

        operations = jsonpatch.make_patch(original, mutated).patch
        for operation in operations:
            operation["path"] = path + operation["path"]
            if "from" in operation:
                operation["from"] = path + operation["from"]
        return operations
    return [{"op": "replace", "path": path, "value": mutated}]
