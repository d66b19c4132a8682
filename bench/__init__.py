"""`make bench`: Gatehouse measured against a bare Django endpoint and a bare Celery task, side by side."""
