"""One module per command; each exposes plain functions the CLI calls."""
