"""The one error root of shmguard and the exit codes it maps to.

Every expected failure (bad input, a probe that could not run, an engine that is
not there) is a ShmguardError: the CLI boundary prints its message on one line
and exits with its code, never with a traceback.
"""

# Exit codes. The README's exit-code table lists the same numbers.
EXIT_OK = 0
EXIT_FAIL = 1  # the check found a problem (or the training command failed)
EXIT_USAGE = 2  # bad usage, bad input, or a probe/engine that could not run
EXIT_RUN_FAILED = 125  # `run`: the container could not be run at all (as `docker run`)
EXIT_INTERNAL = 70  # a bug in shmguard (EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


class ShmguardError(Exception):
    """An expected failure with a message meant for the user."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(ShmguardError):
    """The user asked for something that cannot be: a bad value or option."""

    exit_code = EXIT_USAGE


class ShmTooSmall(ShmguardError):
    """/dev/shm cannot hold what the DataLoader puts in it (or already could not: a worker died of it).

    The message names what /dev/shm holds, what the job needs and the size to ask
    for; `shm_size` is that size as a `docker run --shm-size` value (None when no
    size would help, e.g. /dev/shm is not a tmpfs), `report` the verdict it came from.
    """

    exit_code = EXIT_FAIL

    def __init__(self, message: str, shm_size: str | None = None, report=None) -> None:
        super().__init__(message)
        self.shm_size = shm_size
        self.report = report


class ShmguardWarning(RuntimeWarning):
    """Issued by `shmguard.guard(loader, on_short="warn")` when /dev/shm is too small for the loader."""


EXIT_BROKEN_PIPE = 141  # stdout closed by its reader (`shmguard … | head`): 128 + SIGPIPE, as tools killed by it


def guarded(command, say=None) -> int:
    """Run a command function and return its exit code: the one boundary of every command (click's and
    argparse's alike) where an expected failure becomes one line and its code, Ctrl-C 130, a bug one line and 70.

    The output is flushed inside, so that a stdout that cannot take it is handled here too: closed by its reader
    (`| head`, `| true`) ends quietly with 141; a full disk (`> /dev/full`) is one line and exit 2.
    """
    import sys

    say = say or (lambda text: print(text, file=sys.stderr))
    try:
        code = command()
        sys.stdout.flush()
        return code
    except ShmguardError as exc:
        say(f"shmguard: error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("shmguard: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence(sys.stdout)
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        import errno

        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            return internal_error(exc, say)
        silence(sys.stdout)
        say(f"shmguard: error: cannot write the output: {exc.strerror or exc}")
        return EXIT_USAGE
    except Exception as exc:
        return internal_error(exc, say)


def internal_error(exc: BaseException, say) -> int:
    """A bug: one line that says so (SHMGUARD_DEBUG=1 shows the traceback)."""
    import os

    if os.environ.get("SHMGUARD_DEBUG", "").strip().lower() in ("1", "true", "yes"):
        raise exc
    say(f"shmguard: internal error: {type(exc).__name__}: {exc} "
        f"(set SHMGUARD_DEBUG=1 for the traceback, and please report it)")
    return EXIT_INTERNAL


def silence(stream) -> None:
    """Point a stream's descriptor at /dev/null (a reader that closed it, a full disk), so that nothing more fails
    on it, not even the interpreter's last flush."""
    import os

    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)
