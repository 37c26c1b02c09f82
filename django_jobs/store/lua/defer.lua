-- Move one member of KEYS[1] behind the others: scored now + ARGV[2] seconds. XX: never resurrect one
-- that was settled meanwhile.
${NOW}
return redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
