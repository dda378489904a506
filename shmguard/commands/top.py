"""`shmguard top`: every container's (or, on a node, every pod's) /dev/shm live in the terminal, as `docker stats`
shows CPU and memory, without Prometheus.

Each pass comes from the exporter's own sources (engine or node mode, shmguard.commands.exporter.make_source) and
peaks (Exporter.step), so the figures are those /metrics would serve. A row shows the size, use, peak and what the
declared job needs, a bar of use (with the peak marked `|`), and a mark taken from the exporter's alert rules
(shmguard.exporter.rules): BUS ERROR when /dev/shm is smaller than the job needs (it will die when the DataLoader
gets there), FULL when use is above the nearly-full ratio, OOM when memory use nears the limit with /dev/shm pages
charged to it. Rows heading for a crash come first. On a terminal the frame is redrawn in place (the alternate
screen, restored on exit); `--once` prints one frame as plain text.
"""

from __future__ import annotations

import shutil
import sys
import time

from shmguard.exporter.metrics import Row, Sample, printable_sample
from shmguard.exporter.rules import FULL_RATIO, MEMORY_RATIO, SHMEM_RATIO
from shmguard.units import format_size

BAR = 20
MARKS = ("BUS ERROR", "OOM", "FULL", "")  # worst first: the order rows are shown in


def mark(row: Row) -> str:
    """What the row is heading for, by the alerts' own thresholds ('' when nothing)."""
    reading, target = row.reading, row.target
    if reading.shm_size is not None and target.shm_required is not None and reading.shm_size < target.shm_required:
        return "BUS ERROR"
    limit, usage, shmem = reading.memory_limit, reading.memory_usage, reading.memory_shmem
    if limit and usage is not None and shmem is not None and usage > MEMORY_RATIO * limit and \
            shmem > SHMEM_RATIO * limit:
        return "OOM"
    if reading.shm_size and reading.shm_used is not None and reading.shm_used > FULL_RATIO * reading.shm_size:
        return "FULL"
    return ""


def bar(row: Row, width: int = BAR) -> str:
    """Use as `#` in a bar the width of /dev/shm's size, the peak as `|`; `?` when the size is not known."""
    size, used = row.reading.shm_size, row.reading.shm_used
    if not size or used is None:
        return "[" + "?" * width + "]"
    cells = ["#" if i < round(width * min(used, size) / size) else "." for i in range(width)]
    if row.peak is not None and row.peak > used:
        at = min(width - 1, max(0, round(width * min(row.peak, size) / size) - 1))
        cells[at] = "|"
    return "[" + "".join(cells) + "]"


def size(value: int | None) -> str:
    return "-" if value is None else format_size(value)


def label(row: Row) -> str:
    target = row.target
    if target.pod:
        return f"{target.namespace}/{target.pod}" + (f" {target.container}" if target.container else "")
    return target.name or target.id


def frame(sample: Sample, width: int = 120, now: float | None = None) -> list[str]:
    """The lines of one frame (pure): a head, a line per /dev/shm, worst first."""
    sample = printable_sample(sample)
    rows = sorted(sample.rows, key=lambda r: (MARKS.index(mark(r)), -(r.reading.shm_used or 0) /
                                              max(r.reading.shm_size or 1, 1), label(r)))
    when = time.strftime("%H:%M:%S", time.localtime(sample.taken_at or now or time.time()))
    source = ("engine" if sample.mode == "engine" else "Kubernetes API") + (" up" if sample.source_up else " DOWN")
    heading = sum(1 for r in rows if mark(r))
    lines = [f"shmguard top  {when}  {len(rows)} /dev/shm  {heading} heading for a crash  ({sample.mode} mode, "
             f"{source})"]
    lines += [f"  {e}" for e in sample.errors]
    name_width = max([len("NAME")] + [len(label(r)) for r in rows])
    name_width = min(name_width, max(12, width - 70))
    lines.append(f"{'NAME':<{name_width}}  {'SIZE':>9}  {'USED':>9}  {'PEAK':>9}  {'NEED':>9}  {'USE':<{BAR + 2}}"
                 f"  MARK")
    for row in rows:
        name = label(row)
        if len(name) > name_width:
            name = name[: name_width - 1] + "~"
        lines.append(f"{name:<{name_width}}  {size(row.reading.shm_size):>9}  {size(row.reading.shm_used):>9}  "
                     f"{size(row.peak):>9}  {size(row.target.shm_required):>9}  {bar(row)}  {mark(row)}".rstrip())
    if not rows:
        lines.append("(no /dev/shm to show: no running container" +
                     (")" if sample.mode == "engine" else " mounts a memory emptyDir at /dev/shm on this node)"))
    return [line[:width] for line in lines]


# The alternate screen (the terminal's own contents come back on exit), the cursor hidden, each frame drawn from
# the top left with every line and the rest of the screen cleared behind it: no flicker, nothing left over.
ENTER, LEAVE = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


def run_top(source, *, interval: float, once: bool, out=None) -> int:
    """Show the source's passes until Ctrl-C (exit 0), or one frame with once."""
    from shmguard.exporter.server import Exporter

    out = out or sys.stdout
    exporter = Exporter(source, interval)
    try:
        if once:  # plain text: cut to the terminal's width only on a terminal
            width = shutil.get_terminal_size().columns if out.isatty() else 1000
            out.write("\n".join(frame(exporter.step(), width)) + "\n")
            return 0
        out.write(ENTER)
        try:
            while True:
                started = time.monotonic()
                lines = frame(exporter.step(), shutil.get_terminal_size().columns)
                rows = shutil.get_terminal_size().lines
                out.write(HOME + "".join(line + CLEAR_LINE + "\n" for line in lines[: max(rows - 1, 1)]) + CLEAR_BELOW)
                out.flush()
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
        except KeyboardInterrupt:
            return 0
        finally:
            out.write(LEAVE)
            out.flush()
    finally:
        source.close()


def top_command(host: str | None, kubelet_root: str | None, node_name: str | None, api_server: str | None,
                containerd_state: str | None, interval: str, once: bool) -> int:
    """`shmguard top` as the command line gives it: the exporter's source (engine or node mode), frames every interval."""
    from shmguard.commands.exporter import make_source
    from shmguard.exporter.server import parse_interval

    seconds = parse_interval(interval)
    source = make_source(host=host, kubelet_root=kubelet_root, node_name=node_name, api_server=api_server,
                         containerd_state=containerd_state)
    return run_top(source, interval=seconds, once=once)


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.commands.declare import source_options

    @click.command("top")
    @source_options
    @click.option("--interval", default="1s", show_default=True, metavar="DURATION", help="Time between frames.")
    @click.option("--once", is_flag=True, help="Print one frame as plain text and exit.")
    def top_cli(host, kubelet_root, node_name, api_server, containerd_state, interval, once) -> int:
        """Show every container's /dev/shm live: size, use, peak and what its job needs, as bars, the ones heading for
        a Bus error (or an OOM kill) first. The exporter's readers, without Prometheus. Ctrl-C leaves (exit 0)."""
        return top_command(host, kubelet_root, node_name, api_server, containerd_state, interval, once)

    return top_cli
