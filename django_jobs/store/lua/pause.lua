-- Pause a queue or a job type on this server: one field of the paused hash, written once.
-- KEYS[1] the paused hash. ARGV[1] the field (queue:<q> or job:<name>), ARGV[2] who, ARGV[3] why.
-- The record's time is Redis time, the one clock every host shares. A second pause changes nothing:
-- the first one's who, when and why stay, and so does its age (the alert's clock).
-- Returns 1 paused now, 0 already paused.
${NOW}
return redis.call('HSETNX', KEYS[1], ARGV[1], cjson.encode({at = now, by = ARGV[2], reason = ARGV[3]}))
