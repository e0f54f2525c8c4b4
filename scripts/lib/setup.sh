# Shared set-up for scripts/run and scripts/test: installs what is missing, skips what is
# there (so a second run is quick), and fails loudly with the step that broke.
# Sourced, not executed.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="$HOME/.cargo/bin:$ROOT/end2end/node_modules/.bin:$PATH"
CARGO_LEPTOS_VERSION="0.3.11"

# Each step is stamped with the minutes:seconds since the script started, so a CI log shows
# where the time went.
say() { printf '\033[1m==> [%d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

report_disk() {
  # Free space and the size of target/, so a CI log shows how close a run came to a full disk.
  local free target="-"
  free="$(df -h --output=avail "$ROOT" 2>/dev/null | tail -1 | tr -d ' ')"
  [ -d "$ROOT/target" ] && target="$(du -sh "$ROOT/target" 2>/dev/null | cut -f1)"
  say "disk $1: ${free:-?} free, target/ ${target}"
  local kb
  kb="$(df -k --output=avail "$ROOT" 2>/dev/null | tail -1 | tr -d ' ')"
  if [ -n "$kb" ] && [ "$kb" -lt 8000000 ]; then
    printf 'warning: less than 8 GB free; a full build and test run needs about that much\n' >&2
  fi
}

apt_install() {
  # Installs Debian packages when apt is available and we are root (as on these machines).
  command -v apt-get >/dev/null || die "apt-get not found: install $* with your package manager"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if [ ! -f /tmp/.repoll-apt-updated ]; then
    $sudo apt-get update -qq >&2 && touch /tmp/.repoll-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

ensure_wasm_target() {
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown >&2
  fi
}

ensure_cargo_leptos() {
  if command -v cargo-leptos >/dev/null && cargo-leptos --version 2>/dev/null | grep -q "$CARGO_LEPTOS_VERSION"; then
    return
  fi
  # cargo-leptos 0.3.11 needs a newer rustc than stable here (through a dependency), so it is
  # built with the nightly toolchain when one is installed. LTO off: 20 instead of 45 minutes.
  local toolchain=""
  if rustup toolchain list | grep -q '^nightly'; then toolchain="+nightly"; fi
  say "installing cargo-leptos $CARGO_LEPTOS_VERSION (takes ~20 min once)"
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo $toolchain install cargo-leptos --version "$CARGO_LEPTOS_VERSION" --locked >&2
}

ensure_wasm_bindgen() {
  # The CLI must match the wasm-bindgen library version in Cargo.lock exactly, and
  # cargo-leptos does not check that, so we do.
  local want
  want="$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' "$ROOT/Cargo.lock")"
  [ -n "$want" ] || die "cannot read the wasm-bindgen version from Cargo.lock"
  if command -v wasm-bindgen >/dev/null && [ "$(wasm-bindgen --version | awk '{print $2}')" = "$want" ]; then
    return
  fi
  say "installing wasm-bindgen-cli $want (to match Cargo.lock)"
  # Without --locked: its own lockfile names a crate version the registry no longer serves.
  # Built to be built fast, not to run fast: it runs once per wasm build, for seconds, while its
  # optimised build took 5 min 33 s of a core on a fresh machine (the first page waits for it).
  # Unoptimised: built in 63 s instead of 128 s at opt-level 1 (2 cores, 2026-12-07), and it
  # then takes 2.7 s instead of 0.8 s over our wasm, with byte-identical output.
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=false \
    cargo install wasm-bindgen-cli --version "$want" --force >&2
}

ensure_npm_packages() {
  # end2end/node_modules holds Playwright and wasm-opt (binaryen 132; Debian's older
  # binaryen builds a wasm that fails to hydrate).
  command -v npm >/dev/null || die "npm not found: install Node.js 20+"
  local stamp="$ROOT/end2end/node_modules/.repoll-lock-stamp"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$ROOT/end2end/package-lock.json"; then
    return
  fi
  say "installing end2end npm packages (npm ci)"
  (cd "$ROOT/end2end" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund >&2)
  cp "$ROOT/end2end/package-lock.json" "$stamp"
  wasm-opt --version >/dev/null || die "wasm-opt from the binaryen npm package does not run"
}

ensure_redis_server() {
  if ! command -v redis-server >/dev/null; then
    say "installing redis-server"
    apt_install redis-server
    # Debian starts a service on 6379 after install; repoll never uses it, but leave it be.
  fi
  # redis-cli makes the Redis Cluster of the queue's cluster test (and checks state in the
  # Playwright suite); Debian ships it in redis-tools, which redis-server pulls in.
  command -v redis-cli >/dev/null || apt_install redis-tools
}

ensure_prometheus() {
  # Debian's `prometheus` package has both: promtool (scripts/test checks and unit-tests
  # deploy/prometheus/, and a Rust test pipes a real /metrics page to `promtool check metrics`)
  # and the server (server/tests/prometheus_alerts.rs runs one on a free port). Recommends
  # (node exporter) left out: nothing here uses it.
  if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    say "installing prometheus (server and promtool)"
    apt_install --no-install-recommends prometheus
    # Its postinst enables and starts a `prometheus` service on port 9090 where an init system
    # lets it (not in a container with policy-rc.d). The tests start their own on free ports;
    # a stray one would only scrape and hold 9090, so it is stopped and disabled.
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    if [ -d /run/systemd/system ]; then
      $sudo systemctl disable --now prometheus >&2 || true
    elif [ -x /etc/init.d/prometheus ]; then
      $sudo /etc/init.d/prometheus stop >&2 || true
      command -v update-rc.d >/dev/null && { $sudo update-rc.d prometheus disable >&2 || true; }
    fi
  fi
}

ensure_chromium() {
  if [ ! -x /usr/bin/chromium ]; then
    say "installing Chromium"
    apt_install chromium
  fi
}

build_release() {
  # What `cargo leptos build --release` does for this workspace, with plain cargo, so neither a
  # fresh machine nor CI has to build cargo-leptos first (15 of the 25 minutes to a first page).
  # cargo-leptos stays the tool for the `cargo leptos watch` loop; both read the same settings
  # ([[workspace.metadata.leptos]] in Cargo.toml: site root target/site, pkg dir, output name
  # "repoll", style file, assets dir, the wasm-release profile).
  #
  # The server and the wasm build side by side: they lock different build directories
  # (target/release and target/wasm32-unknown-unknown), and each has long single-threaded
  # stretches (the wasm's one-unit LTO, wasm-opt, the final crates and links) that leave the
  # other core idle when they run one after the other.
  local site="$ROOT/target/site" wasm="$ROOT/target/wasm32-unknown-unknown/wasm-release/frontend.wasm"
  # Extra packages (scripts/test passes `-p chaos`) go into the same cargo command: their
  # shared dependencies (tokio, hyper, reqwest, redis) are then built once, with one feature
  # set, instead of once per command.
  say "building the server (repoll${*:+ $*}, release) beside the browser side (frontend, wasm32)"
  (cd "$ROOT" && cargo build --release -p server --bin repoll "$@" >&2) &
  local server=$!
  if ! build_site "$site" "$wasm"; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    die "building the browser side failed (see above)"
  fi
  say "browser side built; waiting for the server build"
  wait "$server" || die "building the server failed (see above)"
  say "server built"
}

build_site() { # build_site SITE_DIR WASM_FILE: the wasm, its bindings, the optimised module, css, assets
  local site="$1" wasm="$2"
  ensure_wasm_bindgen
  (cd "$ROOT" && cargo build -p frontend --lib --target wasm32-unknown-unknown --profile wasm-release >&2) || return 1
  mkdir -p "$site/pkg"
  # The bindings and the optimised module are made again only when the wasm or a tool changed:
  # wasm-bindgen and wasm-opt -Oz take ~45 s, and a restart of scripts/run should take seconds.
  # (The stamp lives beside the site, not in it: the site is served.)
  local stamp made_from="$site.made-from"
  stamp="$(cksum <"$wasm") $(wasm-bindgen --version) $(wasm-opt --version)"
  if [ -f "$site/pkg/repoll_bg.wasm" ] && [ "$(cat "$made_from" 2>/dev/null)" = "$stamp" ]; then
    cp "$ROOT/style/main.css" "$site/pkg/repoll.css"
    cp -R "$ROOT/public/." "$site/"
    return 0
  fi
  # Bindings into a scratch dir first, so a failed step never leaves a half-written site.
  local tmp
  tmp="$(mktemp -d "$ROOT/target/site-pkg.XXXXXX")"
  chmod 755 "$tmp" # mktemp makes it private; the site is served to anyone
  wasm-bindgen "$wasm" --target web --no-typescript --out-dir "$tmp" --out-name repoll >&2 || return 1
  # -Oz as cargo-leptos does for release; the features are those rustc enables for
  # wasm32-unknown-unknown by default, which wasm-opt must be told to accept.
  wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-reference-types --enable-multivalue \
    "$tmp/repoll_bg.wasm" -o "$tmp/repoll_bg.wasm" >&2 || return 1
  cp "$ROOT/style/main.css" "$tmp/repoll.css"
  rm -rf "$site/pkg" && mv "$tmp" "$site/pkg"
  printf '%s' "$stamp" >"$made_from"
  cp -R "$ROOT/public/." "$site/"
}

lint_while_building() {
  # Clippy as the compiler of our own crates (cargo's RUSTC_WORKSPACE_WRAPPER, what `cargo
  # clippy` itself sets) for every cargo command that follows, with warnings denied: the test
  # build and the release build (server and wasm) lint while they compile, and a warning fails
  # them as `cargo clippy -- -D warnings` would. Dependencies are compiled as before (cargo
  # applies the wrapper to workspace members only). CLIPPY_ARGS is how cargo-clippy hands the
  # lint flags to clippy-driver; a probe with a known lint proves the wiring before it is
  # trusted, so a clippy that stopped reading it fails the run instead of passing every lint.
  local driver probe
  driver="$(command -v clippy-driver)" || die "clippy-driver not found (rustup component add clippy)"
  export RUSTC_WORKSPACE_WRAPPER="$driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  probe="$(mktemp -d)"
  printf 'pub fn probe() -> u32 { let x: u32 = 1; x.clone() }\n' >"$probe/probe.rs"
  if "$driver" "$(rustup which rustc)" --crate-type lib --edition 2021 --crate-name probe \
    "$probe/probe.rs" --out-dir "$probe" >"$probe/out" 2>&1; then
    rm -rf "$probe"
    die "clippy-driver passed a clone of a Copy value with warnings denied: CLIPPY_ARGS is not read"
  fi
  grep -q 'clone_on_copy\|implements the `Copy` trait' "$probe/out" \
    || { cat "$probe/out" >&2; rm -rf "$probe"; die "clippy-driver failed the probe for another reason (above)"; }
  rm -rf "$probe"
  say "clippy lints our crates as they build (warnings denied; probe refused as it should)"
}

ensure_mold() {
  # .cargo/config.toml links x86_64 code with mold (-fuse-ld=mold): no build works without it.
  if ! command -v mold >/dev/null; then
    say "installing mold (the linker .cargo/config.toml names)"
    apt_install mold
  fi
}

# Every script that sources this file builds or runs what cargo built: the linker comes first.
ensure_mold
