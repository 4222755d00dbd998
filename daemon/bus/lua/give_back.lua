-- give_back: a job that a stopping worker's cut-off dequeue may have taken goes back to the
-- front of its queue (worker/giveback.py says when).
-- KEYS[1] RQ's intermediate list of the queue (`rq:queue:<name>:intermediate`)
-- KEYS[2] the queue's list (`rq:queue:<name>`)
-- KEYS[3] the job's hash (`rq:job:<id>`)
-- ARGV[1] the job id
-- A job some worker has started (its status is no longer `queued`: RQ's
-- prepare_job_execution sets it, with the StartedJobRegistry entry, in one step) stays where
-- it is, as does one already gone from the list.
-- Returns 1 when the job was given back, else 0.
if redis.call('HGET', KEYS[3], 'status') ~= 'queued' then
  return 0
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('LPUSH', KEYS[2], ARGV[1])
return 1
