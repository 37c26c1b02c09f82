  -- A job of a type (or scope) with a rate limit starts only while its window (Redis time / period)
  -- has room, and the start is counted; else it waits until the next window.
  local limit = job.limit
  if not (limit and limit.rate > 0) then return nil end
  local window = math.floor(now / limit.period)
  local counter = (job.scope and limit.rate_prefix .. job.scope .. ':' or limit.rate_prefix) .. window
  local started = redis.call('INCR', counter)
  if started == 1 then redis.call('EXPIRE', counter, math.ceil(limit.period) + 1) end
  if started <= limit.rate then return nil end
  return wait_out(job, (window + 1) * limit.period - now)
