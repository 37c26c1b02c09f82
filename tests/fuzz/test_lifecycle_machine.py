"""A Hypothesis state machine of the job lifecycle, on a real Redis and the test database.

Each step is one transition through django_jobs' own code: enqueue (priority, delay, expiry, a
limit key, a "ledger" queue), claim (with a lease, or with a lease so short that its work process
counts as killed mid-attempt: never settled, reaped), complete, fail (retry or dead), snooze,
release, cancel (waiting and running), pause and resume a queue or a job type, promote, reap and
settle lost attempts, wake the jobs parked behind their key's limit, bury what a dead worker left
"dying", run a scheduled job now, a stale attempt settling after it was reaped (the lease fence),
Redis losing an acknowledged job (a failover) and the ledger sweep that pushes it again, a foreign
worker (an rqworker) failing the job at the head of a queue and runjobs reclaiming it as a dead letter.

A model says which state each job is in. After every step every job's state is read back from
Redis (which structure holds its id, and what its hash says) and must be the model's: where a step
may move jobs the model cannot name one by one (which job a claim parks or drops behind the one it
leases, which parked job an ended attempt wakes), the step says which moves are allowed and the
model follows what Redis did. After every step too: no id in two structures, at most one attempt
per key of a ``limit_key`` job holds a lease, and the auditor (``django_jobs.store.audit``) finds
no problem.

Small in CI: ``JOBS_STATEFUL_EXAMPLES`` (default 25) examples of ``JOBS_STATEFUL_STEPS`` (default
30) steps, from a fixed seed. A long run: ``JOBS_STATEFUL_STEPS=2000 JOBS_STATEFUL_EXAMPLES=3``, and
``JOBS_STATEFUL_RANDOM=1`` for a new seed each run.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import time
import zlib
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_jobs.conf import jobs_settings
from django_jobs.core import cancellation, execution, outcomes, registry
from django_jobs.exceptions import PermanentError, Snooze
from django_jobs.flow import pausing
from django_jobs.flow.pausing import Held
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import DYING, LEASES, LOST, CancelResult, Claimed, Finished, Settled, Store, keys
from django_jobs.store.audit import audit
from django_jobs.worker.maintenance import Maintenance
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

EXAMPLES = int(os.environ.get("JOBS_STATEFUL_EXAMPLES", "25"))
STEPS = int(os.environ.get("JOBS_STATEFUL_STEPS", "30"))
RANDOM = os.environ.get("JOBS_STATEFUL_RANDOM") == "1"

QUEUES = ["default", "emails"]  # "emails" keeps a ledger row per job (see the test's settings)
LEDGER_QUEUE = "emails"
PLAIN, KEYED = jobs.machine, jobs.machine_keyed
TYPES = [PLAIN.name, KEYED.name]
ACCOUNTS = ["A", "B"]
MAX_ATTEMPTS = PLAIN.policy.max_attempts
SNOOZE_CAP = 2  # both machine jobs' max_snoozes
LEASE, SHORT_LEASE = 60.0, 0.001
SOON, LATER = 0.001, 3600.0  # seconds: due (or expired) by the next step, or not within the run
TTL = 3600

# The states, each in one structure (or none, once it ended): what the model says and Redis shows.
WAITING, SCHEDULED, RUNNING, LOST_, DYING_ = "waiting", "scheduled", "running", "lost", "dying"
FOREIGN = "foreign"  # failed by a foreign worker, in RQ's failed registry
PARKED, LINED = "parked", "lined"  # its type paused / behind its key's limit
FINISHED, CANCELLED, EXPIRED, DEAD, GONE = "finished", "cancelled", "expired", "dead", "gone"
PENDING = {WAITING, SCHEDULED, PARKED, LINED}
ENDED = {FINISHED, CANCELLED, EXPIRED, DEAD}
#: The status each structure's jobs have in their hash.
STATUS = {WAITING: "queued", PARKED: "queued", LINED: "queued", SCHEDULED: "scheduled",
          RUNNING: "started", LOST_: "started", DYING_: "failed", FOREIGN: "failed"}  # fmt: skip


@dataclass
class Model:
    """What one job should be: its state, and what decides its next transitions."""

    id: str
    name: str
    queue: str
    account: str
    priority: int
    state: str
    attempts: int = 0
    snoozes: int = 0
    due: float = 0.0  # local time by which a scheduled job is due (0: not scheduled soon)
    expires: float = 0.0  # local time after which it expires unstarted (0: never in this run)
    claimed: Claimed | None = None  # the running attempt
    short: bool = False  # its lease is one that expires at once
    lease_until: float = 0.0  # local time by which its short lease has expired
    cancel: bool = False  # its cancel was requested while it ran
    due_in: float = 0.0  # the delay it was enqueued with, as its ledger row keeps it
    argument: str = ""  # the account it was enqueued with (only a keyed job's is its key)

    @property
    def keyed(self) -> bool:
        return self.name == KEYED.name


class LifecycleMachine(RuleBasedStateMachine):
    client: redis.Redis  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.client.flushdb()
        DeadLetter.objects.all().delete()
        OutboxEntry.objects.all().delete()
        self.store = Store.of(self.client)
        self.maintenance = Maintenance(self.store, QUEUES, 0.1)
        self.jobs: dict[str, Model] = {}
        self.zombies: list[Claimed] = []  # attempts reaped while their worker lived on
        self.paused_queues: set[str] = set()
        self.paused_types: set[str] = set()
        self.nonces = itertools.count()
        self.steps = -1  # the invariants run once before the first step
        RUNS.append(self)

    # --- helpers -----------------------------------------------------------------------------------

    def in_state(self, *states: str) -> list[Model]:
        return [job for job in self.jobs.values() if job.state in states]

    def pick(self, index: int, *states: str) -> Model:
        found = self.in_state(*states)
        return found[index % len(found)]

    def let_due_pass(self) -> None:
        """Sleep until every "soon" deadline (a due time, an expiry, a short lease) has passed."""
        deadlines = [max(job.due, job.expires, job.lease_until) for job in self.jobs.values()] + [0.0]
        wait = max(deadlines) - time.time()
        if wait > -0.002:
            time.sleep(wait + 0.003)

    def observe(self) -> dict[str, str]:
        """The state Redis shows for each job: the one structure holding its id, or, for none, what
        its hash says. One pipeline for every job, one query for the dead letters."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zrange(LEASES, 0, -1)
            pipe.zrange(LOST, 0, -1)
            for job in self.jobs.values():
                queue, scope = job.queue, keys.limit_scope(KEYED.name, job.account)
                pipe.lpos(keys.queue_key(queue), job.id)
                for key in (*keys.priority_keys(queue), keys.scheduled_key(queue), DYING):
                    pipe.zscore(key, job.id)
                for name in TYPES:
                    pipe.lpos(keys.parked_key(queue, name), job.id)
                pipe.zscore(keys.parked_line(queue, scope), job.id)
                pipe.zscore(keys.failed_key(queue), job.id)
                pipe.hmget(keys.job_key(job.id), ["status", "dj_expired"])
            leases, lost, *replies = pipe.execute()
        holders: dict[str, list[tuple[str, str]]] = {}
        for state, tokens in ((RUNNING, leases), (LOST_, lost)):
            for token in tokens:
                holders.setdefault(token.decode().rpartition(":")[0], []).append((state, token.decode()))
        dead = set(DeadLetter.objects.filter(job_id__in=list(self.jobs)).values_list("job_id", flat=True))
        width = len(replies) // max(len(self.jobs), 1)
        seen = {}
        for n, job in enumerate(self.jobs.values()):
            ready, high, low, scheduled, dying, *parked, line, failed, (status_b, expired) = replies[
                n * width : (n + 1) * width
            ]
            places = [
                *([WAITING] * sum(x is not None for x in (ready, high, low))),
                *([SCHEDULED] if scheduled is not None else []),
                *([DYING_] if dying is not None else []),
                *([PARKED] * sum(x is not None for x in parked)),
                *([LINED] if line is not None else []),
                *([FOREIGN] if failed is not None else []),
                *(state for state, _ in holders.get(job.id, [])),
            ]
            assert len(places) <= 1, f"job {job.id} ({job.state} in the model) is in {places}"
            status = status_b.decode() if status_b is not None else ""
            if places:
                state = places[0]
                assert status == STATUS[state], f"job {job.id} is {state} but its hash says {status!r}"
                if state in (RUNNING, LOST_) and job.claimed is not None:
                    token = holders[job.id][0][1]
                    assert token == job.claimed.token, (
                        f"job {job.id}: lease {token}, attempt {job.claimed.token}"
                    )
            elif status_b is None:
                state = GONE
            elif status in ("finished", "canceled"):
                state = FINISHED if status == "finished" else EXPIRED if expired is not None else CANCELLED
            elif status == "failed" and job.id in dead:
                state = DEAD
            else:
                raise AssertionError(
                    f"job {job.id} ({job.state} in the model) is nowhere, its status {status!r}"
                )
            seen[job.id] = state
        return seen

    def reconcile(self, allowed: dict[str, set[str]] | None = None) -> dict[str, str]:
        """Check each job's state against the model; a move ``allowed`` names is taken into it.
        Returns the moves taken (id -> new state)."""
        moved = {}
        for job_id, seen in self.observe().items():
            job = self.jobs[job_id]
            if seen == job.state:
                continue
            assert seen in (allowed or {}).get(job.id, set()), (
                f"job {job.id} ({job.name}, {job.queue}, account {job.account!r}) should be {job.state}, "
                f"Redis shows {seen}"
            )
            moved[job.id] = job.state = seen
        return moved

    def wakeable(self, account: str | None = None) -> dict[str, set[str]]:
        """The jobs parked behind their key's limit that an ended attempt (of ``account``) may wake."""
        return {
            job.id: {WAITING} for job in self.in_state(LINED) if account is None or job.account == account
        }

    def ended(self, job: Model, state: str) -> None:
        """The attempt of ``job`` ended with ``state``; an attempt of a keyed job may wake the next."""
        job.state, job.claimed, job.short, job.cancel = state, None, False, False
        moved = self.reconcile(self.wakeable(job.account) if job.keyed else None)
        assert len(moved) <= 1, f"one ended attempt woke {moved}"

    def scope(self, claimed: Claimed) -> Any:
        return registry.limit_scope(claimed.record)

    # --- enqueue -------------------------------------------------------------------------------------

    @initialize(
        backlog=st.lists(
            st.tuples(
                st.booleans(),
                st.sampled_from(QUEUES),
                st.sampled_from([0, 0, 5, -5]),
                st.sampled_from(ACCOUNTS),
            ),
            min_size=2,
            max_size=6,
        )
    )
    def backlog(self, backlog: list[tuple[bool, str, int, str]]) -> None:
        """A few jobs waiting before the first step, so that even a short run claims, ends and loses
        attempts rather than spending its steps on empty queues."""
        for keyed, queue, priority, account in backlog:
            self.enqueue(keyed, queue, priority, 0.0, None, account)

    @rule(
        keyed=st.booleans(),
        queue=st.sampled_from(QUEUES),
        priority=st.sampled_from([0, 0, 5, -5]),
        delay=st.sampled_from([0.0, 0.0, SOON, LATER]),
        expires=st.sampled_from([None, None, SOON, LATER]),
        account=st.sampled_from(ACCOUNTS),
    )
    def enqueue(
        self, keyed: bool, queue: str, priority: int, delay: float, expires: float | None, account: str
    ) -> None:
        definition = KEYED if keyed else PLAIN
        options: dict[str, Any] = {"queue": queue, "delay": delay}
        if priority:
            options["priority"] = priority
        if expires is not None:
            options["expires"] = expires
        handle = definition.options(**options).enqueue(f"k{len(self.jobs)}", account)
        now = time.time()
        self.jobs[handle.id] = Model(
            handle.id, definition.name, queue, account if keyed else "", priority,
            SCHEDULED if delay else WAITING, due=now + delay if delay == SOON else 0.0,
            expires=now + expires if expires == SOON else 0.0, due_in=delay, argument=account,
        )  # fmt: skip
        self.reconcile()

    # --- claim ---------------------------------------------------------------------------------------

    @rule(
        short=st.booleans(),
        order=st.permutations(QUEUES),
        want=st.sampled_from([1, 1, 2, 4]),
        completing=st.integers(0, 3),
    )
    def claim(self, short: bool, order: list[str], want: int, completing: int) -> None:
        """One claim, as a work process makes it: what is paused read first, the limits sent along;
        ``want`` jobs at most (a batch), completing up to ``completing`` running jobs of no key along
        (those of a key end through ``complete``). A short lease stands for a work process killed
        mid-attempt: its lease expires unrenewed."""
        self.let_due_pass()  # "soon" expiries have passed: a popped one must be dropped
        plan = Held(self.store, order).claim()
        ending = [job for job in self.in_state(RUNNING) if not job.keyed][:completing]
        batch = self.store.claim_batch(
            plan.queues, finished=None, worker_name="machine", lease_seconds=SHORT_LEASE if short else LEASE,
            nonce=f"n{next(self.nonces)}", finished_ttl=TTL, limits=plan.limits, prioritized=plan.prioritized,
            want=want, also=[Finished(job.claimed.token, job.queue) for job in ending if job.claimed],
        )  # fmt: skip
        assert batch.finished == len(ending), f"{batch.finished} of {ending} completed"
        for job in ending:
            job.state, job.claimed, job.short, job.cancel = FINISHED, None, False, False
        before = {job.id: job.state for job in self.jobs.values()}
        execution.publish_expired(self.store, batch.expired)
        for dropped in batch.expired:
            job = self.jobs[dropped.id]
            assert before[job.id] == WAITING and job.attempts == 0 and job.expires, (
                f"{job} dropped as expired"
            )
            job.state = EXPIRED
        assert len(batch.leased) <= want
        for n, claimed in enumerate(batch.leased):
            job = self.jobs[claimed.id]
            assert job.state == WAITING and job.queue in plan.queues, f"claimed {job}"
            job.attempts += 1
            assert claimed.attempt == job.attempts, f"attempt {claimed.attempt}, model {job.attempts}"
            job.state, job.claimed, job.short, job.cancel = RUNNING, claimed, short, False
            job.lease_until = time.time() + SHORT_LEASE if short else 0.0
            if n + 1 < len(batch.leased):  # a batch ends after a job of a key's scope
                assert self.scope(claimed) is None, f"the batch went on after {job}"
        self.check_claim_order(plan, batch.leased)

    def check_claim_order(self, plan: Any, leased: tuple[Claimed, ...]) -> None:
        """The jobs a claim leased came in the order single claims take them, and none that still
        waits in the queues it asked comes before the last of them."""
        allowed: dict[str, set[str]] = {}
        for job in self.in_state(WAITING):
            if job.queue in plan.queues:
                allowed[job.id] = ({PARKED} if job.name in self.paused_types else set()) | (
                    {LINED} if job.keyed else set()
                )
        self.reconcile(allowed)
        waiting = [job for job in self.in_state(WAITING) if job.queue in plan.queues]
        if not leased:
            assert not waiting, f"nothing claimed, yet these wait: {waiting}"
            return
        ranks = [(plan.queues.index(c.queue), -self.jobs[c.id].priority) for c in leased]
        assert ranks == sorted(ranks), f"a batch out of order: {leased}"
        index, claimed = ranks[-1][0], leased[-1]
        for job in waiting:
            assert plan.queues.index(job.queue) >= index, f"claimed from {claimed.queue} before {job}"
            if job.queue == claimed.queue:
                assert job.priority <= self.jobs[claimed.id].priority, f"claimed {claimed.id} before {job}"

    # --- the end of a running attempt ------------------------------------------------------------------

    @precondition(lambda self: self.in_state(RUNNING))
    @rule(index=st.integers(0, 99))
    def complete(self, index: int) -> None:
        job = self.pick(index, RUNNING)
        assert job.claimed is not None
        finished = Finished(job.claimed.token, job.queue, None, self.scope(job.claimed))
        assert self.store.complete(finished, TTL), f"completion of {job} refused"
        self.ended(job, FINISHED)

    @precondition(lambda self: self.in_state(RUNNING))
    @rule(index=st.integers(0, 99), permanent=st.booleans())
    def fail(self, index: int, permanent: bool) -> None:
        """A failed attempt: retried within a millisecond while attempts remain, else dead-lettered."""
        job = self.pick(index, RUNNING)
        assert job.claimed is not None
        exc = PermanentError("voided") if permanent else ConnectionError("upstream down")
        outcomes.publish(execution.settle_failure(self.store, job.claimed, exc))
        dead = permanent or job.attempts >= MAX_ATTEMPTS
        if not job.cancel and not dead:
            job.due = time.time() + SOON
        self.ended(job, CANCELLED if job.cancel else DEAD if dead else SCHEDULED)

    @precondition(lambda self: self.in_state(RUNNING))
    @rule(index=st.integers(0, 99), seconds=st.sampled_from([SOON, LATER]))
    def snooze(self, index: int, seconds: float) -> None:
        """A snooze gives its attempt back; past the job's snooze cap it dead-letters the job."""
        job = self.pick(index, RUNNING)
        assert job.claimed is not None
        definition = registry.get(job.name)
        outcomes.publish(execution.settle_snooze(self.store, job.claimed, Snooze(seconds), definition, 0.0))
        if job.cancel:
            self.ended(job, CANCELLED)
        elif job.snoozes >= SNOOZE_CAP:
            self.ended(job, DEAD)
        else:
            job.attempts, job.snoozes = job.attempts - 1, job.snoozes + 1
            job.due = time.time() + seconds if seconds == SOON else 0.0
            self.ended(job, SCHEDULED)

    @precondition(lambda self: self.in_state(RUNNING))
    @rule(index=st.integers(0, 99))
    def release(self, index: int) -> None:
        """A work process shutting down hands its job back, its attempt unspent."""
        job = self.pick(index, RUNNING)
        assert job.claimed is not None
        settled = self.store.release(job.claimed.token, job.queue, TTL, self.scope(job.claimed))
        assert settled is (Settled.CANCELLED if job.cancel else Settled.DONE)
        if not job.cancel:
            job.attempts -= 1
        self.ended(job, CANCELLED if job.cancel else WAITING)

    @precondition(lambda self: self.in_state(RUNNING))
    @rule(index=st.integers(0, 99))
    def die_before_dead_letter(self, index: int) -> None:
        """A work process dies between moving a dead job to "dying" and writing its dead letter."""
        job = self.pick(index, RUNNING)
        assert job.claimed is not None
        execution.settle_failure(self.store, job.claimed, PermanentError("voided"))  # never published
        self.ended(job, CANCELLED if job.cancel else DYING_)

    @precondition(lambda self: self.zombies)
    @rule(index=st.integers(0, 99), how=st.sampled_from(["complete", "fail", "snooze", "release"]))
    def stale_attempt_settles(self, index: int, how: str) -> None:
        """An attempt whose lease was reaped (its worker cut off, not dead) settles late: fenced."""
        claimed = self.zombies[index % len(self.zombies)]
        scope = self.scope(claimed)
        if how == "complete":
            assert not self.store.complete(Finished(claimed.token, claimed.queue, None, scope), TTL)
        elif how == "fail":
            ended = execution.settle_failure(self.store, claimed, ConnectionError("late"))
            assert ended.fenced
            outcomes.publish(ended)
        elif how == "snooze":
            assert self.store.snooze(claimed.token, claimed.queue, SOON, TTL, scope) is Settled.FENCED
        else:
            assert self.store.release(claimed.token, claimed.queue, TTL, scope) is Settled.FENCED
        self.reconcile()

    @precondition(lambda self: any(job.state == RUNNING and not job.short for job in self.jobs.values()))
    @rule()
    def heartbeat(self) -> None:
        """The supervisor's heartbeat keeps its leases and hears of the cancels requested."""
        running = [job for job in self.in_state(RUNNING) if not job.short]
        beat = self.store.heartbeat([job.claimed.token for job in running if job.claimed], LEASE)
        assert not beat.gone
        assert beat.cancelled == {job.claimed.token for job in running if job.cancel and job.claimed}
        self.reconcile()

    # --- cancel -------------------------------------------------------------------------------------

    @precondition(lambda self: self.jobs)
    @rule(index=st.integers(0, 999))
    def cancel(self, index: int) -> None:
        job = list(self.jobs.values())[index % len(self.jobs)]
        result = cancellation.cancel(job.id, queue=job.queue)
        if job.state in PENDING:
            assert result is CancelResult.CANCELLED, f"cancel of {job}: {result}"
            job.state = CANCELLED
        elif job.state in (RUNNING, LOST_):
            assert result is CancelResult.REQUESTED, f"cancel of {job}: {result}"
            job.cancel = True
        elif job.state == GONE:
            assert result is CancelResult.NOT_FOUND, f"cancel of {job}: {result}"
        else:
            assert result is CancelResult.ALREADY_ENDED, f"cancel of {job}: {result}"
        self.reconcile()

    # --- pauses ----------------------------------------------------------------------------------

    @rule(queue=st.sampled_from(QUEUES))
    def pause_queue(self, queue: str) -> None:
        assert pausing.pause(queue=queue) is (queue not in self.paused_queues)
        self.paused_queues.add(queue)
        self.reconcile()

    @rule(queue=st.sampled_from(QUEUES))
    def resume_queue(self, queue: str) -> None:
        assert pausing.resume(queue=queue).was_paused is (queue in self.paused_queues)
        self.paused_queues.discard(queue)
        self.reconcile()

    @rule(name=st.sampled_from(TYPES))
    def pause_type(self, name: str) -> None:
        assert pausing.pause(job=name) is (name not in self.paused_types)
        self.paused_types.add(name)
        self.reconcile()

    @rule(name=st.sampled_from(TYPES), by_hand=st.booleans())
    def resume_type(self, name: str, by_hand: bool) -> None:
        """Resume a job type: its parked jobs go back to their queues. ``by_hand``: the pause is removed
        from Redis only (a resume that died half-way), and maintenance puts the parked jobs back."""
        if by_hand:
            self.store.resume("job", name)
            self.maintenance.parked.run()
        else:
            pausing.resume(job=name)
        self.paused_types.discard(name)
        for job in self.in_state(PARKED):
            if job.name == name:
                job.state = WAITING
        self.reconcile()

    # --- maintenance -----------------------------------------------------------------------------------

    def _promoted_and_reaped(self) -> None:
        """What a pass of the store's maintenance script must have done once every "soon" is due."""
        for job in self.jobs.values():
            if job.state == SCHEDULED and job.due:
                job.state, job.due = WAITING, 0.0
            elif job.state == RUNNING and job.short:
                job.state = LOST_

    @rule(missed_wakeup=st.booleans(), settle=st.booleans())
    def maintain(self, missed_wakeup: bool, settle: bool) -> None:
        """Promote due jobs, reap expired leases into "lost", and wake jobs parked behind their key.
        ``settle``: as runjobs' reaper does, also settle the lost attempts in the same pass (those it
        reaped now and before): back to the head of their queue (a lost worker is not the job's
        failure), dead once out of attempts, cancelled if a cancel was asked. ``missed_wakeup``: every
        line is due for a look now, as if the wake-up an ended attempt owed it was missed; then a key
        with nothing running or holding its slot must wake its next job, unless its type is paused."""
        self.let_due_pass()
        if missed_wakeup:
            for queue in QUEUES:
                index = keys.parked_index(queue)
                for scope in self.client.zrange(index, 0, -1):
                    self.client.zadd(index, {scope: 0})
        lost = [job for job in self.jobs.values() if job.state == LOST_ or job.short] if settle else []
        if settle:
            self.maintenance.reaper.run()
        else:
            self.store.maintain(QUEUES, registry.limits_json())
        self._promoted_and_reaped()
        for job in lost:
            assert job.claimed is not None
            self.zombies.append(job.claimed)
            if job.cancel:
                job.state = CANCELLED
            elif job.attempts >= MAX_ATTEMPTS:
                job.state = DEAD
            else:
                job.state = WAITING
            job.claimed, job.short, job.cancel = None, False, False
        self.reconcile(self.wakeable())
        if missed_wakeup and KEYED.name not in self.paused_types:  # a paused type's lines wait
            for account in ACCOUNTS:
                keyed = [job for job in self.jobs.values() if job.keyed and job.account == account]
                busy = [job for job in keyed if job.state in (WAITING, RUNNING, LOST_)]
                lined = [job for job in keyed if job.state == LINED]
                assert busy or not lined, f"account {account}: nothing runs, yet {lined} stay parked"

    @precondition(lambda self: self.in_state(DYING_))
    @rule()
    def finish_dying(self) -> None:
        """Maintenance buries what a dead worker left "dying", once it is three leases old."""
        time.sleep(3 * jobs_settings.LEASE_SECONDS + 0.005)
        self.maintenance.dying.run()
        for job in self.in_state(DYING_):
            job.state = DEAD
        self.reconcile()

    @precondition(lambda self: self.in_state(SCHEDULED))
    @rule(index=st.integers(0, 99))
    def run_now(self, index: int) -> None:
        job = self.pick(index, SCHEDULED)
        assert self.store.run_now(job.id, job.queue) == 1
        job.state, job.due = WAITING, 0.0
        self.reconcile()

    # --- a foreign worker ----------------------------------------------------------------------------

    @rule(queue=st.sampled_from(QUEUES))
    def foreign_worker_fails_the_head(self, queue: str) -> None:
        """An rqworker left on the queue pops its list's head, cannot decode it, and fails it as RQ does:
        its data rewritten compressed, its status failed, into RQ's failed registry. (A job of a key
        is left alone: its slot would leak, which no reclaim can tell from a live hold.)"""
        head = self.client.lindex(keys.queue_key(queue), 0)
        job = self.jobs.get(head.decode()) if head is not None else None
        if job is None or job.keyed:
            return
        hash_key = keys.job_key(job.id)
        data = self.client.hget(hash_key, "data")
        with self.client.pipeline() as pipe:
            pipe.lrem(keys.queue_key(queue), 1, job.id)
            pipe.hset(
                hash_key, mapping={"status": "failed", "data": zlib.compress(data), "worker_name": "rq1"}
            )
            pipe.zadd(keys.failed_key(queue), {job.id: time.time() + 3600})
            pipe.execute()
        job.state = FOREIGN
        self.reconcile()

    @precondition(lambda self: self.in_state(FOREIGN))
    @rule()
    def reclaim_foreign_failures(self) -> None:
        """runjobs moves what a foreign worker failed into the dead letters, its payload restored."""
        self.maintenance.foreign.run()
        for job in self.in_state(FOREIGN):
            job.state = DEAD
            letter = DeadLetter.objects.get(job_id=job.id)
            assert letter.reason == DeadLetter.Reason.FOREIGN and letter.args[1] == job.argument, letter
        self.reconcile()

    # --- the ledger ------------------------------------------------------------------------------------

    @precondition(
        lambda self: any(
            job.queue == LEDGER_QUEUE and not job.keyed and job.state in (WAITING, SCHEDULED)
            for job in self.jobs.values()
        )
    )
    @rule(index=st.integers(0, 99))
    def redis_loses_a_job(self, index: int) -> None:
        """A failover to a replica that lagged: an acknowledged job of the ledger queue is gone."""
        found = [
            job for job in self.in_state(WAITING, SCHEDULED) if job.queue == LEDGER_QUEUE and not job.keyed
        ]
        job = found[index % len(found)]
        with self.client.pipeline() as pipe:
            pipe.delete(keys.job_key(job.id))
            pipe.lrem(keys.queue_key(job.queue), 0, job.id)
            for key in (*keys.priority_keys(job.queue), keys.scheduled_key(job.queue)):
                pipe.zrem(key, job.id)
            pipe.execute()
        job.state = GONE
        self.reconcile()

    @rule()
    def ledger_sweep(self) -> None:
        """The ledger's sweep: a job Redis lost is pushed again; a row whose job ended is deleted."""
        past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
        OutboxEntry.objects.update(created_at=past)  # older than the sweep's second of grace
        self.maintenance.ledger.sweep()
        for job in self.in_state(GONE):  # pushed again as enqueued: a "soon" due time has passed
            job.state = SCHEDULED if job.due_in else WAITING
            job.due = time.time() if job.due_in == SOON else 0.0
            job.attempts, job.snoozes, job.cancel = 0, 0, False
        self.reconcile()
        rows = set(OutboxEntry.objects.values_list("id", flat=True))
        for job in self.jobs.values():
            if job.queue == LEDGER_QUEUE:
                assert (job.id in rows) is (job.state not in ENDED), f"ledger row of {job}: {job.id in rows}"
            else:
                assert job.id not in rows, f"{job} is not on a ledger queue, yet has a row"

    # --- after every step ----------------------------------------------------------------------------

    @invariant()
    def one_attempt_per_key(self) -> None:
        self.steps += 1
        for account in ACCOUNTS:
            holding = [
                job.id
                for job in self.jobs.values()
                if job.keyed and job.account == account and job.state in (RUNNING, LOST_)
            ]
            assert len(holding) <= 1, f"account {account}: attempts {holding} at once"

    @invariant()
    def audited(self) -> None:
        found = audit(Store.of(self.client), QUEUES)
        assert found.ok, f"the auditor found: {found.problems}"


#: Each example's machine, for the summary of what the run covered.
RUNS: list[LifecycleMachine] = []


def test_the_lifecycle_holds_under_random_transitions(redis_db, settings):
    levels = {
        "DEFAULT_DURABILITY": "fast",
        "DURABILITY": {LEDGER_QUEUE: "ledger"},
    }  # only "emails" keeps rows
    settings.JOBS = {**settings.JOBS, "LEASE_SECONDS": 0.01, **levels}
    LifecycleMachine.client = redis_db
    run_state_machine_as_test(
        LifecycleMachine,
        settings=hypothesis_settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            derandomize=not RANDOM,
            suppress_health_check=list(HealthCheck),
        ),
    )
    steps = [run.steps for run in RUNS]
    ended = sum(1 for run in RUNS for job in run.jobs.values() if job.state in ENDED)
    print(f"{len(steps)} examples, steps {steps}, {ended} jobs ended")
