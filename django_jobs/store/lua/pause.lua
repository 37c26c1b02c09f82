-- Pause a queue or a job type on this server: one field of the paused hash, written once.
-- paused: the paused hash; field: queue:<q> or job:<name>; by: who; reason: why.
-- The record's time is Redis time, the one clock every host shares. A second pause changes nothing:
-- the first one's who, when and why stay, and so does its age (the alert's clock).
-- Returns 1 paused now, 0 already paused.
${NOW}
return redis.call('HSETNX', paused, field, cjson.encode({at = now, by = by, reason = reason}))
