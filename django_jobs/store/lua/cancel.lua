-- Cancel a job that has not started, or ask a running one to stop. Names: the interface in
-- scripts.py. hash: the job's; queue: the keys of its queue (its hash's origin, which never changes),
-- where a waiting job can be: its scheduled set (retries, delayed and limit-deferred jobs) and its
-- ready places; parked: the parked list its ${F_PARKED} names, if it has one; line: for a job waiting
-- its key's turn (its ${F_LINE}), its line and its scope's slots, where a woken one holds a slot (see
-- fair.lua; an emptied line leaves its queue's index at maintenance's next look).
-- stamp: now as RQ's timestamp; finished_ttl: seconds a cancelled job's hash lives (like a finished
-- one's); parked_as and line_as: the ${F_PARKED} and ${F_LINE} the caller read ('' for none): if a
-- claim parked the job or a resume or a wake-up released it since, the keys are not the right ones,
-- and the caller asks again.
-- A waiting job leaves every place a worker could find it, in this one step, so it never runs; its
-- unique key is free again (a marker holds only while its job waits or runs). A running job gets
-- ${F_CANCEL} (the first request's time): its code may poll it, its supervisor kills it after the
-- grace, and the attempt is then settled as cancelled by the fenced fail or release.
-- Returns 1 cancelled, 2 requested (it runs), 3 already ended (finished, failed, cancelled), 0 no job,
-- 4 parked or released meanwhile (nothing changed: ask again).
if redis.call('TYPE', hash)['ok'] ~= 'hash' then return 0 end
local read = redis.call('HMGET', hash, '${F_PARKED}', '${F_LINE}')
if (read[1] or '') ~= parked_as or (read[2] or '') ~= line_as then return 4 end
local status = redis.call('HGET', hash, '${F_STATUS}')
if status == '${STARTED}' then
  redis.call('HSETNX', hash, '${F_CANCEL}', stamp)
  return 2
end
if status == '${FINISHED}' or status == '${FAILED}' or status == '${CANCELED}' then return 3 end
-- queued, scheduled or a status no worker wrote: out of every place it could wait, whatever it says
local places = {queue.scheduled, queue.list, queue.high, queue.low, parked or nil}
if line then places[#places + 1], places[#places + 2] = line.line, line.slots end
for _, place in ipairs(places) do
  local kind = redis.call('TYPE', place)['ok']
  if kind == 'list' then redis.call('LREM', place, 0, id)
  elseif kind == 'zset' then redis.call('ZREM', place, id) end
end
redis.call('HDEL', hash, '${F_PARKED}', '${F_LINE}', '${F_TURN}')
redis.call('HSET', hash, '${F_STATUS}', '${CANCELED}', '${F_ENDED_AT}', stamp)
redis.call('EXPIRE', hash, finished_ttl)
return 1
