"""Put back on their queues the parked jobs of this server's queues whose type is no longer paused:
a resume normally does it, but one that died half-way (or a pause removed by hand) leaves them."""

from __future__ import annotations

import logging

from redis import exceptions as redis_errors

from django_jobs.worker.duties.base import Duty

logger = logging.getLogger("django_jobs.worker")


class Parked(Duty):
    name = "release_parked"
    every = 5.0

    def run(self) -> None:
        """One SMEMBERS per pass while nothing is parked."""
        store = self.scope.store
        lists = [(queue, name) for queue, name in store.parked_lists() if queue in self.scope.queues]
        if not lists:
            return
        held = {pause.name for pause in store.pauses() if pause.kind == "job"}
        for queue, name in lists:
            if name in held:
                continue
            # one broken list (the structure check sets it aside) never holds back the others
            try:
                moved, _ = store.unpark(queue, name)
            except redis_errors.ResponseError as exc:
                logger.warning("Parked jobs of %s on queue %s not put back: %s", name, queue, exc)
                continue
            if moved:
                logger.info(
                    "Put %d parked job(s) of %s back on queue %s: it is not paused", moved, name, queue
                )
