"""Each step keeps its run's tenant; a post's quota counts read only its tenant's and member's rows.

The tenant's model-token rate summed the steps every tenant finished in the last minute, joined
to their runs; the member's active runs were found among every tenant's active runs. Steps get
their run's tenant (filled in for the steps already stored), indexed with their finish, and runs
an index on their creator and status, which also serves the creator's foreign key.

The column is added and filled here, and made required with the indexes in 0014: PostgreSQL
cannot alter a table in the transaction whose updates still have foreign keys to check.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_step_tenants(apps, schema_editor):
    Run = apps.get_model("agent_sessions", "Run")
    Step = apps.get_model("agent_sessions", "Step")
    run_tenant = Run.objects.filter(pk=OuterRef("run_id")).values("tenant_id")[:1]
    Step.objects.filter(tenant__isnull=True).update(tenant_id=Subquery(run_tenant))


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0012_existing_sessions_become_one_branch"),
        ("tenants", "0005_tenant_is_metered"),
    ]

    operations = [
        migrations.AddField(
            model_name="step",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.RunPython(fill_step_tenants, migrations.RunPython.noop),
    ]
