"""Helpers for your own tests: capture enqueued jobs, run them inline, or drain Redis in-process."""
