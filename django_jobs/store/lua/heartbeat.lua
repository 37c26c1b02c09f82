-- Extend the leases of running jobs, and tell which of them were asked to stop.
-- KEYS[1]: leases, KEYS[i] (i >= 2): the hash of the job of token ARGV[i].
-- ARGV[1] lease seconds, ARGV[2..] tokens. XX: never resurrect.
-- Returns {tokens whose lease is gone (another runjobs has taken those jobs back),
--          tokens whose job carries a cancel request ('dj_cancel')}.
${NOW}
local gone, cancel = {}, {}
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i]) == 0
     and not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    table.insert(gone, ARGV[i])
  elseif redis.pcall('HEXISTS', KEYS[i], 'dj_cancel') == 1 then  -- pcall: a garbage key stops no renewal
    table.insert(cancel, ARGV[i])
  end
end
return {gone, cancel}
