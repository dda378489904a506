"""`run -i` / `-t`: the terminal's stdin goes to the container (for pdb), as `docker run -it` does.

The container is attached through one socket with stdin: its output comes back on
it (multiplexed without a tty, raw with one), and a thread copies this process's
stdin into it until end of file, when the container's stdin is closed (stdin_once).
With -t and a terminal on stdin, the terminal is put in raw mode for the run (keys,
Ctrl-C included, go to the container's terminal, as with docker) and restored after.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager


def attach_stream(container, tty: bool):
    """Attach stdin, stdout and stderr on one socket; return (demuxed stream of (stdout, stderr), raw socket)."""
    from docker.utils.socket import demux_adaptor, frames_iter

    sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    raw = getattr(sock, "_sock", sock)
    return (demux_adaptor(*frame) for frame in frames_iter(sock, tty)), raw


def pump_stdin(raw_socket, stdin_fd: int | None = None) -> threading.Thread:
    """Copy stdin into the container's until end of file (then half-close it so the container sees EOF)."""
    fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd

    def copy() -> None:
        try:
            while True:
                data = os.read(fd, 4096)
                if not data:
                    break
                raw_socket.sendall(data)
            import socket

            raw_socket.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the container or the engine went away: the follower reports it

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


@contextmanager
def raw_terminal(enabled: bool, fd: int | None = None):
    """The terminal on stdin in raw mode while inside (only with -t and a real terminal)."""
    if enabled and fd is None:
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):
            enabled = False
    if not enabled or fd is None or not os.isatty(fd):
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
