"""HTTP API tools: today's three-route kind is renamed `gatehouse_protocol`; `http` is now a plain HTTP API.

Every existing `http` tool spoke the three-route protocol, so it becomes `gatehouse_protocol`.
"""

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.text
import vault.fields
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.exceptions import IrreversibleError


def protocol_tools_renamed(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("toolcatalog", "Tool").objects.filter(executor_kind="http").update(executor_kind="gatehouse_protocol")


def protocol_tools_named_http_again(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    tools = apps.get_model("toolcatalog", "Tool").objects
    if tools.filter(executor_kind="http").exists():
        # Before this migration `http` meant the three-route protocol: a plain HTTP API tool would change meaning.
        raise IrreversibleError("plain HTTP API tools exist: change or delete them before going back")
    tools.filter(executor_kind="gatehouse_protocol").update(executor_kind="http")


class Migration(migrations.Migration):

    dependencies = [
        ('toolcatalog', '0002_tool_audience'),
    ]

    operations = [
        migrations.AlterField(
            model_name='tool',
            name='executor_kind',
            field=models.CharField(choices=[('python', 'Python callable (dotted path)'), ('gatehouse_protocol', 'Gatehouse protocol (three routes)'), ('http', 'HTTP API (method, URL template, headers)'), ('mcp', 'Upstream MCP server tool')], default='gatehouse_protocol', max_length=32),
        ),
        migrations.AlterField(
            model_name='tool',
            name='executor_ref',
            field=models.CharField(help_text='python: a dotted path to an executor class; gatehouse_protocol: a path or URL the call is POSTed to (…/preview and …/verify beside it); http: the URL template, e.g. https://api.example.com/orders/{order_id}/cancel ({name}: that argument, percent-encoded).', max_length=300),
        ),
        migrations.RunPython(protocol_tools_renamed, protocol_tools_named_http_again),
        migrations.CreateModel(
            name='HttpEndpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('method', models.CharField(choices=[('GET', 'GET'), ('POST', 'POST'), ('PUT', 'PUT'), ('PATCH', 'PATCH'), ('DELETE', 'DELETE')], default='POST', max_length=8)),
                ('body', models.CharField(choices=[('arguments', 'The arguments, as a JSON object'), ('template', 'The body template'), ('none', 'No body')], default='arguments', max_length=16)),
                ('body_template', models.JSONField(blank=True, help_text='JSON sent as the body; a string that is exactly "{name}" becomes that argument\'s value (any JSON type; left out when the call lacks it). Example: {"amount": "{valor_centavos}", "currency": "BRL"}', null=True)),
                ('result_pointer', models.CharField(blank=True, help_text='A JSON pointer (RFC 6901) to the result in the answer, e.g. /data/refund. Empty: the whole answer.', max_length=200)),
                ('permanent_statuses', models.CharField(blank=True, help_text='Statuses that fail the call at once, e.g. 400-499, 501. Empty: every 4xx but 408, 425 and 429. Any other status from 400 up is retried with backoff.', max_length=200)),
                ('timeout_seconds', models.PositiveSmallIntegerField(default=20, help_text='How long to wait for the answer once the request is sent. No answer in time: a write needs reconciliation by a person (never sent again), a read-only or idempotent tool is retried.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(60)])),
                ('tool', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='http_endpoint', to='toolcatalog.tool')),
            ],
        ),
        migrations.CreateModel(
            name='HttpHeader',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, validators=[django.core.validators.RegexValidator("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")])),
                ('value', models.CharField(blank=True, help_text='Shown in admin; for a secret, leave empty.', max_length=1000)),
                ('secret', vault.fields.EncryptedTextField(blank=True, help_text='Write-only: encrypted at rest and never shown again.')),
                ('tool', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='http_headers', to='toolcatalog.tool')),
            ],
            options={
                'ordering': ['tool', 'name'],
                'constraints': [models.UniqueConstraint(django.db.models.functions.text.Lower('name'), models.F('tool'), name='httpheader_unique_name_per_tool')],
            },
        ),
    ]
