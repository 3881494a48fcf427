-- wrk script: POST a small job again and again; count the answers by status.
-- Each request asks for another seed, so the result cache cannot absorb the load.
local counter = 0
local threads = {}
c202, c429, c4xx, c5xx, cother, cretry = 0, 0, 0, 0, 0, 0  -- globals: thread:get() copies numbers, not tables

function setup(thread)
  table.insert(threads, thread)
end

request = function()
  counter = counter + 1
  local body = string.format('{"prompt": "a red circle moving left", "width": 48, "height": 32, "frames": 9, "steps": 8, "seed": %d}',
                             counter * 7919 + math.random(1, 1000000))
  return wrk.format("POST", "/v1/jobs", {["Content-Type"] = "application/json"}, body)
end

response = function(status, headers, body)
  if status == 202 then c202 = c202 + 1
  elseif status == 429 then
    c429 = c429 + 1
    if headers["Retry-After"] then cretry = cretry + 1 end
  elseif status >= 500 then c5xx = c5xx + 1
  elseif status >= 400 then c4xx = c4xx + 1
  else cother = cother + 1 end
end

done = function(summary, latency, requests)
  local t = {202, 429, 400, 500, 0}
  local sum = {0, 0, 0, 0, 0}
  local retry = 0
  for _, th in ipairs(threads) do
    sum[1] = sum[1] + th:get("c202"); sum[2] = sum[2] + th:get("c429"); sum[3] = sum[3] + th:get("c4xx")
    sum[4] = sum[4] + th:get("c5xx"); sum[5] = sum[5] + th:get("cother"); retry = retry + th:get("cretry")
  end
  io.write(string.format('STATUSES {"202": %d, "429": %d, "400": %d, "500": %d, "0": %d}\n', sum[1], sum[2], sum[3], sum[4], sum[5]))
  io.write(string.format('RETRY_AFTER {"with_header": %d}\n', retry))
  io.write(string.format('LATENCY_MS {"p50": %.3f, "p99": %.3f}\n', latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
