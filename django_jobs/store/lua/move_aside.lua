-- Move a structure key of the wrong type aside, unchanged, to 'moved'. kind: the wrong type it was
-- found with: renamed only if it still has it (someone may have fixed it meanwhile). Returns 1 if
-- it moved.
if redis.call('TYPE', key)['ok'] ~= kind then return 0 end
redis.call('RENAME', key, moved)
return 1
