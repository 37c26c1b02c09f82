-- Move one member of the sorted set behind the others: scored now + seconds. XX: never resurrect one
-- that was settled meanwhile.
${NOW}
return redis.call('ZADD', set, 'XX', now + tonumber(seconds), member)
