"""The ``/metrics`` view of the web process: staff users, or a bearer token (``PROCEDURES['METRICS_TOKEN']``)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.crypto import constant_time_compare
from django.views.decorators.http import require_GET

from django_procedures.conf import conf
from django_procedures.contrib.prometheus import gauges

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily
except ImportError as error:  # pragma: no cover - the extra is missing
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("django_procedures.contrib.prometheus needs prometheus-client: "
                               "pip install 'django-procedures[prometheus]'") from error


def allowed(request: HttpRequest) -> bool:
    """A staff user's session, or ``Authorization: Bearer <METRICS_TOKEN>`` when that setting is set."""
    token = conf.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and constant_time_compare(given.strip(), str(token)):
            return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


class DatabaseCollector:
    """The gauges of :func:`gauges.collect`, read at each scrape."""

    def collect(self) -> Any:
        values = gauges.collect()
        procedures = GaugeMetricFamily("django_procedures_procedures", "Unfinished procedures by queue and status "
                                       "(counted up to METRICS_COUNT_CAP rows per status).", labels=["queue", "status"])
        capped = GaugeMetricFamily("django_procedures_procedures_capped", "1 if the count of this status stopped "
                                   "at METRICS_COUNT_CAP (the counts are then a floor).", labels=["status"])
        for status, by_queue in values["procedures"].items():
            for queue, n in sorted(by_queue.items()):
                procedures.add_metric([queue, status], n)
            capped.add_metric([status], 1.0 if values["capped"][status] else 0.0)
        oldest = GaugeMetricFamily("django_procedures_oldest_due_seconds", "Age of the oldest due procedure no "
                                   "worker has claimed, per queue.", labels=["queue"])
        for queue, at in sorted(values["oldest_due"].items()):
            oldest.add_metric([queue], max(0.0, (values["now"] - at).total_seconds()))
        lag = GaugeMetricFamily("django_procedures_schedule_lag_seconds", "How far past due the next tick of an "
                                "enabled schedule is (0 when it is not due yet).", labels=["schedule"])
        drift = GaugeMetricFamily("django_procedures_schedule_drift_seconds", "Drift of the schedule's last tick.",
                                  labels=["schedule"])
        for name, seconds, last_drift in values["schedules"]:
            lag.add_metric([name], seconds)
            if last_drift is not None:
                drift.add_metric([name], last_drift)
        workers = GaugeMetricFamily("django_procedures_workers", "Worker processes by state: alive, or gone "
                                    "(stopped renewing without stopping).", labels=["state"])
        for state, n in sorted(values["workers"].items()):
            workers.add_metric([state], n)
        alive = GaugeMetricFamily("django_procedures_workers_alive", "Worker processes alive (renewed in time).",
                                  value=values["workers"].get("alive", 0))
        in_use = GaugeMetricFamily("django_procedures_limit_in_use", "Running attempts holding a slot of a "
                                   "flow-control limit, fleet-wide (limits in use only).", labels=["limit"])
        most = GaugeMetricFamily("django_procedures_limit_max", "The concurrency max the last claim of the limit "
                                 "declared.", labels=["limit"])
        for name, n, top in values.get("limits", ()):
            in_use.add_metric([name], n)
            if top is not None:
                most.add_metric([name], top)
        yield from (procedures, capped, oldest, lag, drift, workers, alive, in_use, most)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        response = HttpResponse("Forbidden: log in as staff, or send Authorization: Bearer <METRICS_TOKEN>.\n",
                                status=403, content_type="text/plain")
        if conf.METRICS_TOKEN:
            response.status_code = 401
            response["WWW-Authenticate"] = 'Bearer realm="django-procedures metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
