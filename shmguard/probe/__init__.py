"""Probes read the system through one injectable filesystem root (default `/`, or SHMGUARD_ROOT).

One module per kernel interface; each has pure `parse_*` functions next to thin
readers, so tests drive the parsers with strings and the readers with fake
/proc, /sys and /dev trees. A missing or unreadable file is reported ("cannot
tell"), never raised. Standard library only: `shmguard health` imports these.
"""
