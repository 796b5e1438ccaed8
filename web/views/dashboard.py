from django.http import HttpRequest, HttpResponse

from tenants.actors import Actor
from web.access import page, render_page
from web.charts import run_charts, usage_charts
from web.selectors import dashboard_for_actor


@page()
def dashboard(request: HttpRequest, actor: Actor) -> HttpResponse:
    dashboard = dashboard_for_actor(actor=actor)
    return render_page(
        request,
        actor,
        "web/dashboard.html",
        {
            "dashboard": dashboard,
            "run_charts": run_charts(dashboard.reports),
            "usage_charts": usage_charts(dashboard.reports),
        },
    )
