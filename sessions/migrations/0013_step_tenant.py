"""Each step keeps its run's tenant; a post's quota counts read only its tenant's and member's rows.

The tenant's model-token rate summed the steps every tenant finished in the last minute, joined
to their runs; the member's active runs were found among every tenant's active runs. Steps get
their run's tenant (filled in for the steps already stored), indexed with their finish, and runs
an index on their creator and status, which also serves the creator's foreign key.

The column is added and filled here, and made required with the indexes in 0014: PostgreSQL
cannot alter a table in the transaction whose updates still have foreign keys to check. The fill
goes through the runs in batches, each its own transaction, so that a large installation's
upgrade neither holds every step's row lock at once nor writes one transaction the size of its
step table (the migration is not atomic for that).
"""

import django.db.models.deletion
from django.db import migrations, models, transaction
from django.db.models import OuterRef, Subquery

RUNS_PER_BATCH = 2_000


def fill_step_tenants(apps, schema_editor):
    Run = apps.get_model("agent_sessions", "Run")
    Step = apps.get_model("agent_sessions", "Step")
    run_tenant = Run.objects.filter(pk=OuterRef("run_id")).values("tenant_id")[:1]
    runs = Run.objects.using(schema_editor.connection.alias).order_by("pk").values_list("pk", flat=True)
    after = None
    while True:
        batch = list((runs.filter(pk__gt=after) if after is not None else runs)[:RUNS_PER_BATCH])
        if not batch:
            return
        with transaction.atomic(using=schema_editor.connection.alias):
            Step.objects.using(schema_editor.connection.alias).filter(
                tenant__isnull=True, run_id__gte=batch[0], run_id__lte=batch[-1]
            ).update(tenant_id=Subquery(run_tenant))
        after = batch[-1]


class Migration(migrations.Migration):
    atomic = False

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
