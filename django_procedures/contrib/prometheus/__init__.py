"""Prometheus for the web process: a ``/metrics`` view with gauges read from the database.

Needs the ``[prometheus]`` extra (``prometheus-client``). Add it to your URLs::

    path("procedures/", include("django_procedures.contrib.prometheus.urls")),   # serves procedures/metrics

The view answers staff users, or requests carrying ``Authorization: Bearer
<PROCEDURES['METRICS_TOKEN']>`` when that setting is set. Worker processes
serve their own counters with ``procedures_worker --metrics-port``.
"""
