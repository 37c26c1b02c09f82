"""What operators read: the overview, Prometheus collectors, durability and Redis state."""
