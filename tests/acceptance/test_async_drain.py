"""Acceptance: docs/async.md's "Testing: drain()" — drain from a running event loop, and wrapped in sync_to_async."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connection

from django_procedures import Procedure, step
from django_procedures.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)


class Awaits(Procedure):
    type_name = "acc.Awaits"

    @step
    async def only(self, ctx):
        await asyncio.sleep(0)


def test_drain_inside_a_running_loop_raises_before_claiming_and_works_wrapped():
    handle = Awaits.submit({})

    async def unwrapped():
        drain()

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(unwrapped())
    assert handle.refresh().status == "ready"  # nothing was claimed

    def drain_on_its_thread():
        try:
            return drain()
        finally:
            connection.close()  # sync_to_async's thread has a connection of its own: closed for the teardown

    async def wrapped():
        return await sync_to_async(drain_on_its_thread)()

    assert asyncio.run(wrapped()).claimed == 1
    assert handle.refresh().status == "done"
