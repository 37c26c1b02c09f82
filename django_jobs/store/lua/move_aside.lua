-- Move a structure key of the wrong type aside, unchanged. KEYS[1] the key, KEYS[2] where it goes.
-- ARGV[1] the wrong type it was found with: renamed only if it still has it (someone may have
-- fixed it meanwhile). Returns 1 if it moved.
if redis.call('TYPE', KEYS[1])['ok'] ~= ARGV[1] then return 0 end
redis.call('RENAME', KEYS[1], KEYS[2])
return 1
