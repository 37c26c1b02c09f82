-- Cancel a job that has not started, or ask a running one to stop.
-- KEYS[1] the job hash, then every place a waiting job of its queue (its hash's origin, which never
-- changes) can be: KEYS[2] its scheduled set (retries, delayed and limit-deferred jobs), KEYS[3..]
-- where a ready job waits (its list, ..., and the parked list its 'dj_parked' names, if it has one)
-- and, for a job waiting its key's turn (its 'dj_line'), its line and its scope's slots, where a woken
-- one holds a slot (see fair.lua; an emptied line leaves its queue's index at maintenance's next look).
-- ARGV[1] the job id, ARGV[2] now as RQ's timestamp, ARGV[3] seconds a cancelled job's hash lives
-- (like a finished one's), ARGV[4] the 'dj_parked' and ARGV[5] the 'dj_line' the caller read ('' for
-- none): if a claim parked the job or a resume or a wake-up released it since, the keys are not the
-- right ones, and the caller asks again.
-- A waiting job leaves every place a worker could find it, in this one step, so it never runs; its
-- unique key is free again (a marker holds only while its job waits or runs). A running job gets
-- 'dj_cancel' (the first request's time): its code may poll it, its supervisor kills it after the
-- grace, and the attempt is then settled as cancelled by the fenced fail or release.
-- Returns 1 cancelled, 2 requested (it runs), 3 already ended (finished, failed, cancelled), 0 no job,
-- 4 parked or released meanwhile (nothing changed: ask again).
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
local read = redis.call('HMGET', KEYS[1], 'dj_parked', 'dj_line')
if (read[1] or '') ~= ARGV[4] or (read[2] or '') ~= ARGV[5] then return 4 end
local status = redis.call('HGET', KEYS[1], 'status')
if status == '${STARTED}' then
  redis.call('HSETNX', KEYS[1], 'dj_cancel', ARGV[2])
  return 2
end
if status == '${FINISHED}' or status == '${FAILED}' or status == '${CANCELED}' then return 3 end
-- queued, scheduled or a status no worker wrote: out of every place it could wait, whatever it says
for i = 2, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind == 'list' then redis.call('LREM', KEYS[i], 0, ARGV[1])
  elseif kind == 'zset' then redis.call('ZREM', KEYS[i], ARGV[1]) end
end
redis.call('HDEL', KEYS[1], 'dj_parked', 'dj_line', 'dj_turn')
redis.call('HSET', KEYS[1], 'status', '${CANCELED}', 'ended_at', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
