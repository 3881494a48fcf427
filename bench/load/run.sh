#!/usr/bin/env bash
# The service under load: `vgen serve` on loopback hit by wrk in rounds of (a) a submission
# flood (POST /v1/jobs, new seed each time) and (b) status polling (GET /v1/jobs/{id}).
# Checks: no crash (clean exit on SIGTERM), no 5xx, 429 + Retry-After when saturated, RSS
# stable across rounds (growth <= 50 MB); reports p50/p99 of status requests.
# Usage: bench/load/run.sh [MODEL_DIR] [ROUNDS]   (no MODEL_DIR: a tiny random Wan package)
# Writes bench/out/load.json. Needs wrk (apt-get install wrk).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
vgen="${VGEN_BIN:-$root/build/bin/vgen}"
python="${VGEN_PYTHON:-$HOME/.cache/vgen/venv/bin/python}"
rounds="${2:-3}"
out="$root/bench/out"; mkdir -p "$out"
work="$(mktemp -d)"; trap 'kill -9 ${pid:-0} 2>/dev/null || true; rm -rf "$work"' EXIT
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 2; }

model="${1:-}"
if [[ -z "$model" ]]; then
  model="$work/pkg"
  "$python" -m vgen_export.wan --tiny --seed 0 --out "$model" >/dev/null 2>&1
fi

"$vgen" serve --listen 127.0.0.1:0 --model "$model" --output-dir "$work/videos" --config "$here/service.json" \
  >"$work/stdout" 2>"$work/serve.log" &
pid=$!
for _ in $(seq 600); do grep -q "listening on" "$work/stdout" 2>/dev/null && break; sleep 0.1; done
url="$(sed -n 's/^listening on //p' "$work/stdout")"
[[ -n "$url" ]] || { cat "$work/serve.log"; exit 1; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
# Eight jobs to poll (ids job-1..job-8 exist from here on).
for i in $(seq 8); do
  curl -sf -o /dev/null -X POST "$url/v1/jobs" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"a blue square moving up\", \"width\": 48, \"height\": 32, \"frames\": 9, \"steps\": 4, \"seed\": $i}"
done
rss_start=$(rss)
results="[]"
for r in $(seq "$rounds"); do
  flood="$(wrk -t2 -c16 -d10s -s "$here/submit.lua" "$url" 2>&1)"
  poll="$(VGEN_LOAD_JOBS=8 wrk -t2 -c32 -d15s --latency -s "$here/status.lua" "$url" 2>&1)"
  kill -0 "$pid"  # still alive
  results="$("$python" - "$results" "$r" "$(rss)" <<PY
import json, re, sys
results, r, rss = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
flood, poll = """$flood""", """$poll"""
grab = lambda tag, text: json.loads(re.search(tag + r" (\{.*\})", text).group(1))
rps = lambda text: float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
results.append({"round": r, "submit": {"statuses": grab("STATUSES", flood), "requests_per_s": rps(flood)},
                "status": {"latency_ms": grab("LATENCY_MS", poll), "requests": grab("REQUESTS", poll), "requests_per_s": rps(poll)},
                "refused_with_retry_after": grab("RETRY_AFTER", flood)["with_header"], "rss_kb": rss})
print(json.dumps(results))
PY
)"
done
kill -TERM "$pid"; set +e; wait "$pid"; code=$?; set -e
"$python" - "$results" "$rss_start" "$code" "$out/load.json" <<'PY'
import json, os, platform, sys
rounds, rss_start, code, path = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"machine: {os.cpu_count()} cores, {cpu}")
print(f"{'round':>5} {'POST/s':>8} {'202':>6} {'429':>6} {'5xx':>5} {'GET/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'RSS MB':>8}")
bad = []
for r in rounds:
    st = {int(k): v for k, v in r["submit"]["statuses"].items()}
    five = sum(v for k, v in st.items() if k >= 500)
    lat = r["status"]["latency_ms"]
    print(f"{r['round']:>5} {r['submit']['requests_per_s']:>8.0f} {st.get(202, 0):>6} {st.get(429, 0):>6} {five:>5} "
          f"{r['status']['requests_per_s']:>8.0f} {lat['p50']:>8.3f} {lat['p99']:>8.3f} {r['rss_kb'] / 1024:>8.1f}")
    if five: bad.append(f"round {r['round']}: {five} 5xx answers")
    if not st.get(429): bad.append(f"round {r['round']}: no 429 under a flood")
    if r["refused_with_retry_after"] != st.get(429, 0): bad.append(f"round {r['round']}: a 429 without Retry-After")
    if r["status"]["requests"]["non_2xx"]: bad.append(f"round {r['round']}: status polls answered non-2xx")
growth = (rounds[-1]["rss_kb"] - rounds[0]["rss_kb"]) / 1024
print(f"RSS: {rss_start / 1024:.1f} MB at start, growth from round 1 to {len(rounds)}: {growth:+.1f} MB; exit code on SIGTERM: {code}")
if growth > 50: bad.append(f"RSS grew {growth:.1f} MB across rounds")
if code != 0: bad.append(f"server exit code {code}")
json.dump({"machine": {"cores": os.cpu_count(), "cpu": cpu, "kernel": platform.release()}, "rounds": rounds,
           "rss_start_kb": rss_start, "rss_growth_mb": growth, "exit_code": code, "problems": bad}, open(path, "w"), indent=1)
print("problems: " + ("; ".join(bad) if bad else "none"))
sys.exit(1 if bad else 0)
PY
