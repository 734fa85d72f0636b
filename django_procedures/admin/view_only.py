"""The admin's pages of rows only the store writes: viewed, never added, changed or deleted from a form."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ViewOnlyAdmin(admin.ModelAdmin):
    """A ``ModelAdmin`` that only shows its rows (its actions, if any, go through the store)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
