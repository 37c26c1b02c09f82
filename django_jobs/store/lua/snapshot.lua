-- Queue depths and live workers for the gauges. KEYS[1]: the set of worker keys, then two keys per
-- queue (its list, its scheduled set). ARGV[1]: the job hash prefix.
-- Exception to "every key in KEYS": the hash of a queue's head job and each worker record, known only
-- once read; on this same server.
-- Returns {{depth, head's enqueued_at or '', scheduled}, ...} in queue order, then
-- {state, hostname, queues} of each registered worker whose record has not expired.
local queues = {}
for i = 1, (#KEYS - 1) / 2 do
  local list, sched = KEYS[2 * i], KEYS[2 * i + 1]
  local head = redis.call('LINDEX', list, 0)
  local enqueued = ''
  if head then
    local value = redis.pcall('HGET', ARGV[1] .. head, 'enqueued_at')
    if type(value) == 'string' then enqueued = value end
  end
  queues[i] = {redis.call('LLEN', list), enqueued, redis.call('ZCARD', sched)}
end
local workers = {}
for _, key in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local record = redis.pcall('HMGET', key, 'state', 'hostname', 'queues')
  if type(record) == 'table' and record[1] then table.insert(workers, record) end
end
return {queues, workers}
