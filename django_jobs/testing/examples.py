"""Verify the payloads jobs declare (``@job(examples=[...])``): both verifiers on each, from an empty
database each time. What ``manage.py jobs_verify`` runs, against a test database."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.management import call_command

from django_jobs.core import registry
from django_jobs.testing.effects import call, databases
from django_jobs.testing.safety import verify_crash_safe
from django_jobs.testing.verify import verify_idempotent


@dataclass
class Verdict:
    """One example of one job, and what each check found (nothing: it passed)."""

    job: str
    call: str
    findings: list[str] = field(default_factory=list)
    crash_checked: bool = True  # False for an async def job, which verify_crash_safe cannot run yet


def verify_examples(job: registry.Job[..., Any]) -> Iterator[Verdict]:
    """Each of the job's examples through :func:`verify_idempotent` and :func:`verify_crash_safe`,
    each from an emptied database."""
    for example in job.examples:
        verdict = Verdict(job.name, "", crash_checked=not job.is_async)
        for verifier in (verify_idempotent, verify_crash_safe)[: 1 + verdict.crash_checked]:
            _flush()
            try:
                args, kwargs = payload(example)
                verdict.call = f"{job.name}{call(args, kwargs)}"
                verifier(job, *args, **kwargs)
            except AssertionError as exc:
                verdict.findings.append(str(exc))
            except Exception as exc:  # the example's own code, or the job's set-up, failed
                verdict.findings.append(f"{verifier.__name__} could not run it: {type(exc).__name__}: {exc}")
        yield verdict


def payload(example: registry.Example) -> tuple[list[Any], dict[str, Any]]:
    """An example as arguments: a dict is keyword arguments, a list positional ones; a function is
    called first (it makes the rows the payload names)."""
    value = example() if callable(example) else example
    if isinstance(value, dict):
        return [], dict(value)
    if isinstance(value, list | tuple):
        return list(value), {}
    raise TypeError(f"an example returned {type(value).__name__}, not a dict or a list of arguments")


def _flush() -> None:
    for alias in databases():
        call_command("flush", database=alias, interactive=False, verbosity=0)
