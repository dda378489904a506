-- wrk script for benchmarks/webhook_load.py --client wrk: POSTs the given AdmissionReviews in turn, one in flight per
-- keep-alive connection, and prints one JSON line: requests, errors, latency percentiles (request written to
-- answer read, in microseconds). Arguments: PATH FILE [PATH FILE ...].
local paths, bodies, next_index = {}, {}, 0

function init(args)
  for k = 1, #args, 2 do
    local f = assert(io.open(args[k + 1], "rb"))
    paths[#paths + 1] = args[k]
    bodies[#bodies + 1] = f:read("*a")
    f:close()
  end
  next_index = math.random(#bodies) - 1  -- connections do not start in step
end

function request()
  next_index = next_index % #bodies + 1
  return wrk.format("POST", paths[next_index], {["Content-Type"] = "application/json"}, bodies[next_index])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"p50_us": %d, "p95_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max))
end
