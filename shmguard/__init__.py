"""shmguard: make containerised PyTorch training start right the first time.

A multi-worker DataLoader moves every batch through /dev/shm; containers give it
64 MB (Docker) or no way to size it (Kubernetes). shmguard checks, sizes and
launches training containers so they do not die of a Bus error.
"""

__version__ = "0.1.0"
