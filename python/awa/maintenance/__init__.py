"""Maintenance run by one elected worker per database: promoting due jobs
(scheduler) and rescuing orphaned claims (rescuer)."""
