from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from rest_framework.exceptions import APIException

from agents.selectors import agent_list_for_actor
from files.models import KnowledgeBase
from files.search import SearchScope, search_passages
from files.selectors import (
    document_get,
    document_list_for_knowledge_base,
    knowledge_base_get_for_actor,
    knowledge_base_list_for_actor,
)
from files.services import (
    file_delete,
    knowledge_base_create,
    knowledge_base_delete,
    knowledge_base_update,
    knowledge_document_add,
)
from tenants.actors import Actor
from tenants.models import Role
from web.access import page, render_page
from web.forms.common import apply_service_errors
from web.forms.knowledge import DocumentUploadForm, KnowledgeBaseForm, KnowledgeSearchForm
from web.responses import error_text

KNOWLEDGE_BASE_FIELD_NAMES = {"agent_ids": "agents"}
SEARCH_RESULTS = 8


@page()
def knowledge_list(request: HttpRequest, actor: Actor) -> HttpResponse:
    knowledge_bases = knowledge_base_list_for_actor(actor=actor)
    return render_page(request, actor, "web/knowledge/list.html", {"knowledge_bases": knowledge_bases})


def _knowledge_base_form_page(
    request: HttpRequest, actor: Actor, knowledge_base: KnowledgeBase | None
) -> HttpResponse:
    agents = agent_list_for_actor(actor=actor).order_by("name")
    context = {"knowledge_base": knowledge_base}
    if request.method != "POST":
        initial = KnowledgeBaseForm.initial_for(knowledge_base) if knowledge_base else None
        form = KnowledgeBaseForm(initial=initial, agents=agents)
        return render_page(request, actor, "web/knowledge/form.html", {**context, "form": form})
    form = KnowledgeBaseForm(request.POST, agents=agents)
    if form.is_valid():
        try:
            if knowledge_base is None:
                saved = knowledge_base_create(actor=actor, **form.service_fields())
            else:
                saved = knowledge_base_update(
                    actor=actor, knowledge_base=knowledge_base, **form.service_fields()
                )
        except ValidationError as error:
            apply_service_errors(form, error, KNOWLEDGE_BASE_FIELD_NAMES)
        else:
            messages.success(request, f"Knowledge base “{saved.name}” saved.")
            return redirect("web:knowledge-detail", knowledge_base_id=saved.pk)
    return render_page(request, actor, "web/knowledge/form.html", {**context, "form": form}, status=400)


@page(role=Role.ADMIN)
def knowledge_create(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _knowledge_base_form_page(request, actor, None)


@page(role=Role.ADMIN)
def knowledge_edit(request: HttpRequest, actor: Actor, knowledge_base_id: str) -> HttpResponse:
    knowledge_base = knowledge_base_get_for_actor(actor=actor, knowledge_base_id=knowledge_base_id)
    return _knowledge_base_form_page(request, actor, knowledge_base)


def _detail_page(
    request: HttpRequest,
    actor: Actor,
    knowledge_base: KnowledgeBase,
    upload_form: DocumentUploadForm | None = None,
    *,
    status: int = 200,
) -> HttpResponse:
    search = KnowledgeSearchForm(request.GET)
    query = search.cleaned_data["q"].strip() if search.is_valid() else ""
    scope = SearchScope(tenant_id=actor.tenant.pk, knowledge_base_ids=(knowledge_base.pk,))
    context = {
        "knowledge_base": knowledge_base,
        "documents": document_list_for_knowledge_base(knowledge_base=knowledge_base),
        "upload_form": upload_form or DocumentUploadForm(),
        "search_form": search,
        "query": query,
        "passages": search_passages(scope, query, limit=SEARCH_RESULTS) if query else [],
    }
    return render_page(request, actor, "web/knowledge/detail.html", context, status=status)


@page()
def knowledge_detail(request: HttpRequest, actor: Actor, knowledge_base_id: str) -> HttpResponse:
    knowledge_base = knowledge_base_get_for_actor(actor=actor, knowledge_base_id=knowledge_base_id)
    return _detail_page(request, actor, knowledge_base)


@require_POST
@page(role=Role.ADMIN)
def knowledge_document_upload(request: HttpRequest, actor: Actor, knowledge_base_id: str) -> HttpResponse:
    knowledge_base = knowledge_base_get_for_actor(actor=actor, knowledge_base_id=knowledge_base_id)
    form = DocumentUploadForm(request.POST, request.FILES)
    if form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            document = knowledge_document_add(actor=actor, knowledge_base=knowledge_base, upload=upload)
        except ValidationError as error:
            apply_service_errors(form, error)
        except APIException as refusal:  # too large, or not a kind of file Agentry reads
            form.add_error("file", str(refusal.detail))
        else:
            messages.success(request, f"“{document.file.name}” added; it is being read.")
            return redirect("web:knowledge-detail", knowledge_base_id=knowledge_base.pk)
    return _detail_page(request, actor, knowledge_base, form, status=400)


@require_POST
@page(role=Role.ADMIN)
def knowledge_document_delete(
    request: HttpRequest, actor: Actor, knowledge_base_id: str, document_id: str
) -> HttpResponse:
    knowledge_base = knowledge_base_get_for_actor(actor=actor, knowledge_base_id=knowledge_base_id)
    document = document_get(knowledge_base=knowledge_base, document_id=document_id)
    name = document.file.name
    file_delete(actor=actor, stored=document.file)
    messages.success(request, f"“{name}” removed.")
    return redirect("web:knowledge-detail", knowledge_base_id=knowledge_base.pk)


@require_POST
@page(role=Role.ADMIN)
def knowledge_delete(request: HttpRequest, actor: Actor, knowledge_base_id: str) -> HttpResponse:
    knowledge_base = knowledge_base_get_for_actor(actor=actor, knowledge_base_id=knowledge_base_id)
    name = knowledge_base.name
    try:
        knowledge_base_delete(actor=actor, knowledge_base=knowledge_base)
    except ValidationError as error:
        messages.error(request, error_text(error))
        return redirect("web:knowledge-detail", knowledge_base_id=knowledge_base.pk)
    messages.success(request, f"Knowledge base “{name}” deleted, with its documents.")
    return redirect("web:knowledge")
