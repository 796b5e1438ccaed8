"""Agentry settings, all from the environment.

With no environment at all this is the embedded default (DESIGN.md §6): SQLite in WAL
mode, the django-q2 ORM broker, no cross-process channel layer, a file cache, DEBUG off and
generated secrets kept in the data folder. ``DATABASE_URL`` and ``REDIS_URL`` switch to
PostgreSQL and Redis.
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.data_dir import (
    make_private_folder,
    make_private_sqlite_file,
    new_secret_key,
    read_or_create_secret,
)
from config.env import env_bool, env_float, env_int, env_is_set, env_list, env_str, require_in_production

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("AGENTRY_DATA_DIR", str(BASE_DIR / "var")))
# Private from its creation; its final mode is set below, once the sandbox's folders are known.
DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)

# Django's debug pages only when asked for (DEBUG=true). DEBUG=false said outright is production:
# the secrets must then come from the environment. Neither (the embedded default) keeps
# generated secrets in DATA_DIR.
DEBUG = env_bool("DEBUG", False)
IS_PRODUCTION = env_is_set("DEBUG") and not DEBUG

SECRET_KEY = env_str("SECRET_KEY")
require_in_production("SECRET_KEY", SECRET_KEY, is_production=IS_PRODUCTION)
if not SECRET_KEY:
    SECRET_KEY = read_or_create_secret(DATA_DIR / "secret.key", new_secret_key)

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", [] if IS_PRODUCTION else ["127.0.0.1", "localhost", "[::1]", "testserver"]
)
require_in_production("ALLOWED_HOSTS", ALLOWED_HOSTS, is_production=IS_PRODUCTION)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

FIELD_ENCRYPTION_KEYS = env_list("FIELD_ENCRYPTION_KEYS", [])
require_in_production("FIELD_ENCRYPTION_KEYS", FIELD_ENCRYPTION_KEYS, is_production=IS_PRODUCTION)
# Empty outside production: core.encryption then generates and keeps a key in DATA_DIR.
FIELD_ENCRYPTION_DEV_KEY_FILE = DATA_DIR / "dev-encryption.key"

INSTALLED_APPS = [
    "core.admin_config.AgentryAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_q",
    "core",
    "tenants",
    "agents",
    "sessions.apps.AgentSessionsConfig",
    "memory",
    "tools",
    "mcp_servers",
    "billing",
    "audit",
    "files",
    "web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.content_security_policy.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.context.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.middleware.JsonApiErrorsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL")
SQLITE_PATH = str(DATA_DIR / "agentry.sqlite3")
if DATABASE_URL.startswith("sqlite:///"):
    # An explicit SQLite file (tests point worker processes at their test database).
    SQLITE_PATH = DATABASE_URL.removeprefix("sqlite:///")
    SQLITE_PATH = SQLITE_PATH if SQLITE_PATH.startswith("/") else str(BASE_DIR / SQLITE_PATH)
if DATABASE_URL and not DATABASE_URL.startswith("sqlite:"):
    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60))
    }
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # While PostgreSQL is unreachable, a connection attempt fails within this (a host that drops
    # packets would otherwise hold it for the operating system's TCP timeout), and requests
    # answer 503 (core.middleware) rather than wait.
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = env_int(
        "DATABASE_CONNECT_TIMEOUT_SECONDS", 3
    )
    # PostgreSQL binds the parameters and keeps the statements a connection repeats prepared
    # (psycopg's server-side binding; Django turns prepared statements off unless asked), where
    # it otherwise parsed and planned each of a run's statements anew: planning took two thirds
    # of the time PostgreSQL spent on a burst's statements (docs/benchmarks.md). A statement is
    # prepared the second time a connection runs it, so a one-off costs no extra round trip. Turn
    # it off behind a transaction-mode pooler that does not track prepared statements (PgBouncer
    # before 1.21).
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=1)
    # Requests (the server's pool of SERVER_THREADS, core.http_application) and runs (many
    # threads per worker, sessions.run_host) borrow a connection from a per-process psycopg pool
    # and give it back when they are done or about to wait, so connections stay bounded however
    # many run at once. A process that forks (the django-q2 cluster) turns it off: a pool's
    # sockets and threads must not cross it.
    if env_bool("DATABASE_POOL", True):
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            # Opened up front: a pool opens missing connections one at a time, which a burst of
            # requests would wait for in line.
            "min_size": env_int("DATABASE_POOL_MIN_SIZE", 8),
            "max_size": env_int("DATABASE_POOL_MAX_SIZE", 16),
            # How long a request or a run waits for a connection. The server has as many threads as
            # connections, so only an unreachable database (the pool cannot replace the
            # connections it dropped) makes a request wait this long: then it answers 503.
            "timeout": env_float("DATABASE_POOL_TIMEOUT_SECONDS", 5.0),
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": SQLITE_PATH,
            # WAL lets the web server read while a worker writes; IMMEDIATE transactions
            # take the write lock up front so concurrent writers wait (busy timeout)
            # instead of failing with "database is locked" on lock upgrade.
            # Kept open between requests only where asked: `manage.py serve` asks for its worker,
            # whose run queue is polled every Q_ORM_POLL_SECONDS, and a new SQLite connection per
            # poll cost a fifth of a core at rest. Request threads keep 0, as Django advises
            # under ASGI.
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 0),
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;"
                ),
            },
            # A file, not :memory:, so worker processes started by tests share it; one per
            # test process so concurrent test runs on one machine do not collide.
            "TEST": {"NAME": str(DATA_DIR / f"test-agentry-{os.getpid()}.sqlite3")},
        }
    }
IS_SQLITE = DATABASES["default"]["ENGINE"].endswith("sqlite3")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache, channel layer, task broker -----------------------------------------
REDIS_URL = env_str("REDIS_URL")
# Connecting to Redis and waiting for a reply each give up after this long: while Redis is
# unreachable, requests answer 503 (core.middleware) rather than hang.
REDIS_TIMEOUT_SECONDS = env_float("REDIS_TIMEOUT_SECONDS", 2.0)
if REDIS_URL:
    REDIS_TIMEOUTS = {
        "socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
        "socket_timeout": REDIS_TIMEOUT_SECONDS,
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # One connection pool per process, not one per request (core/cache.py).
            "OPTIONS": {"pool_class": "core.cache.SharedConnectionPool", **REDIS_TIMEOUTS},
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, **REDIS_TIMEOUTS}]},
        }
    }
else:
    # A file cache is shared by the server and worker processes of one host (throttles,
    # django-q2 cluster stats); the embedded default is one host by definition.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "cache"),
        }
    }
    # In-process only: the embedded default's subscribers read the event store instead.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Tasks (django-q2) ---------------------------------------------------------------
# `timeout` bounds one task of the cluster. `retry` must exceed the longest run: the ORM broker
# keeps a task it handed out (a run's, on the run queue) from every other worker that long.
RUN_TASK_TIMEOUT_SECONDS = env_int("RUN_TASK_TIMEOUT_SECONDS", 3600)
Q_CLUSTER = {
    # Clusters with the same name share one queue; tests use their own name.
    "name": env_str("Q_CLUSTER_NAME", "agentry"),
    # Runs do not go through the cluster (sessions.run_host): it runs schedules and short tasks.
    "workers": env_int("Q_WORKERS", 1),
    "timeout": RUN_TASK_TIMEOUT_SECONDS,
    "retry": RUN_TASK_TIMEOUT_SECONDS + 60,
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    "save_limit": env_int("Q_SAVE_LIMIT", 1000),
    "poll": env_float("Q_ORM_POLL_SECONDS", 0.02),
    "label": "Tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

# --- Auth, API -------------------------------------------------------------------------
# Threads of a server process that run requests' views (core.http_application): as many as its
# database pool holds connections, so a request that has a thread rarely waits for a connection.
SERVER_THREADS = env_int("SERVER_THREADS", 16)
if SERVER_THREADS < 1:
    raise ImproperlyConfigured(f"SERVER_THREADS must be 1 or more, got {SERVER_THREADS}")
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/login/"
# An invitation link works once, for this many hours (tenants.invitations).
INVITATION_TTL_HOURS = env_int("INVITATION_TTL_HOURS", 72)
if INVITATION_TTL_HOURS < 1:
    raise ImproperlyConfigured(f"INVITATION_TTL_HOURS must be 1 or more, got {INVITATION_TTL_HOURS}")

# --- Sign-in and API key throttle (tenants.sign_in_throttle) ------------------------------
# A password sign-in (app and admin) is refused while its account from its address, or its
# address alone, failed this often within the window; an API key while its address sent this
# many wrong keys. There is no limit per account alone: anyone could lock anyone out with it.
SIGN_IN_FAILURE_LIMIT = env_int("SIGN_IN_FAILURE_LIMIT", 10)
SIGN_IN_ADDRESS_FAILURE_LIMIT = env_int("SIGN_IN_ADDRESS_FAILURE_LIMIT", 100)
SIGN_IN_FAILURE_WINDOW_SECONDS = env_int("SIGN_IN_FAILURE_WINDOW_SECONDS", 900)
API_KEY_FAILURE_LIMIT = env_int("API_KEY_FAILURE_LIMIT", 30)
API_KEY_FAILURE_WINDOW_SECONDS = env_int("API_KEY_FAILURE_WINDOW_SECONDS", 900)
_THROTTLE_SETTINGS = {
    "SIGN_IN_FAILURE_LIMIT": SIGN_IN_FAILURE_LIMIT,
    "SIGN_IN_ADDRESS_FAILURE_LIMIT": SIGN_IN_ADDRESS_FAILURE_LIMIT,
    "SIGN_IN_FAILURE_WINDOW_SECONDS": SIGN_IN_FAILURE_WINDOW_SECONDS,
    "API_KEY_FAILURE_LIMIT": API_KEY_FAILURE_LIMIT,
    "API_KEY_FAILURE_WINDOW_SECONDS": API_KEY_FAILURE_WINDOW_SECONDS,
}
for _name, _value in _THROTTLE_SETTINGS.items():
    if _value < 1:
        raise ImproperlyConfigured(f"{_name} must be 1 or more, got {_value}")

# --- E-mail (invitations) ----------------------------------------------------------------
# Without EMAIL_HOST nothing is sent: the inviter copies the link from the page instead.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_BACKEND = env_str("EMAIL_BACKEND") or (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.dummy.EmailBackend"
)
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("Set EMAIL_USE_TLS (STARTTLS) or EMAIL_USE_SSL (implicit TLS), not both.")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT_SECONDS", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Agentry <agentry@localhost>")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.IsTenantMember"],
    "DEFAULT_PARSER_CLASSES": ["core.api.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "core.api.filters.DjangoFilterBackend",
        "rest_framework.filters.SearchFilter",
        "rest_framework.filters.OrderingFilter",
    ],
    "EXCEPTION_HANDLER": "core.api.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["core.api.throttling.ActorRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"actor": env_str("API_THROTTLE_RATE", "600/min")},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # OPTIONS answers 405: the schema at /api/v1/schema/ describes every endpoint.
    "DEFAULT_METADATA_CLASS": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Agentry API",
    "DESCRIPTION": (
        "Define AI agents, chat with them and watch them work. Authenticate with "
        "`Authorization: Bearer <api key>` or a browser session. Every 4xx answers "
        '`{"error": {"code", "message", "fields"}}`.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "MemoryStatusEnum": "memory.models.MemoryStatus",
        "RunStatusEnum": "sessions.models.RunStatus",
    },
    "APPEND_COMPONENTS": {
        "securitySchemes": {
            "ApiKeyAuth": {"type": "http", "scheme": "bearer", "description": "An Agentry API key."},
        }
    },
    "SECURITY": [{"ApiKeyAuth": []}],
    # Swagger UI from the project's own static files (drf-spectacular-sidecar): the docs work
    # with no internet, and the page loads nothing from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Deep links wrap each operation's path in a link inside its expand button (axe-core's
    # nested-interactive rule); the operations still open and close as before.
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema.add_error_responses",
        "core.api.schema.allow_empty_filters",
    ],
}

# --- Model providers ---------------------------------------------------------------------
ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY")
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL") or None
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
MODEL_MAX_RETRIES = env_int("MODEL_MAX_RETRIES", 3)
MODEL_TIMEOUT_SECONDS = env_float("MODEL_TIMEOUT_SECONDS", 120.0)

# --- Runs ----------------------------------------------------------------------------------
# Runs one worker process executes at once (sessions.run_host); SQLite has one writer.
RUN_CONCURRENCY = env_int("RUN_CONCURRENCY", 32 if IS_SQLITE else 256)
RUN_LEASE_SECONDS = env_float("RUN_LEASE_SECONDS", 60.0)
# A worker renews all its runs' leases in one statement this often (well inside the lease) ...
RUN_LEASE_RENEW_SECONDS = env_float("RUN_LEASE_RENEW_SECONDS", RUN_LEASE_SECONDS / 4)
# ... and reads their rows this often for cancels it was not told of and leases it lost.
RUN_HEARTBEAT_SECONDS = env_float("RUN_HEARTBEAT_SECONDS", 1.0)
# Each run host writes its heartbeat row (capacity, active runs) this often; GET /api/v1/workers/
# reports a host silent for three beats as not alive.
RUN_HOST_HEARTBEAT_SECONDS = env_float("RUN_HOST_HEARTBEAT_SECONDS", 5.0)
# On SIGTERM a worker lets its runs finish this long, then hands the rest back to the queue.
RUN_SHUTDOWN_GRACE_SECONDS = env_float("RUN_SHUTDOWN_GRACE_SECONDS", 10.0)
RUN_HAND_BACK_SECONDS = env_float("RUN_HAND_BACK_SECONDS", 5.0)
RUN_MAX_PARALLEL_TOOLS = env_int("RUN_MAX_PARALLEL_TOOLS", 4)

# Planner and executors (sessions.planning).
PLANNER_MAX_STEPS = env_int("PLANNER_MAX_STEPS", 8)
PLANNER_MAX_PARALLEL_STEPS = env_int("PLANNER_MAX_PARALLEL_STEPS", 3)
PLANNER_MAX_REPLANS = env_int("PLANNER_MAX_REPLANS", 1)
# Executor runs one planning run may start over all its plan's revisions.
PLANNER_MAX_CHILDREN_PER_RUN = env_int("PLANNER_MAX_CHILDREN_PER_RUN", 16)
PLANNER_EXECUTOR_MAX_STEPS = env_int("PLANNER_EXECUTOR_MAX_STEPS", 8)
PLANNER_EXECUTOR_TIMEOUT_SECONDS = env_int("PLANNER_EXECUTOR_TIMEOUT_SECONDS", 300)

RUN_SWEEP_INTERVAL_SECONDS = env_float("RUN_SWEEP_INTERVAL_SECONDS", 15.0)
RUN_MAX_ATTEMPTS = env_int("RUN_MAX_ATTEMPTS", 3)
APPROVAL_TTL_SECONDS = env_float("APPROVAL_TTL_SECONDS", 600.0)
APPROVAL_DEFAULT_DECISION = env_str("APPROVAL_DEFAULT_DECISION", "deny")
if APPROVAL_DEFAULT_DECISION not in ("approve", "deny"):
    raise ImproperlyConfigured("APPROVAL_DEFAULT_DECISION must be approve or deny")
# How long an ask_user question waits for the user; then the model is told nobody answered.
ASK_USER_TTL_SECONDS = env_float("ASK_USER_TTL_SECONDS", 1800.0)
IDEMPOTENCY_WINDOW_SECONDS = env_int("IDEMPOTENCY_WINDOW_SECONDS", 24 * 3600)
RUN_EVENT_RETENTION_DAYS = env_int("RUN_EVENT_RETENTION_DAYS", 30)
# Days audit entries are kept (audit.retention); 0 keeps them forever.
AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 365)
# Stream subscribers re-read the event store this often: the only path in the embedded
# default (no cross-process layer), a safety net behind Redis pub/sub otherwise.
STREAM_POLL_SECONDS = env_float("STREAM_POLL_SECONDS", 1.0 if REDIS_URL else 0.05)
STREAM_HEARTBEAT_SECONDS = env_float("STREAM_HEARTBEAT_SECONDS", 20.0)
SSE_KEEPALIVE_SECONDS = env_float("SSE_KEEPALIVE_SECONDS", 15.0)
# Open websocket and SSE streams ask again whether their client may read them this often (and
# before each heartbeat): a revoked key or a removed member loses its streams within it.
STREAM_REAUTHORIZE_SECONDS = env_float("STREAM_REAUTHORIZE_SECONDS", 5.0)

# --- Memory --------------------------------------------------------------------------------------
MEMORY_RECENCY_HALF_LIFE_DAYS = env_float("MEMORY_RECENCY_HALF_LIFE_DAYS", 30.0)
MEMORY_RECENCY_FLOOR = env_float("MEMORY_RECENCY_FLOOR", 0.2)
MEMORY_CONTEXT_LIMIT = env_int("MEMORY_CONTEXT_LIMIT", 5)
MEMORY_MAX_PER_AGENT = env_int("MEMORY_MAX_PER_AGENT", 10_000)
# none (full text only), openai (any OpenAI-compatible /embeddings), sentence-transformers (optional extra)
MEMORY_EMBEDDINGS_BACKEND = env_str("MEMORY_EMBEDDINGS_BACKEND", "none")
if MEMORY_EMBEDDINGS_BACKEND not in ("none", "openai", "sentence-transformers"):
    raise ImproperlyConfigured("MEMORY_EMBEDDINGS_BACKEND must be none, openai or sentence-transformers")
MEMORY_EMBEDDINGS_URL = env_str("MEMORY_EMBEDDINGS_URL")
MEMORY_EMBEDDINGS_MODEL = env_str("MEMORY_EMBEDDINGS_MODEL", "text-embedding-3-small")
MEMORY_EMBEDDINGS_API_KEY = env_str("MEMORY_EMBEDDINGS_API_KEY")
MEMORY_EMBEDDINGS_TIMEOUT_SECONDS = env_float("MEMORY_EMBEDDINGS_TIMEOUT_SECONDS", 10.0)
MEMORY_SENTENCE_TRANSFORMERS_MODEL = env_str("MEMORY_SENTENCE_TRANSFORMERS_MODEL", "all-MiniLM-L6-v2")
MEMORY_VECTOR_SCAN_LIMIT = env_int("MEMORY_VECTOR_SCAN_LIMIT", 1000)
# Propose memories from sessions idle this long (0 switches it off).
MEMORY_EXTRACTION_IDLE_SECONDS = env_int("MEMORY_EXTRACTION_IDLE_SECONDS", 1800)
MEMORY_EXTRACTION_BATCH_SIZE = env_int("MEMORY_EXTRACTION_BATCH_SIZE", 50)

# --- Knowledge search (embeddings: the MEMORY_EMBEDDINGS_* backend, one for the platform) -------
# Only without pgvector: chunks compared by the exact scan in Python (see files/conf.py).
KNOWLEDGE_VECTOR_SCAN_LIMIT = env_int("KNOWLEDGE_VECTOR_SCAN_LIMIT", 2_000)

# --- Context compaction ----------------------------------------------------------------------
# Compact when a request passes this share of the model's context window.
CONTEXT_COMPACTION_THRESHOLD = env_float("CONTEXT_COMPACTION_THRESHOLD", 0.85)
# Always keep at least this many latest messages, up to this share of the budget.
CONTEXT_COMPACTION_KEEP_MESSAGES = env_int("CONTEXT_COMPACTION_KEEP_MESSAGES", 4)
CONTEXT_COMPACTION_KEEP_SHARE = env_float("CONTEXT_COMPACTION_KEEP_SHARE", 0.3)
CONTEXT_COMPACTION_SUMMARY_MAX_TOKENS = env_int("CONTEXT_COMPACTION_SUMMARY_MAX_TOKENS", 4096)

# --- Tools ------------------------------------------------------------------------------------
# Outbound fetches (web_fetch, HTTP tools) refuse private, loopback and metadata addresses
# unless this allows them (a trusted lab network).
ALLOW_PRIVATE_NETWORK_FETCH = env_bool("ALLOW_PRIVATE_NETWORK_FETCH", False)
WEB_FETCH_MAX_BYTES = env_int("WEB_FETCH_MAX_BYTES", 2_000_000)
WEB_FETCH_MAX_CHARS = env_int("WEB_FETCH_MAX_CHARS", 20_000)
WEB_FETCH_TIMEOUT_SECONDS = env_float("WEB_FETCH_TIMEOUT_SECONDS", 20.0)
# web_search exists only when a SearxNG instance is configured.
WEB_SEARCH_SEARXNG_URL = env_str("WEB_SEARCH_SEARXNG_URL")
WEB_SEARCH_TIMEOUT_SECONDS = env_float("WEB_SEARCH_TIMEOUT_SECONDS", 10.0)
# code_run's sandbox (tools/sandbox): bubblewrap on the worker host, limits per call.
SANDBOX_ROOT = Path(env_str("SANDBOX_ROOT") or DATA_DIR / "sandbox")
# Built by `make` from requirements-sandbox.txt; bound read-only into every sandbox.
SANDBOX_PYTHON_DIR = Path(env_str("SANDBOX_PYTHON_DIR") or BASE_DIR / "var" / "sandbox-python")
SANDBOX_CPU_SECONDS = env_int("SANDBOX_CPU_SECONDS", 30)
SANDBOX_WALL_SECONDS = env_float("SANDBOX_WALL_SECONDS", 60.0)
SANDBOX_MEMORY_BYTES = env_int("SANDBOX_MEMORY_BYTES", 1 << 30)
SANDBOX_PROCESSES = env_int("SANDBOX_PROCESSES", 64)
SANDBOX_OUTPUT_BYTES = env_int("SANDBOX_OUTPUT_BYTES", 1 << 20)
SANDBOX_FILE_BYTES = env_int("SANDBOX_FILE_BYTES", 100 << 20)
SANDBOX_WORKSPACE_BYTES = env_int("SANDBOX_WORKSPACE_BYTES", 500 << 20)
SANDBOX_TMP_BYTES = env_int("SANDBOX_TMP_BYTES", 64 << 20)
# A worker running as root runs each session's sandbox as uid BASE + (session id mod COUNT).
SANDBOX_UID_BASE = env_int("SANDBOX_UID_BASE", 1_500_000_000)
SANDBOX_UID_COUNT = env_int("SANDBOX_UID_COUNT", 1_000_000)
WORKSPACE_MAX_FILE_BYTES = env_int("WORKSPACE_MAX_FILE_BYTES", 1_000_000)
WORKSPACE_MAX_FILES = env_int("WORKSPACE_MAX_FILES", 500)
HTTP_TOOL_MAX_RESPONSE_BYTES = env_int("HTTP_TOOL_MAX_RESPONSE_BYTES", 2_000_000)
HTTP_TOOL_MAX_RESPONSE_CHARS = env_int("HTTP_TOOL_MAX_RESPONSE_CHARS", 20_000)

# --- Tenant provider keys ----------------------------------------------------------------------
# A tenant's own base URL must be a public https address, except on the private hosts listed
# here (names, addresses or networks, as for MCP_ALLOWED_PRIVATE_HOSTS), e.g. an intranet Ollama.
PROVIDER_ALLOWED_PRIVATE_HOSTS = env_list("PROVIDER_ALLOWED_PRIVATE_HOSTS", [])

# --- MCP servers -------------------------------------------------------------------------------
# stdio servers run a command on the worker host: off unless the operator enables them.
MCP_ALLOW_STDIO = env_bool("MCP_ALLOW_STDIO", False)
# MCP servers are held to the same guard as web_fetch: public addresses only, except the
# private hosts listed here (names, addresses or networks such as 10.20.0.0/16).
MCP_ALLOWED_PRIVATE_HOSTS = env_list("MCP_ALLOWED_PRIVATE_HOSTS", [])
if env_bool("MCP_ALLOW_PRIVATE_NETWORKS", False):
    # It let every tenant admin reach the host's network; silently ignoring it would break
    # the deployments that relied on it without saying why.
    raise ImproperlyConfigured(
        "MCP_ALLOW_PRIVATE_NETWORKS was removed: "
        "list the private MCP hosts to allow in MCP_ALLOWED_PRIVATE_HOSTS"
    )
MCP_DEGRADED_LATENCY_MS = env_int("MCP_DEGRADED_LATENCY_MS", 2000)

# --- i18n, static ----------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Uploaded files go through Django's storage API: the data folder by default, or any
# S3-compatible store through django-storages (docs/configuration.md, "Files").
FILES_ROOT = Path(env_str("FILES_ROOT", str(DATA_DIR / "files")))
FILES_S3_BUCKET = env_str("FILES_S3_BUCKET")
STORAGES = {
    # Uploaded files (files.models.StoredFile): the only user of the default storage.
    "default": (
        {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": FILES_S3_BUCKET,
                "endpoint_url": env_str("FILES_S3_ENDPOINT_URL") or None,
                "region_name": env_str("FILES_S3_REGION") or None,
                "access_key": env_str("FILES_S3_ACCESS_KEY_ID") or None,
                "secret_key": env_str("FILES_S3_SECRET_ACCESS_KEY") or None,
                "location": env_str("FILES_S3_PREFIX", "agentry/files"),
                "default_acl": None,
                "file_overwrite": False,
                "querystring_auth": True,
            },
        }
        if FILES_S3_BUCKET
        else {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(FILES_ROOT), "base_url": None},
        }
    ),
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# The largest upload, and the most one tenant may store in all.
FILES_MAX_UPLOAD_BYTES = env_int("FILES_MAX_UPLOAD_BYTES", 50 * 1024 * 1024)
FILES_MAX_TENANT_BYTES = env_int("FILES_MAX_TENANT_BYTES", 2 * 1024 * 1024 * 1024)
# Each document is extracted in a child process with this budget (files.extraction_process):
# a document that needs more fails with the reason, and the worker moves on.
FILES_EXTRACTION_CPU_SECONDS = env_int("FILES_EXTRACTION_CPU_SECONDS", 60)
FILES_EXTRACTION_WALL_SECONDS = env_float("FILES_EXTRACTION_WALL_SECONDS", 120)
FILES_EXTRACTION_MEMORY_MB = env_int("FILES_EXTRACTION_MEMORY_MB", 1024)
if min(FILES_EXTRACTION_CPU_SECONDS, FILES_EXTRACTION_WALL_SECONDS, FILES_EXTRACTION_MEMORY_MB) <= 0:
    raise ImproperlyConfigured(
        "FILES_EXTRACTION_CPU_SECONDS, FILES_EXTRACTION_WALL_SECONDS and FILES_EXTRACTION_MEMORY_MB "
        "must each be more than 0"
    )
# A document attached to a message up to this many characters goes into the context whole;
# a longer one is searched with file_search.
FILES_INLINE_CHARACTERS = env_int("FILES_INLINE_CHARACTERS", 20_000)

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# collectstatic fills it in production; until then WhiteNoise serves the finders' files, and
# warns on every start about a folder that does not exist.
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", IS_PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", IS_PRODUCTION)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"mask_secrets": {"()": "core.logging.MaskSecretsFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["mask_secrets"]},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "django-q": {"level": env_str("Q_LOG_LEVEL", "WARNING")},
    },
}

# --- The data folder's modes and the Content-Security-Policy ---------------------------------
# DATA_DIR's own mode waits until here, where the sandbox's folders are known: a worker running
# as root runs code_run as another uid, which must pass through DATA_DIR when they lie inside
# it (0711: it may pass, not list). Everything Agentry writes in it is the owner's alone.
make_private_folder(
    DATA_DIR,
    lets_others_pass=os.geteuid() == 0
    and any(folder.is_relative_to(DATA_DIR) for folder in (SANDBOX_ROOT, SANDBOX_PYTHON_DIR)),
)
if IS_SQLITE:
    make_private_sqlite_file(Path(SQLITE_PATH))
if not REDIS_URL:
    make_private_folder(DATA_DIR / "cache")
if FILES_ROOT.is_relative_to(DATA_DIR) and not FILES_S3_BUCKET:
    make_private_folder(FILES_ROOT)
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700

# Every HTML page (core.content_security_policy): scripts and styles only from this site's own
# files, never inline; images from this site, data: and blob: (attachment previews); requests and
# the websocket back to this site only. The chat's Markdown, the admin and the API docs page
# (drf-spectacular's split view, whose set-up script is a file of its own) all load that way.
CONTENT_SECURITY_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:", "blob:"],
    "connect-src": ["'self'"],
    "frame-ancestors": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "object-src": ["'none'"],
}
