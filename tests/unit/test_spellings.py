"""Key prefixes, job hash fields and statuses are spelled once, in ``store/lifecycle.py``: a Python
module that spells one by hand drifts from the table the auditor checks against.

``store/machine.py`` and the Lua scripts (``store/lua/``) are left out: they are being rewritten to
take their keys from ``queue_layout()``, and that work brings its own check."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import django_jobs

ROOT = Path(django_jobs.__file__).parent
SPELLED = re.compile(r"^(rq:|djjobs:)|^dj_[a-z_]+$|^(queued|started|scheduled|finished|failed|canceled)$")
#: Modules not scanned: the table itself, and the state machine (see the module docstring).
SKIPPED = {"store/lifecycle.py", "store/machine.py"}
#: (module, literal): spellings that are not a key, a job hash field or a job status, each with why.
ALLOWED = {
    # the snapshot of a quarantined item names where it came from: snapshot fields, not Redis keys
    ("deadletter.py", "djjobs:source"),
    ("deadletter.py", "djjobs:member"),
    ("deadletter.py", "djjobs:original "),
    ("deadletter.py", "djjobs:original job_id"),
    ("deadletter.py", "djjobs:original reason"),
    # a batch's own state in the database, and a dead letter's status choices: rows, not job hashes
    ("batch_admin.py", "finished"),
    ("models.py", "failed"),
    # an outcome of retry_now() (RetryOutcome.STARTED), not a job status
    ("retrying.py", "started"),
}


def spellings() -> set[tuple[str, str]]:
    found = set()
    for path in ROOT.rglob("*.py"):
        name = path.relative_to(ROOT).as_posix()
        if name in SKIPPED or name.startswith("migrations/"):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SPELLED.search(node.value):
                found.add((name, node.value))
    return found


def test_no_module_spells_a_key_prefix_a_job_field_or_a_status_by_hand() -> None:
    assert spellings() - ALLOWED == set()


def test_every_allowed_spelling_is_still_there() -> None:
    assert spellings() >= ALLOWED  # a stale exception would let the same spelling back in unnoticed
