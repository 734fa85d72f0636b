"""Benchmarks and query-plan checks for django-procedures (not part of the package)."""
