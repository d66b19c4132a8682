from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("bench_bare", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="barerow",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="barerow",
            name="result",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
