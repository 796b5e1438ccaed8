"""GET /api/v1/workers/: the task workers' health, for the tenant's admins."""

from drf_spectacular.utils import extend_schema
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


class WorkerStatusSerializer(serializers.Serializer):
    clusters = ClusterStatusSerializer(
        many=True, help_text="Every django-q2 cluster that reported in the last few seconds, on any host."
    )
    queue_depth = serializers.IntegerField(help_text="Tasks waiting in the broker, for all workspaces.")
    queued_runs = serializers.IntegerField(help_text="This workspace's runs waiting to start.")
    oldest_queued_run_age_seconds = serializers.FloatField(
        allow_null=True, help_text="How long this workspace's oldest queued run has waited; null when none."
    )


class WorkerStatusView(APIView):
    read_role = Role.ADMIN

    @extend_schema(
        summary="Task workers and queues", tags=["workers"], responses={200: WorkerStatusSerializer}
    )
    def get(self, request: Request) -> Response:
        actor = actor_from_request(request)
        if actor is None:  # the permission class already refused such requests
            raise exceptions.NotAuthenticated()
        return Response(WorkerStatusSerializer(worker_status_for_actor(actor=actor)).data)
