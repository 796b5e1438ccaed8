"""GET /api/v1/workers/: the run hosts and the run queue, for the tenant's admins (core.workers)."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.workers import ClusterState, worker_status_for_actor
from tenants.actors import actor_from_request
from tenants.models import Role


class ClusterStatusSerializer(serializers.Serializer):
    cluster_id = serializers.CharField()
    host = serializers.CharField()
    pid = serializers.IntegerField(help_text="The cluster's main process.")
    status = serializers.ChoiceField(choices=ClusterState.choices)
    workers = serializers.ListField(
        child=serializers.IntegerField(),
        source="worker_pids",
        help_text="Process ids of the worker processes.",
    )
    task_queue_size = serializers.IntegerField(
        help_text="Tasks the cluster has taken from the broker and not yet handed to a worker."
    )
    uptime_seconds = serializers.FloatField(allow_null=True)


class RunHostSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The host process's own id, new at each start.")
    capacity = serializers.IntegerField(help_text="Runs it executes at once.")
    is_alive = serializers.BooleanField(help_text="It beat within the last three heartbeat intervals.")
    started_at = serializers.DateTimeField()
    last_heartbeat_at = serializers.DateTimeField()
    last_heartbeat_age_seconds = serializers.FloatField()


class PlatformRunHostSerializer(RunHostSerializer):
    # required=False: the schema describes both answers, and a tenant admin's has none of these.
    host = serializers.CharField(required=False, help_text="Superusers only: the machine's name.")
    pid = serializers.IntegerField(required=False, help_text="Superusers only: the worker process.")
    active_runs = serializers.IntegerField(
        required=False, help_text="Superusers only: runs it executes now, of every tenant."
    )


class RunQueueSerializer(serializers.Serializer):
    queued_runs = serializers.IntegerField(
        help_text="Runs waiting to start: this tenant's (superusers: all)."
    )
    oldest_queued_run_age_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the oldest of them has waited; null when none."
    )
    active_runs = serializers.IntegerField(
        help_text="Runs executing on a host now: this tenant's (superusers: all)."
    )


class PlatformRunQueueSerializer(RunQueueSerializer):
    run_queue_depth = serializers.IntegerField(
        required=False,
        help_text="Superusers only: run tasks in the broker waiting for a run host to take them.",
    )


class WorkerStatusSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(
        choices=["tenant", "platform"],
        help_text="tenant: counts are the tenant's own; platform (superusers): every tenant's.",
    )
    alive_run_hosts = serializers.IntegerField(help_text="Run hosts alive; 0: no run can start.")
    capacity = serializers.IntegerField(help_text="Runs the alive hosts execute at once, together.")
    run_hosts = RunHostSerializer(many=True, help_text="Every run host heard from in the last day.")
    run_queue = RunQueueSerializer()


class PlatformWorkerStatusSerializer(WorkerStatusSerializer):
    run_hosts = PlatformRunHostSerializer(many=True, help_text="Every run host heard from in the last day.")
    run_queue = PlatformRunQueueSerializer()
    clusters = ClusterStatusSerializer(
        source="platform.clusters",
        many=True,
        required=False,
        help_text="Superusers only: the django-q2 clusters (schedules, short tasks) that reported lately.",
    )
    task_queue_depth = serializers.IntegerField(
        source="platform.task_queue_depth",
        required=False,
        help_text="Superusers only: tasks waiting for a cluster.",
    )


class WorkerStatusView(APIView):
    read_role = Role.ADMIN

    @extend_schema(
        summary="Run hosts and the run queue",
        tags=["workers"],
        responses={
            200: OpenApiResponse(
                PlatformWorkerStatusSerializer,
                description="Fields marked 'superusers only' are absent for tenant admins.",
            )
        },
    )
    def get(self, request: Request) -> Response:
        actor = actor_from_request(request)
        if actor is None:  # the permission class already refused such requests
            raise exceptions.NotAuthenticated()
        status = worker_status_for_actor(actor=actor)
        serializer_class = PlatformWorkerStatusSerializer if status.platform else WorkerStatusSerializer
        return Response(serializer_class(status).data)
