"""A store script is called on its own connection as one EVALSHA; a server that does not have it (a
restart, a failover, SCRIPT FLUSH) gets it loaded, and the call is made again."""

from __future__ import annotations

import hashlib

from django_jobs.store import Store
from django_jobs.store.scripts import load


def test_a_script_the_server_does_not_have_is_loaded_and_called_again(redis_db):
    store = Store.of(redis_db)
    script = load(redis_db, "heartbeat")  # the one the store calls: one per connection
    script.sha = "0" * 40  # a digest no server has: EVALSHA answers NOSCRIPT, as after a restart
    beat = store.heartbeat(["nosuchjob:nonce"], 10.0)
    assert beat.gone == {"nosuchjob:nonce"} and not beat.cancelled
    assert script.sha == hashlib.sha1(script.script.encode()).hexdigest()
