-- Extend the leases of running jobs, and tell which of them were asked to stop.
-- Names: the interface in scripts.py; beat(n): a token and its job's hash. XX: never resurrect.
-- Returns {tokens whose lease is gone (another runjobs has taken those jobs back),
--          tokens whose job carries a cancel request (${F_CANCEL})}.
${NOW}
local gone, cancel = {}, {}
local until_ = now + tonumber(lease_seconds)
for n = 1, beat_count do
  local b = beat(n)
  if redis.call('ZADD', leases, 'XX', 'CH', until_, b.token) == 0 and not redis.call('ZSCORE', leases, b.token) then
    table.insert(gone, b.token)
  elseif redis.pcall('HEXISTS', b.hash, '${F_CANCEL}') == 1 then  -- pcall: a garbage key stops no renewal
    table.insert(cancel, b.token)
  end
end
return {gone, cancel}
