"""An adapter for hardbyte/postgresql-job-queue-benchmarking (its long-horizon JSONL protocol).

``python -m benchmarks.hardbyte`` is the long-running adapter process the harness launches;
``python -m benchmarks.hardbyte.drive`` runs it natively here, without Docker (see README.md).
"""
