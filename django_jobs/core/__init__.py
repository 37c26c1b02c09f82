"""A job's definition, its envelope and payload, one attempt and the outcome pipeline."""
