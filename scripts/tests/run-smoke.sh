#!/usr/bin/env bash
# scripts/run as the README tells a newcomer to use it: it must install/build what is missing,
# start `repoll serve` with a managed Redis and the simulator, answer a query with partial data
# and then the final result, and stop cleanly on SIGTERM (exit 0, its redis-server gone).
# Run by scripts/test after the release build, so the build step here is the up-to-date check.
# Ports are free ones and the Redis data goes to a temporary directory: nothing of a running
# demo (port 3000, ./data/redis) is touched.
#
# With --cluster it follows docs/operations.md's "Try it on a small cluster" instead: `scripts/cluster
# start` (three masters, here on free ports), then scripts/run with REDIS_URL naming them,
# REDIS_CLUSTER=true and REPOLL_PARTITIONS=6; the queries must be answered and their keys
# spread over more than one master.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cluster=""
[ "${1:-}" = "--cluster" ] && cluster=1

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# A port for a cluster node: at most 55535, with its bus port (port + 10000) free too. The
# kernel's free ports go up to 60999, and a node on one over 55535 cannot start: CI failed so.
cluster_port() {
  python3 -c '
import random, socket
for _ in range(1000):
    p = random.randint(20000, 55535)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        pass'
}
fail() { echo "run-smoke: $*" >&2; echo "--- scripts/run output ---" >&2; cat "$log" >&2 || true; exit 1; }

web="127.0.0.1:$(free_port)"
sim="127.0.0.1:$(free_port)"
data="$(mktemp -d)"
log="$data/run.log"
cleanup() {
  [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null || true
  [ -n "$cluster" ] && bash "$ROOT/scripts/cluster" stop --dir "$data/cluster" >/dev/null 2>&1
  rm -rf "$data"
}
trap cleanup EXIT

env=(REPOLL_ADDR="$web" REPOLL_SIM_ADDR="$sim" REPOLL_ADMIN_PASSWORD="run-smoke-password")
if [ -n "$cluster" ]; then
  ports="$(cluster_port),$(cluster_port),$(cluster_port)"
  bash "$ROOT/scripts/cluster" start --ports "$ports" --dir "$data/cluster" >"$data/cluster.log" 2>&1 \
    || { cat "$data/cluster.log" >&2; fail "scripts/cluster start failed"; }
  url="$(sed -n 's/^ *REDIS_URL=\([^ ]*\) REDIS_CLUSTER=true$/\1/p' "$data/cluster.log")"
  [ -n "$url" ] || fail "scripts/cluster printed no REDIS_URL: $(cat "$data/cluster.log")"
  env+=(REDIS_URL="$url" REDIS_CLUSTER=true REPOLL_PARTITIONS=6)
else
  env+=(REPOLL_MANAGED_REDIS_DIR="$data/redis")
fi
# setsid: scripts/run execs repoll, which must see our SIGTERM alone (as from a terminal's
# process group it would get Ctrl-C); its managed Redis runs in a group of its own.
env "${env[@]}" setsid bash "$ROOT/scripts/run" >"$log" 2>&1 &
pid=$!

deadline=$((SECONDS + 300)) # the build step is an up-to-date check here; 5 min is a hang guard
until curl -fsS "http://$web/readyz" >/dev/null 2>&1; do
  kill -0 "$pid" 2>/dev/null || fail "scripts/run exited before /readyz answered"
  [ "$SECONDS" -lt "$deadline" ] || fail "/readyz did not answer within 5 min"
  sleep 0.2
done

# One query answered through partial data to its final answer (with --cluster, six, so their
# partitions land on several masters).
queries=1
[ -n "$cluster" ] && queries=6
for n in $(seq "$queries"); do
  first="$(curl -sS -X POST "http://$web/api/v1/queries" -H 'content-type: application/json' \
    -d "{\"query\": \"run-smoke $n polls=3\"}")"
  id="$(printf '%s' "$first" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')" \
    || fail "the submit's answer is not the API's JSON: $first"
  deadline=$((SECONDS + 60))
  while :; do
    state="$(curl -sS "http://$web/api/v1/queries/$id")"
    status="$(printf '%s' "$state" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')"
    [ "$status" = "done" ] && break
    [ "$status" = "processing" ] || fail "unexpected status '$status': $state"
    [ "$SECONDS" -lt "$deadline" ] || fail "not done within 60 s: $state"
    sleep 0.2
  done
  printf '%s' "$state" | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["result"] is not None, s
assert s["polls"] == 2, s  # two "still processing" answers, then done
' || fail "the final answer is not the simulator's after two processing answers: $state"
done
if [ -n "$cluster" ]; then
  holding=0
  for port in ${ports//,/ }; do
    [ "$(redis-cli -p "$port" DBSIZE)" -gt 0 ] && holding=$((holding + 1))
  done
  [ "$holding" -ge 2 ] || fail "the queue's keys are on $holding master(s), want several"
fi

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" -eq 0 ] || fail "scripts/run exited $rc after SIGTERM (want 0)"
if [ -n "$cluster" ]; then
  echo "run-smoke --cluster: PASS (scripts/cluster + scripts/run on 3 masters, $queries queries done, keys on $holding masters, exit 0 on SIGTERM)"
  exit 0
fi
if pgrep -f "$data/redis" >/dev/null; then fail "its redis-server outlived it"; fi
echo "run-smoke: PASS (scripts/run served $web, a query done after two processing answers, exit 0 on SIGTERM)"
