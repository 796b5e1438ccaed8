from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from tenants.actors import Actor, actor_for_user
from tenants.services import active_tenant_set
from web.access import page
from web.forms.auth import EmailAuthenticationForm


class SignInView(LoginView):
    template_name = "web/login.html"
    authentication_form = EmailAuthenticationForm
    redirect_authenticated_user = True
    next_page = "web:dashboard"

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if isinstance(form, EmailAuthenticationForm) and form.retry_after:
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response


class SignOutView(LogoutView):
    next_page = "web:login"


@require_POST
@page()
def tenant_switch(request: HttpRequest, actor: Actor) -> HttpResponse:
    wanted = request.POST.get("tenant", "")
    chosen = actor_for_user(request.user, preferred_tenant_id=wanted)
    if chosen is None or str(chosen.tenant.pk) != wanted:
        raise Http404("tenant not found")
    active_tenant_set(request=request, actor=chosen)
    messages.success(request, f"Switched to {chosen.tenant.name}.")
    return redirect("web:dashboard")
