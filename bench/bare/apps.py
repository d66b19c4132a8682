from django.apps import AppConfig


class BareConfig(AppConfig):
    name = "bench.bare"
    label = "bench_bare"
    verbose_name = "Benchmark baseline"
    default_auto_field = "django.db.models.BigAutoField"
