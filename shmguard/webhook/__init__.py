"""The admission webhook: size Pods at creation (`/mutate`) and refuse the ones that would hit the Bus error (`/validate`).

- `mutation.py`: the one call into the pod-sizing core that `shmguard patch` uses;
- `review.py`: a pure `review(AdmissionReview dict, config) -> AdmissionReview dict`;
- `server.py`: the thin HTTPS adapter (ThreadingHTTPServer + ssl) with health, metrics and logs;
- `certs.py`: a self-signed CA and serving certificate (`shmguard webhook certs`);
- `deploy.py`: the manifests that run it in a cluster (`shmguard render webhook`).
"""
