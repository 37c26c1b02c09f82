"""The shop: orders, and the background jobs that invoice, charge and sync them."""
