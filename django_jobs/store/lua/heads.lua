-- Read-only. For each sorted set in KEYS (a queue's high and low priority sets, see ready.lua):
-- {how many ids it holds, then the id at the head of each priority band it holds}. Within a band
-- ids wait in FIFO order, so its head is its oldest job: the oldest-job age of a queue reads these
-- and the head of its list. An empty key costs one ZRANGE; a key of the wrong type reads as empty;
-- at most 201 bands per key, whatever its scores hold.
local band = ${BAND}
local out = {}
for i, key in ipairs(KEYS) do
  local found = {0}
  local first = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  if not first.err and first[1] then
    found[1] = redis.call('ZCARD', key)
    while first[1] and #found <= 201 do
      table.insert(found, first[1])
      local next_band = (math.floor(tonumber(first[2]) / band) + 1) * band
      first = redis.call('ZRANGEBYSCORE', key, string.format('%.0f', next_band), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    end
  end
  out[i] = found
end
return out
