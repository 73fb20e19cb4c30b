-- One client IP (the hot key, or the already-denied key).
request = function()
  return wrk.format("GET", nil, { ["cf-connecting-ip"] = os.getenv("BENCH_IP") or "192.0.2.1" })
end
