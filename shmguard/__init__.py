"""shmguard: make containerised PyTorch training start right the first time.

A multi-worker DataLoader moves every batch through /dev/shm; containers give it
64 MB (Docker) or no way to size it (Kubernetes). shmguard checks, sizes and
launches training containers so they do not die of a Bus error.

`main` lives here, in the module every entry point imports anyway, so that
`shmguard health` (which runs every few seconds in every training container) is
dispatched before click or anything heavy is imported, with no module to spare.

The Python API (check_loader, guard, recommend_workers, ShmTooSmall, ...) is
exposed lazily through the module's __getattr__: `import shmguard` loads nothing
more, and the first use of a name imports the package that holds it (shmguard/api/).
"""

import sys

__version__ = "0.1.0"
__all__ = ["check_loader", "guard", "recommend_workers", "GuardedLoader", "ShmguardError", "ShmTooSmall",
           "ShmguardWarning", "main", "launch", "__version__"]

# Name -> the module that defines it, imported on first use.
_LAZY = {
    "check_loader": "shmguard.api",
    "guard": "shmguard.api",
    "recommend_workers": "shmguard.api",
    "GuardedLoader": "shmguard.api",
    "ShmguardError": "shmguard.errors",
    "ShmTooSmall": "shmguard.errors",
    "ShmguardWarning": "shmguard.errors",
}

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (health must not); type checkers read it so
if TYPE_CHECKING:
    from shmguard.api import GuardedLoader, check_loader, guard, recommend_workers
    from shmguard.errors import ShmguardError, ShmguardWarning, ShmTooSmall


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shmguard' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))


# The extra (pyproject.toml's optional-dependencies) each click command needs, for the one line that says so when
# it is missing (tests/unit/test_cli.py holds it to pyproject.toml and to cli.COMMANDS).
EXTRAS = {"run": "run", "measure": "run", "tune": "run", "explain": "run", "clean": "run",
          "render": "k8s", "patch": "k8s", "fn": "k8s", "exporter": "exporter", "top": "exporter",
          "webhook": "webhook"}


def main(argv=None) -> int:
    """The `shmguard` command: `health` on the standard library alone, everything else through click."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "health":
        from shmguard.commands.health import main as health_main

        return health_main(args[1:])
    if args and args[0] == "check":
        from shmguard.corecli import check_main

        return check_main(args[1:])
    try:
        import click  # noqa: F401  (every other command is a click command)
    except ImportError:
        if not args or args[0] in ("-h", "--help", "-V", "--version"):
            sys.stdout.write(f"shmguard {__version__}: with no extras installed, the commands are "
                             f"`shmguard health` and `shmguard check` (each takes --help); "
                             f"pip install 'shmguard[all]' for run, render, patch, measure, tune\n")
            return 0
        extra = EXTRAS.get(args[0])
        if extra is None:
            sys.stderr.write(f"shmguard: error: no command {args[0]!r}: with no extras installed, the commands are "
                             f"`shmguard health` and `shmguard check`; pip install 'shmguard[all]' for the others\n")
        else:
            sys.stderr.write(f"shmguard: error: `shmguard {args[0]}` needs an extra: pip install 'shmguard[{extra}]' "
                             f"(or 'shmguard[all]')\n")
        return 2
    from shmguard.cli import main as cli_main

    return cli_main(args)


def launch() -> None:
    """The `shmguard` command. bin/shmguard is hand-written (pip's generated script imports `re`) and does nothing
    else but call this, because a script is compiled at every run and a module once (even its comments are
    tokenized each time), and the healthcheck runs every few seconds (BENCHMARKS.md section 10.2). Before that
    it takes its own folder off sys.path, as `python -P` would: Python put it first, nothing of shmguard's is there
    (a venv's bin/), and looking for the package in it cost every run a listing of it and six stats, since it holds
    the launcher, named like the package.

    For `health`, no collection while its modules load (each import allocates enough to set one off, and none of
    them makes garbage in cycles), and the process ends once it has done what the interpreter's own exit would do
    for it: the threads a site may have started are joined and the atexit handlers run (as Py_FinalizeEx does, in
    that order), and stdout and stderr are flushed. Then it exits without tearing the interpreter down (module by
    module, every object freed). The line, the exit code and a site's exit handlers are as before; only objects
    still alive are not finalised, and nothing on health's path needs that (its files are closed as they are read).
    """
    args = sys.argv[1:]
    if args[:1] != ["health"]:
        sys.exit(main(args))
    import gc

    gc.disable()
    code = main(args)
    import atexit
    import os

    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by its reader, or closed: nothing more can be said there
            pass
    os._exit(code)
