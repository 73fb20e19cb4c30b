-- 10,000 clients behind one trusted loopback proxy: each request carries the
-- X-Forwarded-For entry the proxy would write (198.18.0.0/15, the benchmarking range).
-- The 10,000 requests are written once per wrk thread in `init`, so that wrk spends its
-- time on the connections, not in Lua building a request per call (wrk shares the
-- machine with the server). Each thread starts at its own offset and walks them in order.
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

local requests = {}
local n = 10000
local i = 0

function init(args)
  for k = 0, n - 1 do
    local ip = "198.18." .. math.floor(k / 256) .. "." .. (k % 256)
    requests[k + 1] = wrk.format("GET", "/", { ["X-Forwarded-For"] = ip })
  end
  i = (id or 0) * 4999 % n
end

function request()
  i = i % n + 1
  return requests[i]
end
