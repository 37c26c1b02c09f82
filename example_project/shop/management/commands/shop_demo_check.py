"""``manage.py shop_demo_check``: wait until one ``shop_demo_enqueue`` run has played out as designed.

``scripts/demo --check`` (and so CI) relies on it: it passes once the invoice is sent, the
inventory sync has succeeded after its retries and the card charge is dead-lettered, and fails
at once if a job ends any other way, rather than waiting for the timeout. With ``--admin-url``
it then logs in to the running admin over real HTTP and opens the dead-letter list, which is
what a person trying the demo does next. Last, it does what the demo tells that person to do
about the declined charge (lower the order's total, requeue the dead letter) and waits for the
order to be paid.
"""

from __future__ import annotations

import http.cookiejar
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from example_project.shop.jobs import CARD_LIMIT, FLAKY_ATTEMPTS
from example_project.shop.models import InventorySync, Order


class Unexpected(Exception):
    """A job ended in a way the demo does not expect; waiting longer cannot fix it."""


def _dead_letter(job_id: str) -> DeadLetter | None:
    return DeadLetter.objects.filter(job_id=job_id).first()


def _not_dead(job_id: str, name: str) -> None:
    entry = _dead_letter(job_id)
    if entry is not None:
        raise Unexpected(f"{name} was dead-lettered: {entry.exception}: {entry.message}")


def invoice_sent(manifest: dict[str, Any]) -> str | None:
    _not_dead(manifest["jobs"]["send_invoice"], "shop.send_invoice")
    order = Order.objects.get(pk=manifest["invoice_order"])
    return f"shop.send_invoice sent the invoice for order #{order.pk}" if order.invoice_sent else None


def inventory_synced(manifest: dict[str, Any]) -> str | None:
    _not_dead(manifest["jobs"]["sync_inventory"], "shop.sync_inventory")
    sync = InventorySync.objects.get(pk=manifest["inventory_sync"])
    if sync.synced_at is None:
        return None
    expected = FLAKY_ATTEMPTS + 1
    if sync.attempts != expected:
        raise Unexpected(
            f"shop.sync_inventory succeeded after {sync.attempts} attempt(s), expected {expected}."
        )
    return f"shop.sync_inventory succeeded on attempt {sync.attempts}, after {FLAKY_ATTEMPTS} failed ones"


def charge_dead_lettered(manifest: dict[str, Any]) -> str | None:
    entry = _dead_letter(manifest["jobs"]["charge_card"])
    if entry is None:
        if Order.objects.filter(pk=manifest["charge_order"], status=Order.Status.PAID).exists():
            raise Unexpected("shop.charge_card charged the card; it should have been declined.")
        return None
    if (entry.job_name, entry.reason, entry.attempts) != ("shop.charge_card", DeadLetter.Reason.PERMANENT, 1):
        raise Unexpected(
            f"shop.charge_card dead letter is {entry.job_name} / {entry.reason} after "
            f"{entry.attempts} attempt(s); expected a permanent error on attempt 1."
        )
    exception = entry.exception.rpartition(".")[2]
    return f"shop.charge_card dead-lettered on attempt 1 ({exception}), dead letter #{entry.pk}"


Condition = Callable[[dict[str, Any]], str | None]

CONDITIONS: list[Condition] = [
    invoice_sent,
    inventory_synced,
    charge_dead_lettered,
]


def fix_and_requeue(manifest: dict[str, Any]) -> str:
    """What the demo tells an operator to do: fix the order's data, then requeue its dead letter."""
    Order.objects.filter(pk=manifest["charge_order"]).update(total=CARD_LIMIT)
    deadletter.requeue(DeadLetter.objects.filter(job_id=manifest["jobs"]["charge_card"]))
    return f"lowered order #{manifest['charge_order']} to {CARD_LIMIT} and requeued its dead letter"


def charge_paid_after_requeue(manifest: dict[str, Any]) -> str | None:
    order = Order.objects.get(pk=manifest["charge_order"])
    if order.status == Order.Status.PAID:
        return f"the requeued shop.charge_card charged order #{order.pk}"
    first = manifest["jobs"]["charge_card"]
    if DeadLetter.objects.filter(job_name="shop.charge_card").exclude(job_id=first).exists():
        raise Unexpected("the requeued shop.charge_card was dead-lettered again after its order was fixed.")
    return None


def check_admin(base_url: str, username: str, password: str, dead_letter_job: str) -> list[str]:
    """Fetch the login page, log in, and find the dead letter in the admin's list; one line per step."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    login_url = f"{base_url.rstrip('/')}/admin/login/"
    list_path = "/admin/django_jobs/deadletter/"
    with opener.open(login_url, timeout=10) as response:
        if response.status != 200:
            raise Unexpected(f"GET {login_url} answered {response.status}, expected 200.")
    token = next((cookie.value for cookie in jar if cookie.name == "csrftoken"), None)
    if token is None:
        raise Unexpected(f"GET {login_url} set no csrftoken cookie.")
    form = {"username": username, "password": password, "csrfmiddlewaretoken": token, "next": list_path}
    with opener.open(login_url, data=urllib.parse.urlencode(form).encode(), timeout=10) as response:
        page, landed = response.read().decode(errors="replace"), response.geturl()
    if urllib.parse.urlsplit(landed).path != list_path:
        raise Unexpected(f"Logging in as {username!r} did not reach {list_path} (landed on {landed}).")
    if dead_letter_job not in page:
        raise Unexpected(f"The dead-letter list does not show {dead_letter_job}.")
    return [
        f"GET {login_url} answered 200",
        f"logged in as {username!r}; {list_path} lists {dead_letter_job}",
    ]


class Command(BaseCommand):
    help = "Wait until the jobs a shop_demo_enqueue run enqueued reached their expected outcomes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--manifest", type=Path, required=True, help="The file shop_demo_enqueue --manifest wrote."
        )
        parser.add_argument("--timeout", type=float, default=60.0, help="Seconds to wait (default 60).")
        parser.add_argument("--admin-url", help="Base URL of the running site, e.g. http://127.0.0.1:8000.")
        parser.add_argument("--admin-user", default="demo")
        parser.add_argument("--admin-password", default="demo")

    def wait(self, manifest: dict[str, Any], conditions: list[Condition], deadline: float) -> None:
        """Poll until every condition is met; fail at once on an unexpected outcome, or at the deadline."""
        pending = list(conditions)
        while pending:
            for condition in list(pending):
                try:
                    met = condition(manifest)
                except Unexpected as exc:
                    raise CommandError(str(exc)) from exc
                if met:
                    self.stdout.write(f"ok: {met}")
                    pending.remove(condition)
            if pending and time.monotonic() > deadline:
                raise CommandError(f"Not reached in time: {', '.join(c.__name__ for c in pending)}.")
            if pending:
                time.sleep(0.25)

    def handle(self, *args: Any, **options: Any) -> None:
        manifest = json.loads(options["manifest"].read_text())
        deadline = time.monotonic() + options["timeout"]
        self.wait(manifest, CONDITIONS, deadline)
        self.visit_admin(options)
        self.stdout.write(f"ok: {fix_and_requeue(manifest)}")
        self.wait(manifest, [charge_paid_after_requeue], deadline)

    def visit_admin(self, options: dict[str, Any]) -> None:
        if options["admin_url"]:
            try:
                steps = check_admin(
                    options["admin_url"], options["admin_user"], options["admin_password"], "shop.charge_card"
                )
            except (Unexpected, OSError) as exc:  # OSError covers HTTP and connection errors
                raise CommandError(f"Admin check failed: {exc}") from exc
            for step in steps:
                self.stdout.write(f"ok: {step}")
