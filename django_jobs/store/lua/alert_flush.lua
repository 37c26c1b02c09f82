-- Close the alert windows that are due (in 'due'), at most batch; seconds: the window; then the
-- prefixes of a group's window marker, count and last counted dead letter.
-- Exception to "every key in KEYS": a group's keys are known only once its fingerprint is read from
-- due; built from the prefixes in ARGV, on this same server.
-- Returns {fingerprint, count, last dead letter pk} per closed window; each summary opens the next window.
${NOW}
local out = {}
for _, fp in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, batch)) do
  redis.call('ZREM', due, fp)
  local count = tonumber(redis.call('GET', count_prefix .. fp) or '0')
  local last = redis.call('GET', last_prefix .. fp)
  redis.call('DEL', count_prefix .. fp, last_prefix .. fp)
  if count > 0 and last then
    redis.call('SET', window_prefix .. fp, '1', 'EX', seconds)
    table.insert(out, {fp, count, last})
  end
end
return out
