"""shmguard's Python API: check a real DataLoader against the container it runs in, before its workers die.

    loader = shmguard.guard(DataLoader(dataset, batch_size=64, num_workers=4), on_short="fit")

The public names (check_loader, guard, recommend_workers, GuardedLoader) are also
`shmguard.*`, loaded lazily there. The package's rooms:

- check.py: the entry points; what is known of a loader's job (measured, from the
  job options, or nothing) and what to do when /dev/shm is short;
- batch.py: one batch of the loader, built in a throwaway forked child cut off
  from the trainer's files, shared memory and signal handlers;
- guarded.py: GuardedLoader, which diagnoses a shared-memory crash while iterating;
- loader.py: the torch side: a DataLoader's settings, and the same loader rebuilt smaller;
- fit.py and messages.py: the pure decisions and their words, on Jobs and probe snapshots.
"""

from __future__ import annotations

from shmguard.api.check import check_loader, guard, loader_job, recommend_workers
from shmguard.api.guarded import GuardedLoader

__all__ = ["check_loader", "guard", "recommend_workers", "GuardedLoader", "loader_job"]
