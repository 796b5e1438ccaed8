"""The run hosts serving the run queue, as each last announced itself."""

import uuid

from django.db import models


class RunHostHeartbeat(models.Model):
    """One run host process: written when it starts serving, every ``RUN_HOST_HEARTBEAT_SECONDS``
    while it serves, and deleted when it stops. A host that crashed stops beating; its row stays
    (shown as not alive) until it is a day old."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    capacity = models.PositiveIntegerField(help_text="Runs it executes at once (RUN_CONCURRENCY).")
    active_runs = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"
