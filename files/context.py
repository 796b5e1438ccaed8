"""Attached files in a run's context.

A message stores an attachment as a reference (``{"type": "attachment", "file_id", …}``);
each run resolves it afresh against the file as it is now:

* an image becomes an image block (``agents.runtime.types``) for vision models, the most
  recent ``MAX_IMAGES_IN_CONTEXT`` of them; older ones become a short note;
* a document whose text fits ``FILES_INLINE_CHARACTERS`` goes in whole, with its page marks;
  a longer one is named, and the model is told to search it with ``file_search``;
* a document still being read, or one that failed, is named with its state.

A transcript with no attachments costs no query.
"""

from typing import Any, cast

from django.conf import settings

from agents.runtime.types import ChatMessage, ContentBlock, ImageMediaType, image_block
from files.models import FileStatus, StoredFile

MAX_IMAGES_IN_CONTEXT = 20
# Anthropic refuses larger images; both providers bill an image by its pixels, not its bytes.
MAX_IMAGE_BYTES = 5 * 1024 * 1024


def attachment_ids(transcript: list[ChatMessage]) -> list[str]:
    return [
        block["file_id"]
        for message in transcript
        for block in message.content
        if block.get("type") == "attachment" and isinstance(block.get("file_id"), str)
    ]


def with_attachments_resolved(transcript: list[ChatMessage], *, session_id: Any) -> list[ChatMessage]:
    """Attachments are the session's own files: a reference to any other file finds nothing."""
    wanted = attachment_ids(transcript)
    if not wanted:
        return transcript
    files = {
        str(stored.pk): stored for stored in StoredFile.objects.filter(session_id=session_id, pk__in=wanted)
    }
    images_shown = _images_to_show(wanted, files)
    return [
        ChatMessage(
            role=message.role,
            content=[_resolved(block, files, images_shown) for block in message.content],
        )
        for message in transcript
    ]


def _images_to_show(wanted: list[str], files: dict[str, StoredFile]) -> set[str]:
    images = [file_id for file_id in wanted if file_id in files and files[file_id].is_image]
    return set(images[-MAX_IMAGES_IN_CONTEXT:])


def _resolved(block: ContentBlock, files: dict[str, StoredFile], images_shown: set[str]) -> ContentBlock:
    if block.get("type") != "attachment":
        return block
    stored = files.get(str(block.get("file_id")))
    if stored is None:
        return _note(f"The attached file {block.get('name', '')!r} has been deleted.")
    if stored.is_image:
        return (
            _image_block(stored) if stored.pk and str(stored.pk) in images_shown else _earlier_image(stored)
        )
    return _document_block(stored)


def _note(text: str) -> ContentBlock:
    return {"type": "text", "text": f"[{text}]"}


def _image_block(stored: StoredFile) -> ContentBlock:
    if stored.size > MAX_IMAGE_BYTES:
        return _note(
            f"The attached image {stored.name!r} is {stored.size:,} bytes, more than the "
            f"{MAX_IMAGE_BYTES:,} a model accepts; it is not shown."
        )
    with stored.blob.open("rb") as fileobj:
        data = fileobj.read()
    return image_block(
        data=data,
        media_type=cast(ImageMediaType, stored.content_type),
        name=stored.name,
        width=stored.width,
        height=stored.height,
    )


def _earlier_image(stored: StoredFile) -> ContentBlock:
    return _note(f"An image {stored.name!r} was attached here; only the latest images are shown again.")


def _document_block(stored: StoredFile) -> ContentBlock:
    if stored.status == FileStatus.FAILED:
        return _note(f"The attached file {stored.name!r} could not be read: {stored.status_reason}")
    if stored.status != FileStatus.READY:
        return _note(f"The attached file {stored.name!r} is still being read; its text is not available yet.")
    described = _described(stored)
    if stored.character_count > settings.FILES_INLINE_CHARACTERS:
        return _note(
            f"The attached file {described} is too long to include whole: search it with the "
            "file_search tool."
        )
    opening = f'<attachment name="{stored.name}" type="{stored.content_type}">'
    return {"type": "text", "text": f"{opening}\n{stored.text}\n</attachment>"}


def _described(stored: StoredFile) -> str:
    pages = f", {stored.page_count} pages" if stored.page_count else ""
    return f"{stored.name!r} ({stored.content_type}{pages}, {stored.character_count:,} characters)"
