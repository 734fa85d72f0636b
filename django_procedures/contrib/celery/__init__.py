"""Celery glue: the ``django_procedures.tick`` task and its django-celery-beat entry.

Add ``"django_celery_beat"`` and ``"django_procedures.contrib.celery"`` to
``INSTALLED_APPS`` and run ``manage.py migrate``: the periodic task
``"django_procedures: tick"`` is created (or brought up to date) for you, every
``PROCEDURES['TICK_SECONDS']`` seconds rounded up to whole seconds. Run
``manage.py procedures_beat_setup`` to do the same by hand. This package is the
only one that imports ``celery`` or ``django_celery_beat``; the core runs without them.
"""

#: The Celery task's name (``shared_task(name=...)``), as beat sends it.
TASK_NAME = "django_procedures.tick"
#: The django-celery-beat ``PeriodicTask`` that sends it.
PERIODIC_TASK_NAME = "django_procedures: tick"
