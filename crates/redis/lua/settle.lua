-- tollgate: commit one settle of a reservation, all or nothing, once per reservation id.
-- KEYS: the slots, as read by read.lua, then the reservation's settle record (same hash tag).
-- ARGV: as commit.lua's for the slots (ARGV[1] 'cas' or 'blind', then four per slot),
--   then the record (the settlement's numbers) and its time to live in ms.
-- Returns { 'ok' } when written; { 'settled', record } when the reservation was settled
-- before (nothing written: a retry answers the first outcome); or { 'conflict', seconds,
-- microseconds, value of each key } (the record's '' last) when any slot's version differs.
local n = #KEYS - 1
local record = KEYS[n + 1]
local done = redis.call('GET', record)
if done then
  return { 'settled', done }
end
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
      out[n + 4] = ''
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
redis.call('SET', record, ARGV[4 * n + 2], 'PX', ARGV[4 * n + 3])
return { 'ok' }
