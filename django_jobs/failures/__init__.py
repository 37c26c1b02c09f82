"""Failed jobs: dead letters, their triage and alerts, redaction, retrying now."""
