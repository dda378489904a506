"""`run -i`: stdin copied into the container's socket until EOF, output demultiplexed from the same socket."""

from __future__ import annotations

import os
import socket
import struct

from shmguard.engine.interactive import attach_stream, pump_stdin, raw_terminal


def test_stdin_is_copied_then_half_closed():
    ours, theirs = socket.socketpair()
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"p x\nc\n")
    os.close(write_fd)
    pump_stdin(ours, read_fd).join(timeout=5)
    received = b""
    while chunk := theirs.recv(100):  # ends: the writer half-closed
        received += chunk
    assert received == b"p x\nc\n"
    os.close(read_fd)


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def test_output_comes_back_demultiplexed():
    ours, theirs = socket.socketpair()
    theirs.sendall(frame(1, b"out\n") + frame(2, b"err\n"))
    theirs.close()

    class Container:
        def attach_socket(self, params):
            assert params["stdin"] == 1
            return ours

    stream, raw = attach_stream(Container(), tty=False)
    assert list(stream) == [(b"out\n", None), (None, b"err\n")] and raw is ours


def test_raw_terminal_leaves_a_pipe_alone():
    read_fd, write_fd = os.pipe()
    with raw_terminal(True, read_fd):
        pass
    os.close(read_fd)
    os.close(write_fd)
