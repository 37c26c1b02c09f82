-- The members of KEYS[1] scored at most now - ARGV[1] seconds, oldest first, at most ARGV[2].
${NOW}
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
