"""A store script is called on its own connection as one EVALSHA; a server that does not have it (a
restart, a failover, SCRIPT FLUSH) gets it loaded, and the call is made again."""

from __future__ import annotations

import hashlib
import threading

import redis
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from django_jobs.store import Store
from django_jobs.store.scripts import load


def test_a_script_the_server_does_not_have_is_loaded_and_called_again(redis_db):
    store = Store.of(redis_db)
    script = load(redis_db, "heartbeat")  # the one the store calls: one per connection
    script.sha = "0" * 40  # a digest no server has: EVALSHA answers NOSCRIPT, as after a restart
    beat = store.heartbeat(["nosuchjob:nonce"], 10.0)
    assert beat.gone == {"nosuchjob:nonce"} and not beat.cancelled
    assert script.sha == hashlib.sha1(script.script.encode()).hexdigest()


def test_a_script_call_whose_connection_fails_is_made_again_as_the_client_retries(private_redis):
    # the server freezes under a call already sent: its reply times out, and the call is made again
    # through redis-py (its retry policy), which gets through once the server answers
    client = redis.Redis.from_url(private_redis.url, socket_timeout=0.3, retry=Retry(ConstantBackoff(0.2), 5))
    store = Store.of(client)
    assert store.heartbeat(["nosuchjob:nonce"], 10.0).gone == {"nosuchjob:nonce"}  # a pooled connection
    private_redis.freeze()
    thaw = threading.Timer(0.6, private_redis.thaw)
    thaw.start()
    try:
        beat = store.heartbeat(["nosuchjob:other"], 10.0)
    finally:
        thaw.join()
    assert beat.gone == {"nosuchjob:other"}
