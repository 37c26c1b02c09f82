-- Note which server is the primary now. primary: djjobs:primary (a hash); run_id and replid: this
-- server's run_id and replication id. The hash replicates, so after a failover (or a restart that
-- lost data) the new primary holds the old identity: the first runjobs to look records the change.
-- Returns {1 if the identity changed since someone last looked (0 on first sight), when it changed
-- (Redis time, '' if never)}.
${NOW}
local known = redis.call('HMGET', primary, 'run_id', 'replid', 'changed_at')
if known[1] == run_id and known[2] == replid then return {0, known[3] or ''} end
local changed = 0
local changed_at = known[3] or ''
if known[1] then
  changed = 1
  changed_at = tostring(now)
  redis.call('HSET', primary, 'changed_at', changed_at, 'previous_run_id', known[1])
end
redis.call('HSET', primary, 'run_id', run_id, 'replid', replid)
return {changed, changed_at}
