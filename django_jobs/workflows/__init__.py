"""Jobs that belong together: chains, batches and periodic (cron) jobs."""
