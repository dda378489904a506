"""The CLI skeleton: version, help, bad usage, and `python -m shmguard`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shmguard import __version__, main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"shmguard, version {__version__}"


def test_help_names_the_problem(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: shmguard" in out
    assert "/dev/shm" in out


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert "No such command" in err
    assert "Traceback" not in err


def test_python_dash_m_works():
    proc = subprocess.run([sys.executable, "-m", "shmguard", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert __version__ in proc.stdout


def test_console_script_is_installed():
    proc = subprocess.run(["shmguard", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: shmguard" in proc.stdout


def test_the_cli_takes_its_choice_lists_from_the_modules_that_decide_them():
    """Issue 39.2: kinds, launchers, platforms and sharing strategies were spelled again in the cli."""
    import click

    from shmguard import fixes, job, slurm
    from shmguard.commands import explain, measure
    from shmguard.commands import render as render_command
    from shmguard.manifests import render

    def choices(command, name):
        param = next(p for p in command.params if p.name == name)
        assert isinstance(param.type, click.Choice)
        return tuple(param.type.choices)

    renders = render_command.command()
    assert choices(renders.commands["k8s"], "kind") == render.KINDS
    assert choices(renders.commands["slurm"], "launcher") == slurm.LAUNCHERS
    assert choices(explain.command(), "platform") == fixes.SPELLED_FOR
    assert choices(measure.command(), "sharing_strategy") == job.SHARING_STRATEGIES


def test_each_command_names_the_extra_it_needs():
    """Without click, `shmguard X` names X's own extra (it said [all] or [run], [k8s] for every command, and
    `exporter` needs neither of those two). Held to pyproject.toml's optional-dependencies and to cli.COMMANDS."""
    import tomllib

    import shmguard
    from shmguard.cli import COMMANDS
    from tests.support.paths import CHECKOUT

    extras = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(shmguard.EXTRAS) == set(COMMANDS) - {"check", "health"}
    for command, extra in shmguard.EXTRAS.items():
        assert any(d.startswith("click") for d in extras[extra]), (command, extra)
    for command in ("run", "measure", "tune", "explain", "exporter", "top"):  # they talk to the engine
        assert any(d.startswith("docker") for d in extras[shmguard.EXTRAS[command]]), command
    assert any(d.startswith("pyyaml") for d in extras[shmguard.EXTRAS["patch"]])


@pytest.mark.parametrize(("argv", "line"), [
    (["exporter", "--once"], "`shmguard exporter` needs an extra: pip install 'shmguard[exporter]' (or 'shmguard[all]')"),
    (["patch", "x.yaml"], "`shmguard patch` needs an extra: pip install 'shmguard[k8s]'"),
    (["frobnicate"], "no command 'frobnicate'"),
])
def test_without_click_the_line_names_the_extra(monkeypatch, capsys, argv, line):
    import shmguard

    monkeypatch.setitem(sys.modules, "click", None)  # `import click` raises ImportError
    assert shmguard.main(argv) == 2
    err = capsys.readouterr().err
    assert line in err and err.count("\n") == 1


@pytest.mark.parametrize(("argv", "line"), [
    (["render", "k8s", "--wokers", "4"],
     "shmguard: error: No such option '--wokers'. Did you mean '--workers'? (see shmguard render k8s --help)"),
    (["frobnicate"], "shmguard: error: No such command 'frobnicate'. (see shmguard --help)"),
])
def test_a_click_usage_error_is_one_line(capsys, argv, line):
    """click's own usage errors took three lines (Usage, Try, Error); every other bad input is one."""
    assert main(argv) == 2
    assert capsys.readouterr().err == line + "\n"
