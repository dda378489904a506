"""shmguard.options: the job options, and the arrows that leave them."""

from __future__ import annotations

import ast

from tests.support.paths import CHECKOUT

PACKAGE = CHECKOUT / "shmguard"
# The modules that declare or dispatch commands: the only ones that may import one.
COMMAND_SIDE = {"cli.py", "corecli.py", "__init__.py"}


def imported(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_module_below_the_commands_imports_one():
    """Issue 40: options.py imported commands/measure.py (an arrow that climbed back up); the measuring is now
    shmguard.measuring, below the options."""
    climbing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "commands" or (len(relative.parts) == 1 and relative.name in COMMAND_SIDE):
            continue
        if any(name == "shmguard.commands" or name.startswith("shmguard.commands.") for name in imported(path)):
            climbing.append(str(relative))
    assert climbing == []
    assert "shmguard.measuring.measure" in imported(PACKAGE / "options.py")
