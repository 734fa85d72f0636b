"""Raw SQL in store/ takes its status lists from ``policy.status``, so it cannot drift from the ORM's."""

import re
from pathlib import Path

from django_procedures.policy.status import CLAIMABLE, LEASED, LeaseOutcome, RunStatus, StepStatus
from django_procedures.store import claim, leases, locks, progress_sql

STORE = Path(__file__).resolve().parents[2] / "django_procedures" / "store"
QUOTED = re.compile("'({})'".format("|".join({*RunStatus, *StepStatus, *LeaseOutcome})))


def test_no_store_module_spells_a_status_in_sql():
    spelled = {f"{p.name}: {m.group(0)}" for p in STORE.glob("*.py") for m in QUOTED.finditer(p.read_text())}
    assert spelled == set(), "build the list from policy.status (store.db.sql_list) instead"


def test_the_statements_use_the_status_sets():
    in_list = "status IN ({})".format(", ".join(f"'{s}'" for s in CLAIMABLE))
    assert in_list in claim._PG_DUE and in_list in locks._PG_KEYED_DUE
    leased = "status IN ({})".format(", ".join(f"'{s}'" for s in LEASED))
    assert leased in leases._PG_RENEW and leased in progress_sql._SQL
    assert f"THEN '{RunStatus.ROLLING_BACK}' ELSE '{RunStatus.RUNNING}' END" in claim._PG_CLAIM
