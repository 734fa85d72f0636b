"""No models: this module exists so that Django sends ``post_migrate`` for this app.

Django sends ``post_migrate`` only to apps with a ``models`` module; the app sets up its
django-celery-beat entry from that signal (see ``apps.py``).
"""
