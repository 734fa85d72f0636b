"""The procedures ``manage.py procedures_demo`` runs (autodiscovered, like ``admin.py``).

Three small stories, each a few lines of plain Python:

- ``ProvisionTenant``: four steps; each records what it made in ``self.state``,
  which is saved with the checkpoint that ends the step.
- ``ChargeInvoice``: its payment call fails on the first attempt and succeeds
  when the retry policy runs it again half a second later.
- ``SyncToCRM``: the CRM keeps answering 503, so the step uses up its budget
  of three attempts and the procedure fails for good.
- ``RefreshRates``: a quick one-step procedure that the demo's schedule starts
  every second (``register_schedule(..., period=timedelta(seconds=1))``), ticked
  by the worker itself (``procedures_worker --with-scheduler``).

The failures are simulated and the sleeps stand for real work, so the
durations in the demo's table are not all zero.
"""

from __future__ import annotations

import time

from django_procedures import Procedure, RetryPolicy, Status, step


def work(seconds: float) -> None:
    """Stand-in for the real thing (a database call, an HTTP request...)."""
    time.sleep(seconds)


class ProvisionTenant(Procedure):
    """Set up a new customer: database, schema, admin user, welcome mail."""

    type_name = "demo.ProvisionTenant"

    @step
    def create_database(self, ctx):
        work(0.05)
        self.state["database"] = f"tenant_{self.state['tenant']}"

    @step
    def apply_schema(self, ctx):
        work(0.08)
        self.state["tables"] = ["users", "projects", "invoices"]

    @step
    def create_admin(self, ctx):
        work(0.03)
        self.state["admin"] = f"admin@{self.state['tenant']}.example"

    @step
    def send_welcome(self, ctx):
        work(0.04)
        return Status.done(output={"database": self.state["database"], "tables": len(self.state["tables"]),
                                   "admin": self.state["admin"]})


class ChargeInvoice(Procedure):
    """Charge a card through a payment gateway that times out once."""

    type_name = "demo.ChargeInvoice"
    # Attempt n waits initial_delay * backoff ** (n - 1) seconds: 0.5 s, then 1 s.
    retry = RetryPolicy(max_attempts=3, initial_delay=0.5, backoff=2.0, jitter=0.0)

    @step
    def reserve_amount(self, ctx):
        work(0.02)
        self.state["reserved_cents"] = self.state["amount_cents"]

    # An external call: not inside a database transaction, and at least once.
    @step(atomic=False)
    def charge_card(self, ctx):
        work(0.05)
        if ctx.attempt == 1:
            raise ConnectionError("payment gateway timed out")
        self.state["charge_id"] = f"ch_{str(ctx.procedure_id)[:8]}"
        self.state["charged_on_attempt"] = ctx.attempt

    @step
    def record_payment(self, ctx):
        work(0.02)
        return Status.done(output={"invoice": self.state["invoice"], "charge_id": self.state["charge_id"],
                                   "charged_on_attempt": self.state["charged_on_attempt"]})


class SyncToCRM(Procedure):
    """Push contacts to a CRM that is down: three attempts, then the procedure fails for good."""

    type_name = "demo.SyncToCRM"
    retry = RetryPolicy(max_attempts=3, initial_delay=0.25, backoff=2.0, jitter=0.0)

    @step
    def export_contacts(self, ctx):
        work(0.03)
        self.state["contacts"] = 42

    @step(atomic=False)
    def push_to_crm(self, ctx):
        work(0.03)
        raise RuntimeError("CRM returned HTTP 503")


class RefreshRates(Procedure):
    """Refresh exchange rates: one quick step, started every second by a schedule."""

    type_name = "demo.RefreshRates"

    @step
    def fetch_rates(self, ctx):
        work(0.02)
        return Status.done(output={"EUR/USD": 1.08, "EUR/GBP": 0.86})
