#!/usr/bin/env bash
# The OpenAPI document as a client generator sees it (issue 39 row 10): the document the router
# serves at /api/v1/openapi.json is written out by server/tests/openapi_document.rs, validated
# by a maintained validator (openapi-spec-validator, pinned below, in a venv under target/),
# turned into a TypeScript client (openapi-typescript, pinned in end2end/package.json) under
# end2end/generated/, and that client compiled with the program that uses it (tsc, --noEmit:
# end2end/api-client/ and the Playwright spec end2end/tests/api_client.spec.ts, which makes the
# real call against the release build). Run it before `npx playwright test`: the spec imports
# the generated client.
#
#   bash scripts/tests/openapi-check.sh               # the document from the router (cargo test)
#   bash scripts/tests/openapi-check.sh --doc FILE    # a document already written (no build)
#
# Exits non-zero, naming the step, when the document is refused, or the client does not
# generate or compile. Idempotent: the venv and npm packages are installed once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VALIDATOR_VERSION="0.9.0"
WORK="$ROOT/target/openapi-check"
VENV="$WORK/venv"
say() { printf '==> openapi-check: %s\n' "$*" >&2; }
die() { printf 'openapi-check: FAILED: %s\n' "$*" >&2; exit 1; }

doc=""
case "${1:-}" in
  --doc) doc="${2:?--doc needs a file}" ;;
  "") ;;
  *) die "unknown argument $1 (usage: $0 [--doc FILE])" ;;
esac
mkdir -p "$WORK"

# 1. The validator, pinned: a newer release may judge differently, and CI must not change
#    its verdict by itself. Reinstalled only when the venv is missing or holds another version.
if [ "$("$VENV/bin/openapi-spec-validator" --version 2>/dev/null | awk '{print $NF}')" != "$VALIDATOR_VERSION" ]; then
  say "installing openapi-spec-validator $VALIDATOR_VERSION into $VENV"
  command -v python3 >/dev/null || die "python3 not found (needed for openapi-spec-validator)"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "openapi-spec-validator==$VALIDATOR_VERSION" >&2 || die "pip install openapi-spec-validator"
fi

# 2. The document, as the router serves it. The same cargo selection as scripts/test's Rust
#    run (the whole workspace but the wasm crate), so after it this is an up-to-date check.
if [ -z "$doc" ]; then
  doc="$WORK/openapi.json"
  rm -f "$doc"
  say "writing the served document (cargo test --test server_tests openapi_document::)"
  REPOLL_OPENAPI_OUT="$doc" cargo test --workspace --exclude frontend --test server_tests openapi_document:: \
    >"$WORK/cargo-test.log" 2>&1 || {
    cat "$WORK/cargo-test.log" >&2
    [ -f "$doc" ] || die "the test did not write the document (log above)"
    say "the Rust test refused the document (above); the validator's verdict follows"
    "$VENV/bin/openapi-spec-validator" --schema 3.1 "$doc" >&2 || true
    die "server/tests/openapi_document.rs failed"
  }
fi
[ -f "$doc" ] || die "no document at $doc"

# 3. Valid OpenAPI 3.1, the version the document declares.
say "validating $doc as OpenAPI 3.1 (openapi-spec-validator $VALIDATOR_VERSION)"
"$VENV/bin/openapi-spec-validator" --schema 3.1 "$doc" >&2 ||
  die "openapi-spec-validator refused $doc (a validating client generator would too)"

# 4. A client generated from it, and compiled with the code that uses it.
if [ ! -x "$ROOT/end2end/node_modules/.bin/openapi-typescript" ] ||
  ! cmp -s "$ROOT/end2end/node_modules/.repoll-lock-stamp" "$ROOT/end2end/package-lock.json"; then
  say "installing end2end npm packages (npm ci)"
  command -v npm >/dev/null || die "npm not found: install Node.js 20+"
  (cd end2end && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >&2)
  cp end2end/package-lock.json end2end/node_modules/.repoll-lock-stamp
fi
mkdir -p end2end/generated
say "generating the TypeScript client (openapi-typescript) into end2end/generated/api.d.ts"
end2end/node_modules/.bin/openapi-typescript "$doc" -o end2end/generated/api.d.ts >&2 ||
  die "openapi-typescript could not generate a client from $doc"
say "compiling end2end/api-client with the generated client (tsc --noEmit)"
end2end/node_modules/.bin/tsc -p end2end/api-client/tsconfig.json >&2 ||
  die "the generated client does not compile with end2end/api-client and tests/api_client.spec.ts"
say "ok: valid OpenAPI 3.1, client generated and compiled"
echo "openapi-check: ok ($(wc -c <"$doc") bytes, openapi-spec-validator $VALIDATOR_VERSION, openapi-typescript $(end2end/node_modules/.bin/openapi-typescript --version 2>/dev/null | tr -d '\n' || echo '?'))"
