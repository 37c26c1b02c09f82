"""The benchmark's jobs and the one table their writes go to."""
