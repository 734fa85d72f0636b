"""The example project's Celery app: ``celery -A testproject worker`` and ``celery -A testproject beat``.

The broker is Redis (``CELERY_BROKER_URL``, default ``redis://127.0.0.1:6379/7``); beat keeps its
schedule in the database with django-celery-beat's ``DatabaseScheduler``, where
``django_procedures.contrib.celery`` has set up the ``django_procedures.tick`` entry on ``migrate``.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

app = Celery("testproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
