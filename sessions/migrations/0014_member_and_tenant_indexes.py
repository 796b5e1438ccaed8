"""Steps' tenant required and indexed with their finish; runs indexed by creator and status (see 0013)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0013_step_tenant"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="step",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.RemoveIndex(model_name="step", name="step_finished"),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(fields=["tenant", "finished_at"], name="step_tenant_finished"),
        ),
        migrations.AlterField(
            model_name="run",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["created_by", "status"], name="run_member_status"),
        ),
    ]
