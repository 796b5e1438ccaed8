"""The sessions API's serializers: sessions, messages, runs and events."""

from sessions.serializers.messages import (
    BranchShowSerializer,
    CitationSerializer,
    MessageCreateSerializer,
    MessageSerializer,
)
from sessions.serializers.runs import (
    AnswerSerializer,
    ApproveSerializer,
    PostMessageResponseSerializer,
    RunEventSerializer,
    RunSerializer,
    RunSummarySerializer,
    StepSerializer,
    ToolApprovalSerializer,
    UsageSerializer,
    UserQuestionSerializer,
)
from sessions.serializers.sessions import (
    SessionCreateSerializer,
    SessionDetailSerializer,
    SessionLaneMixin,
    SessionSerializer,
    SessionUpdateSerializer,
)

__all__ = [
    "AnswerSerializer",
    "ApproveSerializer",
    "BranchShowSerializer",
    "CitationSerializer",
    "MessageCreateSerializer",
    "MessageSerializer",
    "PostMessageResponseSerializer",
    "RunEventSerializer",
    "RunSerializer",
    "RunSummarySerializer",
    "SessionCreateSerializer",
    "SessionDetailSerializer",
    "SessionLaneMixin",
    "SessionSerializer",
    "SessionUpdateSerializer",
    "StepSerializer",
    "ToolApprovalSerializer",
    "UsageSerializer",
    "UserQuestionSerializer",
]
