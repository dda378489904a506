"""What the tests share, and the only part of tests/ that a test module (or a benchmark) may import.

- paths: the checkout, tests/data/ (all fixture data) and the committed benchmark results;
- ci, needs: a missing component is a skip locally and a failure in CI; the needs_* markers;
- roots: the fixture roots and the one fake statvfs (FakeRoot); snapshots: hand-built probe snapshots;
- exporter, exporter_process, recorded_pods: the exporter's faked host, node, engine and Kubernetes API, and the
  exporter run as a process;
- webhook, hostile: AdmissionReviews, a webhook server in this process, and the hostile HTTP corpus;
- death: the forms a DataLoader's shared-memory death takes, and the demo job that dies of it;
- containers, throwaway_engine, podman, slurm_cluster, burners: real components the integration tests start;
- health, datasets, crds, fix_sizes, properties, public_logs: helpers of one area each;
- explain_corpus: the judged corpus of issue 41 (its split, its cases, the scorer), shared with
  benchmarks/explain_corpus.py.
"""
