-- The members of the sorted set scored at most now - older_than seconds, oldest first, at most limit.
${NOW}
return redis.call('ZRANGEBYSCORE', set, '-inf', now - tonumber(older_than), 'LIMIT', 0, tonumber(limit))
