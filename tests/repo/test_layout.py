"""The test tree's two rules, kept true: tests/unit/ mirrors shmguard/, and no test module imports another.

- Mirror: every package of shmguard/ has its folder under tests/unit/ and every folder there is a package of
  shmguard/; every test module is named `test_<module>.py` or `test_<module>_<aspect>.py` after a module of the
  package its folder mirrors (`test_init…` for the package's __init__.py). Where a module's tests are is then
  never a question, and a renamed module shows which tests to rename.
- No test module imports another (benchmarks included): what several share lives in tests/support/, so renaming
  or moving a test breaks nothing else. Relative imports are refused too (they hide the same thing).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import CHECKOUT

ALLOWED_IN_TESTS = ("tests.support",)  # the one package of tests/ that anything may import


def package_modules(package: Path) -> set[str]:
    """The module names a test in the mirrored folder may be named after (`init` for __init__.py)."""
    return {"init" if path.stem == "__init__" else path.stem for path in package.glob("*.py")}


def mirror_problems(code: Path, tests: Path) -> list[str]:
    """What breaks the mirror between a package tree (code) and its unit tests (tests)."""
    problems = []
    packages = {p.parent.relative_to(code) for p in code.rglob("__init__.py") if "__pycache__" not in p.parts}
    folders = {p.relative_to(tests) for p in [tests, *tests.rglob("*")] if p.is_dir() and "__pycache__" not in p.parts
               and p.name != "__pycache__"}
    for missing in sorted(packages - folders):
        problems.append(f"shmguard/{missing}/ has no tests/unit/{missing}/")
    for extra in sorted(folders - packages):
        problems.append(f"tests/unit/{extra}/ mirrors no package of shmguard/")
    for folder in sorted(folders & packages):
        modules = package_modules(code / folder)
        for path in sorted((tests / folder).iterdir()):
            if path.is_dir() or path.name in ("__init__.py", "conftest.py") or path.suffix != ".py":
                continue
            stem = path.stem
            if not stem.startswith("test_"):
                problems.append(f"tests/unit/{folder / path.name}: only test modules (and conftest.py) live here; "
                                f"shared helpers go to tests/support/")
                continue
            name = stem[len("test_"):]
            if not any(name == module or name.startswith(module + "_") for module in modules):
                problems.append(f"tests/unit/{folder / path.name}: names no module of shmguard/{folder}/ "
                                f"(test_<module>.py or test_<module>_<aspect>.py)")
    return problems


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file; a relative import as its dots."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.module == "tests" or (node.module or "").startswith("tests."):
                # `from tests.x import y` may import the module tests.x.y: count each name as a module
                out.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
            else:
                out.append((node.lineno, node.module or ""))
    return out


def import_problems(checkout: Path, folders=("tests", "benchmarks")) -> list[str]:
    """Imports of one test module by another, or by a benchmark: anything of tests/ but tests.support."""
    problems = []
    for folder in folders:
        for path in sorted((checkout / folder).rglob("*.py")):
            if "__pycache__" in path.parts or path.is_relative_to(checkout / "tests" / "data"):
                continue  # tests/data holds fixture data and the scripts that captured it
            for line, module in imported_modules(path):
                where = f"{path.relative_to(checkout)}:{line}"
                if module.startswith("."):
                    problems.append(f"{where}: relative import {module!r} (import from tests.support instead)")
                elif (module == "tests" or module.startswith("tests.")) and not module.startswith(ALLOWED_IN_TESTS):
                    problems.append(f"{where}: imports {module}: move what it shares into tests/support/")
    return problems


def test_every_module_says_what_it_is_for():
    """A module's docstring is what docs/design/modules.md lists (scripts/gen_docs.py): none may be missing."""
    missing = [str(path.relative_to(CHECKOUT)) for path in sorted((CHECKOUT / "shmguard").rglob("*.py"))
               if "__pycache__" not in path.parts and not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert missing == []


def test_tests_unit_mirrors_the_package():
    assert mirror_problems(CHECKOUT / "shmguard", CHECKOUT / "tests" / "unit") == []


def test_no_test_module_imports_another():
    assert import_problems(CHECKOUT) == []


def test_the_rules_find_what_breaks_them(tmp_path):
    """Each rule, broken on purpose in a small tree, names what broke it."""
    code, tests = tmp_path / "pkg", tmp_path / "tests" / "unit"
    for folder in (code, code / "sub", code / "other", tests, tests / "sub", tests / "stray"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (code / "model.py").write_text("")
    (code / "sub" / "reader.py").write_text("")
    (tests / "test_model_properties.py").write_text("")
    (tests / "test_init.py").write_text("")
    (tests / "test_nothing.py").write_text("")
    (tests / "helpers.py").write_text("")
    (tests / "sub" / "test_reader.py").write_text("from tests.unit.test_model_properties import x\nfrom . import y\n")
    (tests / "sub" / "conftest.py").write_text("from tests.support.paths import DATA\n")
    assert sorted(mirror_problems(code, tests)) == sorted([
        "shmguard/other/ has no tests/unit/other/",
        "tests/unit/stray/ mirrors no package of shmguard/",
        "tests/unit/test_nothing.py: names no module of shmguard/./ (test_<module>.py or test_<module>_<aspect>.py)",
        "tests/unit/helpers.py: only test modules (and conftest.py) live here; shared helpers go to tests/support/",
    ])
    assert import_problems(tmp_path, folders=("tests",)) == [
        "tests/unit/sub/test_reader.py:1: imports tests.unit.test_model_properties.x: move what it shares into "
        "tests/support/",
        "tests/unit/sub/test_reader.py:2: relative import '.' (import from tests.support instead)",
    ]


# Reads of /proc and /sys outside probe/ (issue 40.2: every read of the system goes through probe/, behind a root).
SYSTEM_READ = re.compile(r"""open\(f?["'](?:/proc|/sys)\b|os\.statvfs\(["'/]""")
# Files that act on the system, not read it: remount's setns opens the container's /proc/PID to enter its mount
# namespace (an fd, no text read).
ACTS_ON_THE_SYSTEM = {"shmguard/engine/remount.py"}


def direct_system_reads(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        if name.startswith("shmguard/probe/") or name in ACTS_ON_THE_SYSTEM:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SYSTEM_READ.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_the_system_is_read_through_probe():
    assert direct_system_reads(CHECKOUT / "shmguard") == [], "read it through shmguard.probe (a Root)"


def test_a_direct_read_is_found(tmp_path):
    (tmp_path / "shmguard" / "engine").mkdir(parents=True)
    (tmp_path / "shmguard" / "engine" / "x.py").write_text('with open(f"/proc/{pid}/cgroup") as f:\n    pass\n')
    assert direct_system_reads(tmp_path / "shmguard") == ['shmguard/engine/x.py:1: with open(f"/proc/{pid}/cgroup") as f:']
