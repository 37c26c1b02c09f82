-- Note which server is the primary now. KEYS[1]: djjobs:primary (a hash). ARGV[1]: this server's
-- run_id, ARGV[2]: its replication id. The hash replicates, so after a failover (or a restart that
-- lost data) the new primary holds the old identity: the first runjobs to look records the change.
-- Returns {1 if the identity changed since someone last looked (0 on first sight), when it changed
-- (Redis time, '' if never)}.
${NOW}
local known = redis.call('HMGET', KEYS[1], 'run_id', 'replid', 'changed_at')
if known[1] == ARGV[1] and known[2] == ARGV[2] then return {0, known[3] or ''} end
local changed = 0
local changed_at = known[3] or ''
if known[1] then
  changed = 1
  changed_at = tostring(now)
  redis.call('HSET', KEYS[1], 'changed_at', changed_at, 'previous_run_id', known[1])
end
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'replid', ARGV[2])
return {changed, changed_at}
