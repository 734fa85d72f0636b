"""A task whose module only workers started with TESTAPP_EXTRA_TYPES=1 import (the tests import it directly)."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task
def only_some_workers(n):
    return n * 2
