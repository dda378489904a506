"""The admission webhook: size Pods at creation (`/mutate`) and refuse the ones that would hit the Bus error (`/validate`).

- `mutation.py`: the one call into the pod-sizing core that `shmguard patch` uses;
- `review.py`: a pure `review(AdmissionReview dict, config) -> AdmissionReview dict`;
- `server.py`: the HTTPS adapter (one selector loop over non-blocking TLS sockets, a review thread for large
  bodies) with health, metrics and logs; shmguard/commands/webhook.py checks its options;
- `certs.py`: a self-signed CA and serving certificate (`shmguard webhook certs`);
- `deploy.py`: the manifests that run it in a cluster (`shmguard render webhook`).
"""

# The choices of the webhook's options (cli.py declares them; the review and the manifests take the value).
MODES = ("deny", "warn")  # /validate: deny a Pod whose /dev/shm cannot hold its job, or allow it with warnings
ON_ERROR = ("allow", "deny")  # a Pod that cannot be understood (failurePolicy Ignore or Fail)
FAILURE_POLICIES = ("Ignore", "Fail")
