"""The duties of a server's maintenance, one module each: ``Maintenance`` only schedules them.

Each duty is a ``Duty``: one entry point (``run``), its own interval, and its own failure isolation
(the scheduler guards each run, so one raising never stops the others). Each can be built and run
alone from a ``Scope``.
"""
