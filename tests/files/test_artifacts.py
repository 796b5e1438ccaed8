"""Artifacts: files a tool made during a run, stored as the run's files, shown with previews,
downloadable only within their tenant, and deleted with their session."""

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent
from files.artifacts import MAX_ARTIFACTS_PER_CALL, store_artifacts
from files.models import StoredFile
from sessions.models import Message, MessageRole, Run, RunEvent
from tests.conftest import Cast
from tests.factories import field_values, last_placed_message_id, make_agent, make_run
from tests.files.documents import png_bytes
from tools.builtins.base import ToolContext
from tools.builtins.workspace_files import run_file_write

pytestmark = pytest.mark.django_db

CSV_TEXT = "city,visitors\n" + "".join(f"Town {number},{number * 100}\n" for number in range(1, 31))


def context_of(run: Run, tool_call_id: str = "call_chart") -> ToolContext:
    return ToolContext(
        tenant_id=run.tenant_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        run_id=run.pk,
        user_id=run.created_by_id,
        user_role="member",
        tool_call_id=tool_call_id,
    )


def xlsx_bytes() -> bytes:
    """A zip holding a spreadsheet's parts: an archive Agentry keeps but cannot show."""
    output = io.BytesIO()
    with zipfile.ZipFile(output, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("xl/workbook.xml", "<workbook/>")
    return output.getvalue()


def write(folder: Path, name: str, data: bytes) -> tuple[str, Path]:
    path = folder / name
    path.write_bytes(data)
    return name, path


@pytest.fixture
def agent(cast: Cast) -> Agent:
    return make_agent(tenant=cast.tenant_a, name="analyst")


@pytest.fixture
def run(agent: Agent, cast: Cast) -> Run:
    return make_run(agent=agent, user=cast.alice)


def expected(stored: StoredFile) -> dict[str, Any]:
    return {
        "file_id": str(stored.pk),
        "name": stored.name,
        "content_type": stored.content_type,
        "size": stored.size,
        "download_url": f"/api/v1/files/{stored.pk}/download/",
    }


def test_images_csv_and_unknown_files_are_kept_with_their_types(run: Run, cast: Cast, tmp_path: Path) -> None:
    outputs = [
        write(tmp_path, "chart.png", png_bytes(64, 48)),
        write(tmp_path, "visitors.csv", CSV_TEXT.encode()),
        write(tmp_path, "report.xlsx", xlsx_bytes()),
        write(tmp_path, "weights.bin", bytes(range(256)) * 4),
        write(tmp_path, "../notes.txt", b"plain words"),
    ]

    results = store_artifacts(context_of(run), outputs)

    rows = {stored.name: stored for stored in StoredFile.objects.filter(run=run)}
    assert [result["name"] for result in results] == [
        "chart.png",
        "visitors.csv",
        "report.xlsx",
        "weights.bin",
        "notes.txt",
    ]
    assert results == [expected(rows[result["name"]]) for result in results]
    assert {name: stored.content_type for name, stored in rows.items()} == {
        "chart.png": "image/png",
        "visitors.csv": "text/csv",
        "report.xlsx": "application/octet-stream",
        "weights.bin": "application/octet-stream",
        "notes.txt": "text/plain",
    }
    chart = rows["chart.png"]
    assert (chart.width, chart.height, chart.size, chart.status) == (64, 48, len(png_bytes(64, 48)), "ready")
    assert {
        (s.purpose, s.session_id, s.tool_call_id, s.uploaded_by_id, s.chunk_count) for s in rows.values()
    } == {("artifact", run.session_id, "call_chart", cast.alice.pk, 0)}
    assert rows["visitors.csv"].blob.open("rb").read() == CSV_TEXT.encode()


def test_each_artifact_is_announced_with_an_event(run: Run, tmp_path: Path) -> None:
    [result] = store_artifacts(context_of(run), [write(tmp_path, "chart.png", png_bytes(8, 8))])

    event = RunEvent.objects.get(run=run, type="artifact.created")
    assert event.session_id == run.session_id
    assert event.data == {**result, "run_id": str(run.pk), "tool_call_id": "call_chart"}


def test_files_over_the_caps_are_skipped_with_a_reason(
    run: Run, cast: Cast, tmp_path: Path, settings: Any
) -> None:
    settings.FILES_MAX_UPLOAD_BYTES = 1000
    settings.FILES_MAX_TENANT_BYTES = 1500
    many = [write(tmp_path, f"part-{number}.txt", b"x") for number in range(MAX_ARTIFACTS_PER_CALL + 1)]
    outputs = [
        write(tmp_path, "big.txt", b"b" * 1001),
        write(tmp_path, "empty.txt", b""),
        write(tmp_path, "first.txt", b"f" * 900),
        write(tmp_path, "second.txt", b"s" * 900),
    ]
    (tmp_path / "folder").mkdir()
    os.symlink("/etc/passwd", tmp_path / "passwd")
    outputs += [("folder", tmp_path / "folder"), ("passwd", tmp_path / "passwd"), ("gone", tmp_path / "gone")]

    results = store_artifacts(context_of(run), outputs)
    capped = store_artifacts(context_of(run, "call_many"), many)

    assert [result.get("skipped") for result in results] == [
        "The file is 1,001 bytes; the largest upload is 1,000 bytes.",
        "The file is empty.",
        None,
        "This team's files would take 1,800 bytes; the limit is 1,500 bytes. Delete files to make room.",
        "not a regular file (a folder, link or device)",
        "the file could not be read (Too many levels of symbolic links)",
        "the file could not be read (No such file or directory)",
    ]
    assert results[1] == {"name": "empty.txt", "skipped": "The file is empty."}
    assert [result.get("skipped") for result in capped] == [None] * MAX_ARTIFACTS_PER_CALL + [
        f"only the first {MAX_ARTIFACTS_PER_CALL} files of a call are kept"
    ]
    assert sorted(StoredFile.objects.filter(run=run).values_list("name", flat=True)) == sorted(
        ["first.txt", *(f"part-{number}.txt" for number in range(MAX_ARTIFACTS_PER_CALL))]
    )
    assert RunEvent.objects.filter(run=run, type="artifact.created").count() == MAX_ARTIFACTS_PER_CALL + 1


def test_previews_show_csv_rows_text_and_images(run: Run, alice_api: APIClient, tmp_path: Path) -> None:
    results = store_artifacts(
        context_of(run),
        [
            write(tmp_path, "visitors.csv", CSV_TEXT.encode()),
            write(tmp_path, "log.txt", ("line of output\n" * 200).encode()),
            write(tmp_path, "chart.png", png_bytes(8, 8)),
            write(tmp_path, "weights.bin", bytes(range(256))),
        ],
    )
    previews = [alice_api.get(f"/api/v1/files/{result['file_id']}/preview/") for result in results]

    assert [response.status_code for response in previews] == [200, 200, 200, 200]
    csv_preview, text_preview, image_preview, binary_preview = (response.json() for response in previews)
    assert csv_preview == {
        "kind": "csv",
        "rows": [["city", "visitors"], *([f"Town {n}", str(n * 100)] for n in range(1, 10))],
        "text": "",
        "is_truncated": True,
    }
    assert text_preview == {
        "kind": "text",
        "rows": [],
        "text": ("line of output\n" * 200)[:2000],
        "is_truncated": True,
    }
    assert image_preview == {"kind": "image", "rows": [], "text": "", "is_truncated": False}
    assert binary_preview == {"kind": "none", "rows": [], "text": "", "is_truncated": False}


def test_the_run_and_its_last_answer_list_the_artifacts(
    run: Run, alice_api: APIClient, tmp_path: Path
) -> None:
    def answer(position: int, text: str) -> Message:
        return Message.objects.create(
            tenant=run.tenant,
            session=run.session,
            parent_id=last_placed_message_id(run.session),
            run=run,
            role=MessageRole.ASSISTANT,
            content=[{"type": "text", "text": text}],
            position=position,
        )

    first = answer(1, "Drawing the chart.")
    results = store_artifacts(
        context_of(run),
        [write(tmp_path, "chart.png", png_bytes(8, 8)), write(tmp_path, "visitors.csv", CSV_TEXT.encode())],
    )
    last = answer(2, "Here is the chart.")

    run_body = alice_api.get(f"/api/v1/runs/{run.pk}/").json()
    messages = alice_api.get(f"/api/v1/sessions/{run.session_id}/messages/").json()["results"]
    listed = alice_api.get(f"/api/v1/files/?purpose=artifact&run={run.pk}").json()["results"]

    assert run_body["artifacts"] == results
    assert {message["id"]: message["artifacts"] for message in messages} == {
        str(first.pk): [],
        str(last.pk): results,
    }
    assert sorted(
        (file["id"], file["run"], file["tool_call_id"], file["purpose"]) for file in listed
    ) == sorted((result["file_id"], str(run.pk), "call_chart", "artifact") for result in results)


def test_file_write_keeps_the_written_text_as_an_artifact(run: Run, cast: Cast) -> None:
    result = run_file_write(
        {"path": "notes/summary.md", "content": "# Summary\n\nAll good.\n"}, context_of(run)
    )

    stored = StoredFile.objects.get(run=run)
    assert result == "created notes/summary.md (21 bytes); shown to the user as a download (summary.md)"
    assert (stored.name, stored.content_type, stored.size, stored.purpose, stored.tool_call_id) == (
        "summary.md",
        "text/markdown",
        21,
        "artifact",
        "call_chart",
    )
    assert stored.blob.open("rb").read() == b"# Summary\n\nAll good.\n"
    assert RunEvent.objects.filter(run=run, type="artifact.created").count() == 1


def test_deleting_the_session_deletes_its_artifacts_and_their_bytes(
    run: Run, alice_api: APIClient, files_root: Path, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    store_artifacts(context_of(run), [write(tmp_path, "chart.png", png_bytes(8, 8))])
    blobs = [files_root / str(stored.blob.name) for stored in StoredFile.objects.filter(run=run)]
    assert [path.is_file() for path in blobs] == [True]
    Run.objects.filter(pk=run.pk).update(status="completed")  # an active run's session cannot go

    with django_capture_on_commit_callbacks(execute=True):
        deleted = alice_api.delete(f"/api/v1/sessions/{run.session_id}/")

    assert deleted.status_code == 204
    assert [path.exists() for path in blobs] == [False]
    assert StoredFile.objects.count() == 0


def test_another_tenant_cannot_list_read_preview_download_or_delete_an_artifact(
    run: Run, carol_api: APIClient, tmp_path: Path
) -> None:
    [result] = store_artifacts(context_of(run), [write(tmp_path, "visitors.csv", CSV_TEXT.encode())])
    stored = StoredFile.objects.get(pk=result["file_id"])
    before = field_values(stored)
    url = f"/api/v1/files/{stored.pk}/"

    listed = carol_api.get(f"/api/v1/files/?purpose=artifact&run={run.pk}")
    responses = [
        carol_api.get(url),
        carol_api.get(f"{url}preview/"),
        carol_api.get(f"{url}download/"),
        carol_api.delete(url),
        carol_api.get(f"/api/v1/runs/{run.pk}/"),
    ]

    assert (listed.status_code, listed.json()["results"]) == (200, [])
    assert [response.status_code for response in responses] == [404, 404, 404, 404, 404]
    assert field_values(StoredFile.objects.get(pk=stored.pk)) == before
    assert stored.blob.open("rb").read() == CSV_TEXT.encode()
