-- Read-only. For each queue's index of parked lines in KEYS (see fair.lua): {jobs parked in the
-- first 'most' lines it lists, 1 if those are all of its lines or else 0}. A key of the wrong type
-- reads as empty.
-- Exception to "every key in KEYS": the lines, named by the index key, '\n' and a member of the index.
most = tonumber(most)
local out = {}
for i, index in ipairs(KEYS) do
  local found = {0, 1}
  local scopes = redis.pcall('ZRANGE', index, 0, most - 1)
  if not scopes.err then
    for _, scope in ipairs(scopes) do
      local n = redis.pcall('ZCARD', index .. '\n' .. scope)
      if type(n) == 'number' then found[1] = found[1] + n end
    end
    if #scopes == most and redis.call('ZCARD', index) > most then found[2] = 0 end
  end
  out[i] = found
end
return out
