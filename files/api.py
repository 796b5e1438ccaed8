"""Files and knowledge bases over the API: uploads (multipart), downloads through this API's
own authentication, knowledge bases with their documents, and search."""

from django.conf import settings
from django.db.models import QuerySet
from django.http import FileResponse
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, parsers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.filters import StrictFilterSet
from core.api.parsers import JSONParser
from core.api.schema import DOCUMENT_IN_PATH, ERROR_REFERENCE
from core.api.viewsets import TenantScopedViewSet
from files.models import FilePurpose, FileStatus, KnowledgeBase, StoredFile
from files.previews import file_preview
from files.search import SearchScope, search_passages
from files.selectors import (
    document_get,
    document_list_for_knowledge_base,
    file_get_for_actor,
    file_list_for_actor,
    knowledge_base_get_for_actor,
    knowledge_base_list_for_actor,
)
from files.serializers import (
    DocumentUploadSerializer,
    FilePreviewSerializer,
    FileUploadSerializer,
    KnowledgeBaseSerializer,
    KnowledgeDocumentSerializer,
    PassageSerializer,
    SearchQuerySerializer,
    StoredFileSerializer,
)
from files.services import (
    FileTooLarge,
    file_delete,
    file_upload,
    knowledge_base_create,
    knowledge_base_delete,
    knowledge_base_update,
    knowledge_document_add,
)
from sessions.selectors import session_get_for_actor
from tenants.models import Role

# Room for the multipart envelope around the file itself.
MULTIPART_OVERHEAD_BYTES = 64 * 1024
UPLOAD_PARSERS = [parsers.MultiPartParser, JSONParser]
UPLOAD_REFUSALS = {
    413: OpenApiResponse(ERROR_REFERENCE, description="Over the upload or the team's storage limit."),
    415: OpenApiResponse(
        ERROR_REFERENCE, description="Not a kind of file Agentry reads here (told from its bytes)."
    ),
}


def refuse_oversized_body(request: Request) -> None:
    """Refuse by the declared length, before a huge body is read and spooled to disk."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    limit = settings.FILES_MAX_UPLOAD_BYTES
    if length > limit + MULTIPART_OVERHEAD_BYTES:
        raise FileTooLarge(f"The request is {length:,} bytes; the largest upload is {limit:,} bytes.")


def download_response(stored: StoredFile) -> FileResponse:
    """The bytes, as a download; images may be shown inline (thumbnails) but never run as a page."""
    response = FileResponse(
        stored.blob.open("rb"),
        as_attachment=not stored.is_image,
        filename=stored.name,
        content_type=stored.content_type,
    )
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=3600"
    return response


class FileFilter(StrictFilterSet):
    session = filters.UUIDFilter(field_name="session_id")
    run = filters.UUIDFilter(field_name="run_id", help_text="An artifact's run.")
    purpose = filters.ChoiceFilter(choices=FilePurpose.choices)
    status = filters.ChoiceFilter(choices=FileStatus.choices)

    class Meta:
        model = StoredFile
        fields = ["session", "run", "purpose", "status"]


@extend_schema(tags=["files"])
@extend_schema_view(
    list=extend_schema(summary="List files", tags=["files"]),
    retrieve=extend_schema(summary="Read a file's metadata and status", tags=["files"]),
    destroy=extend_schema(summary="Delete a file", tags=["files"]),
)
class FileViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = StoredFile.objects.none()
    serializer_class = StoredFileSerializer
    filterset_class = FileFilter
    search_fields = ["name"]
    ordering_fields = ["created_at", "name", "size"]
    parser_classes = UPLOAD_PARSERS
    # Uploading to a session and deleting one's own upload: the services check whose it is.
    required_roles = {"create": Role.MEMBER, "destroy": Role.MEMBER}

    def get_queryset(self) -> QuerySet[StoredFile]:
        return file_list_for_actor(actor=self.actor)

    @extend_schema(
        summary="Upload a file to a session (multipart)",
        request={"multipart/form-data": FileUploadSerializer},
        responses={201: StoredFileSerializer, **UPLOAD_REFUSALS},
    )
    def create(self, request: Request) -> Response:
        refuse_oversized_body(request)
        serializer = FileUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        session = session_get_for_actor(actor=self.actor, session_id=serializer.validated_data["session"])
        stored = file_upload(
            actor=self.actor,
            upload=serializer.validated_data["file"],
            purpose=FilePurpose.ATTACHMENT,
            session=session,
        )
        return Response(StoredFileSerializer(stored).data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        file_delete(actor=self.actor, stored=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    # The server serves paths ending in /download/ through Django's ASGI handler, so a slow
    # client's download holds none of its pooled threads (core.http_application).
    @extend_schema(summary="Download a file", responses={(200, "*/*"): OpenApiTypes.BINARY})
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str | None = None) -> FileResponse:
        return download_response(file_get_for_actor(actor=self.actor, file_id=pk or ""))

    @extend_schema(
        summary="Preview a file: a CSV's first rows, a text's first characters",
        responses=FilePreviewSerializer,
    )
    @action(detail=True, methods=["get"])
    def preview(self, request: Request, pk: str | None = None) -> Response:
        stored = file_get_for_actor(actor=self.actor, file_id=pk or "")
        return Response(FilePreviewSerializer(file_preview(stored)).data)


@extend_schema(tags=["knowledge"])
@extend_schema_view(
    list=extend_schema(summary="List knowledge bases", tags=["knowledge"]),
    retrieve=extend_schema(summary="Read a knowledge base", tags=["knowledge"]),
    create=extend_schema(summary="Create a knowledge base", tags=["knowledge"]),
    partial_update=extend_schema(summary="Update a knowledge base", tags=["knowledge"]),
    destroy=extend_schema(summary="Delete a knowledge base with its documents", tags=["knowledge"]),
)
class KnowledgeBaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = KnowledgeBase.objects.none()
    serializer_class = KnowledgeBaseSerializer
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at"]
    parser_classes = UPLOAD_PARSERS
    write_role = Role.ADMIN
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[KnowledgeBase]:
        return knowledge_base_list_for_actor(actor=self.actor)

    def _read_again(self, knowledge_base: KnowledgeBase) -> KnowledgeBase:
        return knowledge_base_get_for_actor(actor=self.actor, knowledge_base_id=knowledge_base.pk)

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        knowledge_base = knowledge_base_create(actor=self.actor, **serializer.validated_data)
        return Response(
            self.get_serializer(self._read_again(knowledge_base)).data, status=status.HTTP_201_CREATED
        )

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        knowledge_base = self.get_object()
        serializer = self.get_serializer(knowledge_base, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        knowledge_base_update(actor=self.actor, knowledge_base=knowledge_base, **serializer.validated_data)
        return Response(self.get_serializer(self._read_again(knowledge_base)).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        knowledge_base_delete(actor=self.actor, knowledge_base=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="List a knowledge base's documents",
        methods=["GET"],
        responses=KnowledgeDocumentSerializer(many=True),
        filters=False,
    )
    @extend_schema(
        summary="Add a document (multipart); it is extracted and indexed in the background",
        methods=["POST"],
        request={"multipart/form-data": DocumentUploadSerializer},
        responses={201: KnowledgeDocumentSerializer, **UPLOAD_REFUSALS},
    )
    @action(detail=True, methods=["get", "post"])
    def documents(self, request: Request, pk: str | None = None) -> Response:
        knowledge_base = self.get_object()
        if request.method == "GET":
            page = self.paginate_queryset(document_list_for_knowledge_base(knowledge_base=knowledge_base))
            return self.get_paginated_response(KnowledgeDocumentSerializer(page, many=True).data)
        refuse_oversized_body(request)
        serializer = DocumentUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        document = knowledge_document_add(
            actor=self.actor, knowledge_base=knowledge_base, upload=serializer.validated_data["file"]
        )
        return Response(KnowledgeDocumentSerializer(document).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Remove a document and its file",
        methods=["DELETE"],
        parameters=[DOCUMENT_IN_PATH],
        responses={204: None},
    )
    @action(detail=True, methods=["delete"], url_path=r"documents/(?P<document_id>[^/.]+)")
    def document(self, request: Request, pk: str | None = None, document_id: str = "") -> Response:
        document = document_get(knowledge_base=self.get_object(), document_id=document_id)
        file_delete(actor=self.actor, stored=document.file)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Search a knowledge base",
        parameters=[SearchQuerySerializer],
        responses=PassageSerializer(many=True),
        filters=False,
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def search(self, request: Request, pk: str | None = None) -> Response:
        knowledge_base = self.get_object()
        # An empty parameter (``?limit=``) means its default, as in a form left blank.
        query = SearchQuerySerializer(data={k: v for k, v in request.query_params.items() if v != ""})
        query.is_valid(raise_exception=True)
        scope = SearchScope(tenant_id=self.actor.tenant.pk, knowledge_base_ids=(knowledge_base.pk,))
        passages = search_passages(scope, query.validated_data["q"], limit=query.validated_data["limit"])
        return Response(PassageSerializer(passages, many=True).data)
