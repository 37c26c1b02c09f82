"""The peers' side of the I/O and peer runs: imported only by the peers' own virtualenv
(``var/bench-peers``, built by ``benchmarks/peers.py``), never by the project's.

Each module wraps the bodies of ``benchmarks/stamp.py`` as its framework's jobs, with its broker on a
Redis database of its own of the private Redis (``BENCH_PEER_BROKER``): ``celery_app`` (Celery),
``dramatiq_app`` (Dramatiq), ``tasks`` (Django Tasks on django-tasks-db's ``DatabaseBackend``, with
``settings``). ``python -m benchmarks.peerside <peer> <job> <n> <stamp file>`` enqueues ``n`` jobs.
"""
