"""The bare stack Gatehouse is measured against: one JSON insert endpoint, one Celery task.

Installed and mounted only when GATEHOUSE_BENCH_BARE=1 (the benchmark's own stack).
"""
