"""What holds a job back or lets it through: pauses and idempotency keys."""
