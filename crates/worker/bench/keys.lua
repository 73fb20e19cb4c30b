-- 10k distinct client IPs, round robin (CF-Connecting-IP passes through wrangler dev),
-- starting at BENCH_OFFSET so that each round of the per-key case meets fresh keys.
local n = tonumber(os.getenv("BENCH_OFFSET") or "0")
request = function()
  n = n + 1
  local i = n % 10000
  local ip = "10." .. (math.floor(i / 256) % 256) .. "." .. (i % 256) .. ".1"
  return wrk.format("GET", nil, { ["cf-connecting-ip"] = ip })
end
