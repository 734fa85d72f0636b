"""The one job type the harness asks for: a single atomic step that sleeps ``JOB_WORK_MS``."""

from __future__ import annotations

import time

from django_procedures import Procedure, step

QUEUE = "hardbyte"


class BenchJob(Procedure):
    """The harness's synthetic job: ``state`` carries ``seq``, ``work_ms`` and a padding string."""

    type_name = "hardbyte.Job"
    queue = QUEUE

    @step
    def run(self, ctx):  # type: ignore[no-untyped-def]
        work_ms = self.state.get("work_ms", 0)
        if work_ms:
            time.sleep(work_ms / 1000.0)
        return None
