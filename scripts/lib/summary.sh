# The closing verdict of scripts/test, read from the test runners' own output: cargo's
# per-suite "test result:" lines and Playwright's list-reporter summary. Sourced, not executed;
# scripts/tests/summary-check.sh feeds it canned outputs of both (scripts/tests/fixtures/) and
# checks every verdict, so a change of either format cannot let a flaky, skipped or failed test
# through unnoticed.
#
# Nothing is green by default: a summary that cannot be read (no "test result:" line, counts
# that do not add up to what the runner said it was running) is a failure of its own.
#
# Skips: a Playwright test skipped (test.skip, test.fixme) or a Rust test ignored (#[ignore])
# fails the run unless REPOLL_ALLOW_SKIPS=1 is set for it (CI never sets it): a test that did
# not run proves nothing, so it must not pass silently.

# summary_sum REGEX FILE FIELD: the sum of FIELD (awk's $N) over the matches of REGEX (grep -Eo);
# 0 when nothing matches or the file is missing.
summary_sum() {
  { grep -Eo "$1" "$2" 2>/dev/null || true; } | awk -v f="$3" '{s+=$f} END {print s+0}'
}

# summary_lines REGEX FILE: how many lines match REGEX (0 when none or the file is missing).
summary_lines() {
  { grep -Ec "$1" "$2" 2>/dev/null || true; } | awk '{s+=$1} END {print s+0}'
}

# rust_summary LOG: reads cargo test's output. Sets RUST_PASSED, RUST_FAILED, RUST_IGNORED,
# RUST_UNREADABLE (a reason, empty when the counts are consistent).
rust_summary() {
  local log="$1" result='test result: (ok|FAILED)\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored; [0-9]+ measured'
  local suites running ran ignored_lines
  RUST_PASSED=$(summary_sum "$result" "$log" 4)
  RUST_FAILED=$(summary_sum "$result" "$log" 6)
  RUST_IGNORED=$(summary_sum "$result" "$log" 8)
  local measured
  measured=$(summary_sum "$result" "$log" 10)
  suites=$(summary_lines "$result" "$log")
  RUST_UNREADABLE=""
  # Each suite says "running N tests" first and "test result: ..." last; N counts every test
  # that was not filtered out, so it must equal passed + failed + ignored + measured.
  running=$(summary_sum '^running [0-9]+ tests?$' "$log" 2)
  ran=$((RUST_PASSED + RUST_FAILED + RUST_IGNORED + measured))
  # Each ignored test has its own line too ("test name ... ignored[, reason]").
  ignored_lines=$(summary_lines '^test .* \.\.\. ignored(, .*)?$' "$log")
  if [ "$suites" -eq 0 ]; then
    RUST_UNREADABLE="no 'test result:' line in $log"
  elif [ "$running" -ne "$ran" ]; then
    RUST_UNREADABLE="the suites announced $running tests, their results count $ran"
  elif [ "$ignored_lines" -ne "$RUST_IGNORED" ]; then
    RUST_UNREADABLE="$ignored_lines tests reported ignored, the results count $RUST_IGNORED"
  fi
}

# e2e_summary LOG ALLOWLIST: reads Playwright's list reporter. Sets E2E_PASSED, E2E_FAILED,
# E2E_FLAKY, E2E_SKIPPED, E2E_NOT_RUN (interrupted or did not run), E2E_ERRORS (outside any
# test), E2E_UNEXCUSED (flaky and
# not on the allow-list), E2E_ALLOWED (one "allowed flaky: title (reason)" line each),
# E2E_UNEXCUSED_TITLES, E2E_UNREADABLE (a reason, empty when the counts are consistent).
#
# The allow-list has one "title substring | open reason" per line (# comments, blank lines).
e2e_summary() {
  local log="$1" allowlist="$2" announced counted retried skipped_lines
  E2E_PASSED=$(summary_sum '^ *[0-9]+ passed' "$log" 1)
  E2E_FAILED=$(summary_sum '^ *[0-9]+ failed' "$log" 1)
  # "flaky": failed, then passed on its retry (CI allows one retry, as a report only).
  E2E_FLAKY=$(summary_sum '^ *[0-9]+ flaky' "$log" 1)
  E2E_SKIPPED=$(summary_sum '^ *[0-9]+ skipped' "$log" 1)
  E2E_NOT_RUN=$(($(summary_sum '^ *[0-9]+ interrupted' "$log" 1) + $(summary_sum '^ *[0-9]+ did not run' "$log" 1)))
  # Errors outside any test (a global setup, a stop after too many failures).
  E2E_ERRORS=$(summary_sum '^ *[0-9]+ errors? (was|were) not a part of any test' "$log" 1)
  E2E_UNREADABLE=""
  announced=$(summary_sum '^Running [0-9]+ tests?' "$log" 2)
  counted=$((E2E_PASSED + E2E_FAILED + E2E_FLAKY + E2E_SKIPPED + E2E_NOT_RUN))
  # Every attempt has its own line ("  ✘  3 tests/x.spec.ts:2:1 › title (retry #1) (5ms)");
  # a retry means the test failed once, so it is flaky or failed, whatever the summary says.
  retried=$(summary_lines '^ +[^ ]+ +[0-9]+ .* \(retry #[0-9]+\)' "$log")
  # A skipped test's line starts with "-" and has no duration.
  skipped_lines=$(summary_lines '^ +- +[0-9]+ ' "$log")
  if [ "$announced" -eq 0 ]; then
    E2E_UNREADABLE="no 'Running N tests' line in $log"
  elif [ "$announced" -ne "$counted" ]; then
    E2E_UNREADABLE="Playwright announced $announced tests, its summary counts $counted"
  elif [ "$retried" -gt 0 ] && [ $((E2E_FLAKY + E2E_FAILED)) -eq 0 ]; then
    E2E_UNREADABLE="$retried retries, but no test counted flaky or failed"
  elif [ "$skipped_lines" -ne "$E2E_SKIPPED" ]; then
    E2E_UNREADABLE="$skipped_lines tests shown skipped, the summary counts $E2E_SKIPPED"
  fi

  # The flaky titles: the lines under "N flaky", up to the next count line.
  local titles title pattern reason excused=0
  titles="$(awk '/^ *[0-9]+ flaky$/ {f=1; next} f && /^ *[0-9]+ (passed|failed|flaky|skipped|interrupted|did not run)/ {f=0} f && NF {print}' "$log" 2>/dev/null || true)"
  E2E_ALLOWED=""
  E2E_UNEXCUSED_TITLES=""
  while IFS= read -r title; do
    [ -n "$title" ] || continue
    # The reporter pads the title with a rule ("title ─────"): not part of the name.
    title="$(printf '%s' "$title" | sed -E 's/^ +//; s/( |─)+$//')"
    reason=""
    while IFS='|' read -r pattern why; do
      pattern="$(printf '%s' "$pattern" | sed 's/^ *//; s/ *$//')"
      case "$pattern" in '' | '#'*) continue ;; esac
      if [[ "$title" == *"$pattern"* ]]; then reason="$(printf '%s' "$why" | sed 's/^ *//')"; break; fi
    done < "$allowlist"
    if [ -n "$reason" ]; then
      excused=$((excused + 1))
      E2E_ALLOWED="${E2E_ALLOWED}  allowed flaky: $title ($reason)"$'\n'
    else
      E2E_UNEXCUSED_TITLES="${E2E_UNEXCUSED_TITLES}  flaky and not on the allow-list (a failure): $title"$'\n'
    fi
  done <<< "$titles"
  # Counted from the summary's number, not from the titles found: a title the parser missed
  # is a flaky test nobody excused.
  E2E_UNEXCUSED=$((E2E_FLAKY - excused))
  [ "$E2E_UNEXCUSED" -ge 0 ] || E2E_UNEXCUSED=0
}

# summary_verdict RUST_LOG E2E_LOG ALLOWLIST: prints the summary lines and returns 1 when
# anything counts as a failure (failed tests, flaky tests not allowed, skipped or ignored tests
# unless REPOLL_ALLOW_SKIPS=1, an unreadable summary), else 0. Sets SUMMARY_BAD (the count).
summary_verdict() {
  local rust_log="$1" e2e_log="$2" allowlist="$3" skips skip_note
  rust_summary "$rust_log"
  e2e_summary "$e2e_log" "$allowlist"
  skips=$((RUST_IGNORED + E2E_SKIPPED + E2E_NOT_RUN))
  SUMMARY_BAD=$((RUST_FAILED + E2E_FAILED + E2E_UNEXCUSED + E2E_ERRORS))
  if [ "${REPOLL_ALLOW_SKIPS:-0}" = 1 ]; then
    skip_note="allowed by REPOLL_ALLOW_SKIPS=1"
  else
    skip_note="each a failure; REPOLL_ALLOW_SKIPS=1 allows them"
    SUMMARY_BAD=$((SUMMARY_BAD + skips))
  fi
  [ -z "$RUST_UNREADABLE" ] || { echo "cannot read the Rust tests' summary (a failure): $RUST_UNREADABLE"; SUMMARY_BAD=$((SUMMARY_BAD + 1)); }
  [ -z "$E2E_UNREADABLE" ] || { echo "cannot read Playwright's summary (a failure): $E2E_UNREADABLE"; SUMMARY_BAD=$((SUMMARY_BAD + 1)); }
  printf '%s' "$E2E_UNEXCUSED_TITLES"
  printf '%s' "$E2E_ALLOWED"
  echo "rust: $RUST_PASSED passed, $RUST_FAILED failed, $RUST_IGNORED ignored"
  echo "e2e: $E2E_PASSED passed, $E2E_FLAKY flaky (passed on retry; $E2E_UNEXCUSED not allowed), $E2E_FAILED failed, $E2E_SKIPPED skipped, $E2E_NOT_RUN not run, $E2E_ERRORS errors outside tests"
  echo "skipped or ignored: $skips ($skip_note)"
  [ "$SUMMARY_BAD" -eq 0 ]
}
