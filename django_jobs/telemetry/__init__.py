"""Counters, the dashboard's hourly figures and log lines."""
