-- 10,000 clients behind one trusted loopback proxy: each request carries the
-- X-Forwarded-For entry the proxy would write (198.18.0.0/15, the benchmarking range).
-- Each wrk thread has its own counter, so the keys repeat per thread in the same order.
local i = 0
request = function()
  i = (i + 1) % 10000
  local ip = "198.18." .. math.floor(i / 256) .. "." .. (i % 256)
  return wrk.format("GET", "/", { ["X-Forwarded-For"] = ip })
end
