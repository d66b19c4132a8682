from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agents", "0002_budget_counters_and_any_kind_breaker")]

    operations = [
        migrations.AddField(model_name="budgetcounter", name="cap", field=models.PositiveIntegerField(null=True)),
        migrations.AddConstraint(
            model_name="budgetcounter",
            constraint=models.CheckConstraint(
                condition=models.Q(cap__isnull=True) | models.Q(used__lte=models.F("cap")),
                name="budgetcounter_used_within_cap",
            ),
        ),
    ]
