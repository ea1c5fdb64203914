-- With $BENCH_BODY_FILE set, POST that body on every request (else plain GET); headers come
-- from wrk's -H flags. done() prints one JSON line (prefixed BENCH_JSON) for bench/run.py.
local path = os.getenv("BENCH_BODY_FILE")
if path and path ~= "" then
  local file = assert(io.open(path, "rb"))
  wrk.method = "POST"
  wrk.body = file:read("*a")
  file:close()
end

-- A body holding @@request@@ (bench/workloads.py REQUEST_NUMBER) gets a number of its own in
-- every request: numbers start from the clock, so no two cells of a run send the same one.
if wrk.body and wrk.body:find("@@request@@", 1, true) then
  local template = wrk.body
  local number = os.time() * 100000
  request = function()
    number = number + 1
    return wrk.format(nil, nil, nil, (template:gsub("@@request@@", tostring(number))))
  end
end

function done(summary, latency, requests)
  local parts = {
    string.format('"requests":%d', summary.requests),
    string.format('"duration_us":%d', summary.duration),
    string.format('"bytes":%d', summary.bytes),
    string.format('"errors_connect":%d', summary.errors.connect),
    string.format('"errors_read":%d', summary.errors.read),
    string.format('"errors_write":%d', summary.errors.write),
    string.format('"errors_status":%d', summary.errors.status),
    string.format('"errors_timeout":%d', summary.errors.timeout),
    string.format('"latency_mean_us":%.1f', latency.mean),
    string.format('"latency_max_us":%d', latency.max),
  }
  for _, p in ipairs({50, 90, 99}) do
    table.insert(parts, string.format('"latency_p%d_us":%d', p, latency:percentile(p)))
  end
  io.write("BENCH_JSON {" .. table.concat(parts, ",") .. "}\n")
end
