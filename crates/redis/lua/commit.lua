-- tollgate: commit one decision, all or nothing, if no slot changed since it was read.
-- KEYS: the slots, as read by read.lua.
-- ARGV[1]: 'cas' (compare each slot's version first) or 'blind' (a test's control run only).
-- Then four arguments per key, in KEYS order:
--   the version read ('' when the key was absent),
--   the action: 'k' keep, 'd' delete, 'p' put,
--   the new value (put: 8-byte write id and state bytes), and its time to live in ms (put).
-- Returns { 'ok' } when written, or { 'conflict', seconds, microseconds, value of each key }
-- (the read's answer, so that a retry costs one round trip) when any version differs.
local n = #KEYS
if ARGV[1] == 'cas' then
  for i = 1, n do
    local cur = redis.call('GET', KEYS[i])
    local version = cur and string.sub(cur, 1, 8) or ''
    if version ~= ARGV[4 * i - 2] then
      local t = redis.call('TIME')
      local out = { 'conflict', t[1], t[2] }
      for j = 1, n do
        out[j + 3] = redis.call('GET', KEYS[j]) or ''
      end
      return out
    end
  end
end
for i = 1, n do
  local action = ARGV[4 * i - 1]
  if action == 'd' then
    redis.call('DEL', KEYS[i])
  elseif action == 'p' then
    redis.call('SET', KEYS[i], ARGV[4 * i], 'PX', ARGV[4 * i + 1])
  end
end
return { 'ok' }
