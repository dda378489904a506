"""The Helm chart charts/shmguard, made from the code that renders `shmguard render webhook` and `exporter render
k8s` (tree.py: documents written once, evaluated here or written as a Helm template), its values table
(values.py: values.yaml, values.schema.json and the README's table), and its writer (`python3 -m shmguard.chart`)."""
