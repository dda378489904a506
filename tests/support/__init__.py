"""Helpers shared by tests and benchmarks (not tests themselves)."""
