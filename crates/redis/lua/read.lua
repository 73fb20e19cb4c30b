-- tollgate: read the states of one request's slots, with the clock of the node that holds them.
-- KEYS: the slots (one hash tag, so one node in a cluster).
-- Returns { seconds, microseconds, value of each key ('' when absent) }.
-- A value is an 8-byte write id (its version) followed by the state's bytes.
local t = redis.call('TIME')
local out = { t[1], t[2] }
for i = 1, #KEYS do
  out[i + 2] = redis.call('GET', KEYS[i]) or ''
end
return out
