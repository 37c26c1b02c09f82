-- Read each job's status field, changing nothing.
-- Names: the interface in scripts.py; job(n): a job's hash.
-- Returns the statuses in the order of the hashes: nil where the hash is gone, '' where the key is
-- not a hash (pcall: a garbage key answers for itself, not for the others).
local found = {}
for n = 1, job_count do
  local status = redis.pcall('HGET', job(n), '${F_STATUS}')
  if type(status) == 'table' then status = '' end
  found[n] = status
end
return found
