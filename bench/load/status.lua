-- wrk script: poll job statuses (ids job-1 .. job-N round robin); report p50/p99.
local n = tonumber(os.getenv("VGEN_LOAD_JOBS") or "8")
local i = 0
request = function()
  i = i % n + 1
  return wrk.format("GET", "/v1/jobs/job-" .. i)
end
local non200 = 0
response = function(status, headers, body)
  if status ~= 200 then non200 = non200 + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format('LATENCY_MS {"p50": %.3f, "p90": %.3f, "p99": %.3f, "max": %.3f}\n', latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
  io.write(string.format('REQUESTS {"total": %d, "errors_connect": %d, "errors_read": %d, "errors_timeout": %d, "non_2xx": %d}\n',
                         summary.requests, summary.errors.connect, summary.errors.read, summary.errors.timeout,
                         summary.errors.status))
end
