"""The CLI skeleton: version, help, bad usage, and `python -m shmguard`."""

from __future__ import annotations

import subprocess
import sys

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
