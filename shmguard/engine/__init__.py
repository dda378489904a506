"""The Docker-engine side of `shmguard run`: the pure plan, the container lifecycle, log following, peak watching."""
