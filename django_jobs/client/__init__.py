"""Putting a job on its way: enqueue, the transactional outbox, the delivery backends."""
