-- Extend the leases of running jobs. KEYS[1]: leases. ARGV[1] lease seconds, ARGV[2..] tokens.
-- XX: never resurrect. Returns the tokens whose lease is gone: another runjobs has taken those jobs back.
${NOW}
local gone = {}
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i]) == 0
     and not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    table.insert(gone, ARGV[i])
  end
end
return gone
