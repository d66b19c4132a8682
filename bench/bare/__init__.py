"""The bare stack Gatehouse is measured against: one JSON insert endpoint, one Celery task.

Installed and mounted only by the benchmark's own settings (bench.settings, bench.urls).
"""
