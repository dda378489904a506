"""`shmguard check`: probe this container and judge it against the job."""

from __future__ import annotations

import json

from shmguard.jsonout import stamp
from shmguard.probe import Root
from shmguard.probe.nccl_version import with_installed_version
from shmguard.probe.snapshot import take_snapshot
from shmguard.verdict import Report, evaluate, exit_code


def report_json(report: Report, snapshot_probes: dict | None = None) -> str:
    data = stamp(report.as_dict())
    if snapshot_probes is not None:
        data["probes"] = snapshot_probes
    return json.dumps(data, indent=2, sort_keys=False)


def report_text(report: Report) -> str:
    """A short table: status, id, found, needed, message; the fix under each finding that is not PASS."""
    rows = [("STATUS", "CHECK", "FOUND", "NEEDED")]
    rows += [(f.status, f.id, f.found or "-", f.needed or "-") for f in report.findings]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"shmguard check: {report.verdict}"]
    for i, row in enumerate(rows):
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            continue
        finding = report.findings[i - 1]
        if finding.status != "PASS":
            lines.append(f"      {finding.message}")
            if finding.fix:
                lines.append(f"      fix: {finding.fix}")
    rec = report.recommended
    lines.append(f"required: /dev/shm {rec['shm_size'] or '0'}, memory {rec['memory']}; recommended num_workers: {rec['workers']}")
    if rec.get("sbatch"):
        lines.append(f"under Slurm: #SBATCH {rec['sbatch']} (--mem with Slurm's headroom; /dev/shm's size means nothing)")
    return "\n".join(lines)


def check(job, as_json: bool, strict: bool, root: Root | None = None, echo=print) -> int:
    job = with_installed_version(job, root)  # the NCCL torch would use here, when the job does not say
    snapshot = take_snapshot(root)
    report = evaluate(job, snapshot)
    if as_json:
        echo(report_json(report, snapshot.as_dict()))
    else:
        echo(report_text(report))
    return exit_code(report, strict)


def check_options(args: dict) -> int:
    """`shmguard check` as its command line gives it (shmguard.corecli parses it): the job options over this
    container's SHMGUARD_* variables (an option wins over its variable, as with click's envvar), read as every other
    part of shmguard reads a container's job, then checked against this container."""
    import os
    import sys

    from shmguard.declared import visible_devices
    from shmguard.options import JobOptions
    from shmguard.probe.process import command_line
    from shmguard.slurm import fill_gpus

    args = dict(args)
    as_json, strict, root = args.pop("as_json"), args.pop("strict"), args.pop("root")
    given, gpu_notes = fill_gpus(JobOptions.take(args), os.environ)
    # What this container runs (its main process: a launcher there says how many processes train) and the
    # accelerators it sees, read as every reader of a container's job reads them.
    where = Root(root)
    job, notes = given.job(command_line(where), os.environ, devices=visible_devices(where, os.environ))
    for line in gpu_notes + notes:
        print(line, file=sys.stderr)
    return check(job, as_json=as_json, strict=strict, root=Root(root))
