-- Close the alert windows that are due. KEYS[1]: alert due. ARGV: window, batch size, then the prefixes
-- of a group's window marker, count and last counted dead letter.
-- Exception to "every key in KEYS": a group's keys are known only once its fingerprint is read from
-- KEYS[1]; built from the prefixes in ARGV, on this same server.
-- Returns {fingerprint, count, last dead letter pk} per closed window; each summary opens the next window.
${NOW}
local out = {}
for _, fp in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[2])) do
  redis.call('ZREM', KEYS[1], fp)
  local count = tonumber(redis.call('GET', ARGV[4] .. fp) or '0')
  local last = redis.call('GET', ARGV[5] .. fp)
  redis.call('DEL', ARGV[4] .. fp, ARGV[5] .. fp)
  if count > 0 and last then
    redis.call('SET', ARGV[3] .. fp, '1', 'EX', ARGV[1])
    table.insert(out, {fp, count, last})
  end
end
return out
