"""``include("django_procedures.contrib.prometheus.urls")`` serves the gauges at ``metrics``."""

from django.urls import path

from django_procedures.contrib.prometheus.views import metrics_view

app_name = "django_procedures_prometheus"
urlpatterns = [path("metrics", metrics_view, name="metrics")]
