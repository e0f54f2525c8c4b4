#!/usr/bin/env bash
# Checks scripts/lib/summary.sh (the verdict at the end of scripts/test) on canned outputs of
# the real runners, so a change of cargo's or Playwright's output format cannot let a flaky,
# skipped or failed test pass unnoticed. Run first by scripts/test; takes well under a second.
#
# The fixtures (scripts/tests/fixtures/) are real outputs, paths shortened to /repo:
#   cargo-*.log  `cargo test` of a small crate (unit, integration and doc tests): all passing;
#                one #[ignore]d test; one failing test (--no-fail-fast, backtrace frames cut).
#   e2e-*.log    `CI=true npx playwright test` (one retry, list reporter) of small specs: all
#                passing; one test that passes only on its retry (flaky); one that always fails;
#                a test.skip and a test.fixme; a run stopped early by --max-failures=1.
#   allow-*.txt  flaky allow-lists in end2end/flaky-allowlist.txt's format: none; the flaky
#                test; another test.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fx="$here/fixtures"
# shellcheck source=../lib/summary.sh
source "$here/../lib/summary.sh"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
problems=0

# expect WANT_RC RUST_LOG E2E_LOG ALLOWLIST [VAR=VALUE ...]: runs the verdict (REPOLL_ALLOW_SKIPS
# unset unless given as ALLOW) and checks its exit status and the named counters.
expect() {
  local want="$1" rust="$2" e2e="$3" allow="$4" rc out check var value
  shift 4
  out="$(REPOLL_ALLOW_SKIPS="${ALLOW:-0}" summary_verdict "$rust" "$e2e" "$allow" 2>&1)"
  rc=$?
  # The counters are set by the verdict; read them back in this shell.
  REPOLL_ALLOW_SKIPS="${ALLOW:-0}" summary_verdict "$rust" "$e2e" "$allow" >/dev/null 2>&1
  local label="${ALLOW:+REPOLL_ALLOW_SKIPS=$ALLOW }$(basename "$rust") + $(basename "$e2e") + $(basename "$allow")"
  if [ "$rc" -ne "$want" ]; then
    echo "summary-check: $label: exit $rc, want $want"
    printf '%s\n' "$out" | sed 's/^/    /'
    problems=$((problems + 1))
  fi
  for check in "$@"; do
    var="${check%%=*}"
    value="${check#*=}"
    if [[ "$value" == '~'* ]]; then
      if [[ "${!var}" != *"${value#\~}"* ]]; then
        echo "summary-check: $label: $var is '${!var}', want it to contain '${value#\~}'"
        problems=$((problems + 1))
      fi
    elif [ "${!var}" != "$value" ]; then
      echo "summary-check: $label: $var is '${!var}', want '$value'"
      problems=$((problems + 1))
    fi
  done
}

none="$fx/allow-none.txt"
flaky_ok="$fx/allow-flaky.txt"

# All green.
expect 0 "$fx/cargo-pass.log" "$fx/e2e-pass.log" "$none" \
  RUST_PASSED=4 RUST_FAILED=0 RUST_IGNORED=0 RUST_UNREADABLE= \
  E2E_PASSED=2 E2E_FAILED=0 E2E_FLAKY=0 E2E_SKIPPED=0 E2E_UNREADABLE=
# A test that needed the retry and is not allow-listed: a failure, named.
expect 1 "$fx/cargo-pass.log" "$fx/e2e-flaky.log" "$none" \
  E2E_PASSED=2 E2E_FLAKY=1 E2E_UNEXCUSED=1 E2E_UNREADABLE= \
  "E2E_UNEXCUSED_TITLES=~tests/flaky.spec.ts:2:1 › passes only on its retry"
# Another test on the allow-list excuses nothing.
expect 1 "$fx/cargo-pass.log" "$fx/e2e-flaky.log" "$fx/allow-other.txt" E2E_FLAKY=1 E2E_UNEXCUSED=1 E2E_ALLOWED=
# The same, allow-listed: green, and said.
expect 0 "$fx/cargo-pass.log" "$fx/e2e-flaky.log" "$flaky_ok" \
  E2E_FLAKY=1 E2E_UNEXCUSED=0 "E2E_ALLOWED=~allowed flaky: tests/flaky.spec.ts:2:1 › passes only on its retry (the fixture's reason)"
# A failed browser test (after its retry) and a failed Rust test.
expect 1 "$fx/cargo-pass.log" "$fx/e2e-failed.log" "$none" E2E_FAILED=1 E2E_PASSED=2 E2E_FLAKY=0 E2E_UNREADABLE=
# Stopped early (--max-failures): the tests that did not run count as skipped, and the error
# outside any test as a failure.
ALLOW=1 expect 1 "$fx/cargo-pass.log" "$fx/e2e-stopped-early.log" "$none" E2E_FAILED=1 E2E_NOT_RUN=2 E2E_ERRORS=1 E2E_UNREADABLE=
expect 1 "$fx/cargo-failed.log" "$fx/e2e-pass.log" "$none" RUST_FAILED=1 RUST_PASSED=4 RUST_UNREADABLE=
# Skipped browser tests and an ignored Rust test fail the run unless allowed explicitly.
expect 1 "$fx/cargo-pass.log" "$fx/e2e-skipped.log" "$none" E2E_SKIPPED=2 E2E_PASSED=2 E2E_UNREADABLE=
ALLOW=1 expect 0 "$fx/cargo-pass.log" "$fx/e2e-skipped.log" "$none" E2E_SKIPPED=2
expect 1 "$fx/cargo-ignored.log" "$fx/e2e-pass.log" "$none" RUST_IGNORED=1 RUST_PASSED=4 RUST_UNREADABLE=
ALLOW=1 expect 0 "$fx/cargo-ignored.log" "$fx/e2e-pass.log" "$none" RUST_IGNORED=1

# A changed format is a failure, never a pass: a summary word Playwright might rename, a
# result line cargo might reword, a log that is missing.
sed 's/^  1 flaky$/  1 retried/' "$fx/e2e-flaky.log" > "$scratch/e2e-flaky-renamed.log"
expect 1 "$fx/cargo-pass.log" "$scratch/e2e-flaky-renamed.log" "$flaky_ok" "E2E_UNREADABLE=~announced 3 tests"
sed 's/^  2 skipped$/  2 skip/' "$fx/e2e-skipped.log" > "$scratch/e2e-skipped-renamed.log"
ALLOW=1 expect 1 "$fx/cargo-pass.log" "$scratch/e2e-skipped-renamed.log" "$none" "E2E_UNREADABLE=~announced 4 tests"
# The flaky count kept, its titles gone: nobody excused it.
awk '/^  1 flaky$/ {print; getline; next} {print}' "$fx/e2e-flaky.log" > "$scratch/e2e-flaky-untitled.log"
expect 1 "$fx/cargo-pass.log" "$scratch/e2e-flaky-untitled.log" "$flaky_ok" E2E_UNEXCUSED=1
sed 's/ ignored; / skipped; /' "$fx/cargo-ignored.log" > "$scratch/cargo-reworded.log"
ALLOW=1 expect 1 "$scratch/cargo-reworded.log" "$fx/e2e-pass.log" "$none" "RUST_UNREADABLE=~no 'test result:' line"
expect 1 "$scratch/missing.log" "$fx/e2e-pass.log" "$none" "RUST_UNREADABLE=~no 'test result:' line"
expect 1 "$fx/cargo-pass.log" "$scratch/missing.log" "$none" "E2E_UNREADABLE=~no 'Running N tests' line"

if [ "$problems" -ne 0 ]; then
  echo "summary-check: $problems problems: scripts/lib/summary.sh misreads the runners' output"
  exit 1
fi
echo "summary-check: the verdict reads every canned cargo and Playwright output right"
