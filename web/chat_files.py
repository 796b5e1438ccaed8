"""Files on the chat page: what a user message carries (attachments) and what a run's tools
made (artifacts), as their chips and cards show them."""

from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from files.models import StoredFile
from files.previews import file_preview
from sessions.models import Message


@dataclass(frozen=True)
class ArtifactCard:
    """A file a tool made, as its card shows it: name, size, type, and a preview."""

    file_id: str
    name: str
    content_type: str
    size: int
    # ``files.previews.file_preview``: {"kind", "rows", "text", "is_truncated"}.
    preview: dict[str, Any]

    @property
    def download_url(self) -> str:
        return reverse("file-download", kwargs={"pk": self.file_id})


def artifact_card(stored: StoredFile) -> ArtifactCard:
    return ArtifactCard(
        file_id=str(stored.pk),
        name=stored.name,
        content_type=stored.content_type,
        size=stored.size,
        preview=file_preview(stored),
    )


@dataclass(frozen=True)
class Attachment:
    """A file a user message carries, as its attachment block recorded it when it was sent."""

    file_id: str
    name: str
    content_type: str
    size: int

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")

    @property
    def download_url(self) -> str:
        return reverse("file-download", kwargs={"pk": self.file_id})


def message_attachments(message: Message | None) -> list[Attachment]:
    if message is None:
        return []
    return [
        Attachment(
            file_id=str(block.get("file_id", "")),
            name=str(block.get("name", "")),
            content_type=str(block.get("content_type", "")),
            size=int(block.get("size") or 0),
        )
        for block in message.content
        if block.get("type") == "attachment" and block.get("file_id")
    ]
