"""An alert hook that records what it was given, for tests."""

ALERTED: list[str] = []


def remember(dead_letter):
    ALERTED.append(dead_letter.job_id)
