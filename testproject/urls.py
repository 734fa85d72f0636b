from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls)]

try:  # the [prometheus] extra
    import prometheus_client  # noqa: F401
except ImportError:
    pass
else:
    urlpatterns.append(path("procedures/", include("django_procedures.contrib.prometheus.urls")))
