from django.http import HttpRequest, HttpResponse

from tenants.actors import Actor
from web.access import page, render_page
from web.selectors import dashboard_for_actor


@page()
def dashboard(request: HttpRequest, actor: Actor) -> HttpResponse:
    return render_page(request, actor, "web/dashboard.html", {"dashboard": dashboard_for_actor(actor=actor)})
