"""Optional integrations. Only code under ``django_procedures.contrib`` may import third-party task systems."""
