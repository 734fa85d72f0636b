"""A procedure whose class version a worker takes from its environment, for rolling-deploy tests."""

import os

from django_procedures import Procedure, Status, step


class Versioned(Procedure):
    """One step that says which class version ran it; ``version`` is ``TESTAPP_PROCEDURE_VERSION`` (default 1)."""

    type_name = "testapp.Versioned"
    version = int(os.environ.get("TESTAPP_PROCEDURE_VERSION", "1"))

    @step
    def report(self, ctx):
        return Status.done(output={"ran_by_version": type(self).version})
