from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from agents.api import AgentViewSet
from audit.api import AuditEntryViewSet
from billing.api import BudgetViewSet, CreditViewSet, LedgerEntryViewSet
from billing.usage_api import UsageReportView
from core.api.workers import WorkerStatusView
from core.health import healthz, readyz
from files.api import FileViewSet, KnowledgeBaseViewSet
from mcp_servers.api import McpServerViewSet
from memory.api import AgentMemoryViewSet, MemoryViewSet, SessionMemoryExtractionViewSet
from sessions.api import RunViewSet, SessionViewSet
from sessions.compaction_api import SessionCompactionViewSet
from sessions.sse import run_event_stream, session_event_stream, with_event_stream
from tenants.provider_keys.api import ProviderKeyViewSet
from tools.api import AgentToolsViewSet, ToolViewSet

router = SimpleRouter()
router.register("agents", AgentViewSet, basename="agent")
router.register("sessions", SessionViewSet, basename="session")
router.register("runs", RunViewSet, basename="run")
router.register("tools", ToolViewSet, basename="tool")
router.register("mcp-servers", McpServerViewSet, basename="mcp-server")
router.register("memories", MemoryViewSet, basename="memory")
router.register("provider-keys", ProviderKeyViewSet, basename="provider-key")
router.register("credits/ledger", LedgerEntryViewSet, basename="ledger-entry")
router.register("budgets", BudgetViewSet, basename="budget")
router.register("audit", AuditEntryViewSet, basename="audit-entry")
router.register("files", FileViewSet, basename="file")
router.register("knowledge-bases", KnowledgeBaseViewSet, basename="knowledge-base")

api_v1: list[URLPattern | URLResolver] = [
    # The events endpoints answer JSON, or a live stream for Accept: text/event-stream.
    path(
        "sessions/<str:pk>/events/",
        with_event_stream(SessionViewSet.as_view({"get": "events"}), session_event_stream),  # type: ignore[arg-type]
    ),
    path(
        "runs/<str:pk>/events/",
        with_event_stream(RunViewSet.as_view({"get": "events"}), run_event_stream),  # type: ignore[arg-type]
    ),
    path("credits/", CreditViewSet.as_view({"get": "summary", "patch": "set_enabled"}), name="credits"),
    path("credits/grant/", CreditViewSet.as_view({"post": "grant"}), name="credits-grant"),
    path(
        "sessions/<str:pk>/compact/",
        SessionCompactionViewSet.as_view({"post": "compact"}),
        name="session-compact",
    ),
    path(
        "agents/<str:agent_pk>/memories/",
        AgentMemoryViewSet.as_view({"get": "list", "post": "create"}),
        name="agent-memories",
    ),
    path(
        "sessions/<str:session_pk>/extract-memories/",
        SessionMemoryExtractionViewSet.as_view({"post": "create"}),
        name="session-extract-memories",
    ),
    path("", include(router.urls)),
    path("workers/", WorkerStatusView.as_view(), name="workers"),
    path("usage/", UsageReportView.as_view(), name="api-usage"),
    path(
        "agents/<str:agent_pk>/tools/",
        AgentToolsViewSet.as_view({"get": "retrieve", "patch": "partial_update", "put": "partial_update"}),
        name="agent-tools",
    ),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's set-up script from its own URL (?script), not inline.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("", include("web.urls")),
]
