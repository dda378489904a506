"""The manifest side: Kubernetes and Compose rendering, pod-template finding, patching."""
