"""manage.py jobs_verify on the example shop, as a team's CI line runs it: both verifiers on every job
with examples, against a test database of its own; exit 1 on a finding, 2 on a bad argument."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def jobs_verify(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "SHOP_DB_PATH": "/nonexistent/never-opened.sqlite3"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", "jobs_verify", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_flawed_job_is_named_with_each_finding_and_its_fixed_version_passes(redis_url: str):
    result = jobs_verify(redis_url)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "FAIL shop.send_invoice_unguarded(order_id=1)\n" in out
    assert (
        "shop.send_invoice_unguarded(order_id=1) is not idempotent: the second delivery sent 1 mail to "
        "ada@example.com ('Your invoice for order #1')"
    ) in out
    assert (
        "- a crash after the UPDATE of `shop_order` (jobs.py, line " in out
        and "sends the mail to ada@example.com ('Your invoice for order #1') twice against once" in out
    )
    assert "ok   shop.send_invoice(order_id=1): idempotent and crash-safe" in out
    assert "Not verified (no examples): shop.charge_card, shop.export_orders," in out
    assert "1 of 2 examples failed a check" in result.stderr


def test_named_jobs_only_and_a_pass_exits_0(redis_url: str):
    result = jobs_verify(redis_url, "shop.send_invoice", "--crash-points", "100")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "1 example verified"
    assert "unguarded" not in result.stdout


def test_an_unknown_job_or_a_bad_option_is_one_line_and_exit_2(redis_url: str):
    unknown = jobs_verify(redis_url, "shop.nope")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "CommandError: No job is registered under the name 'shop.nope'"
    bad = jobs_verify(redis_url, "--crash-points", "0")
    assert bad.returncode == 2 and "argument --crash-points: 0 is out of range" in bad.stderr
