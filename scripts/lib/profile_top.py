#!/usr/bin/env python3
"""Summarises a CPU profile of `repoll serve` (scripts/bench-reads with READS_PROFILE=1).

Input: folded stacks (`inferno-collapse-perf` of `perf script`), one line per distinct stack:
`frame;frame;...;leaf WEIGHT`, the root first; perf's cpu-clock samples weigh their period, so
a weight is nanoseconds of CPU. Output, as Markdown for docs/benchmarks.md:

- where the CPU went by concern: each sample counted once, for the innermost frame of its
  stack (nearest the leaf) that names a concern, so a malloc or a socket write is charged to
  the code that asked for it (JSON, the Redis client, hyper) and the rows add up to 100 %;
- the 25 functions with the most samples of their own (self time), and by library.

The concerns are read off function names (the release binary keeps its symbol table; perf
unwinds with .eh_frame, so no debug info is needed, but inlined functions show as their
caller). Where one frame matches two concerns, the first in the table wins.
"""

import re
import sys
from collections import Counter

# Where one frame matches two, the first wins. The last two take what no frame of ours named.
# A crate's frames: its path at the start of a symbol or of a type in it (`<hyper::...`), never
# a module of the same name inside another crate (tokio's `scheduler::multi_thread::worker`).
def crates(*names: str) -> str:
    return r"(?:^|[<&(, ])(?:" + "|".join(names) + r")::"


# Where one frame matches two, the first wins. The last two take what no frame of ours named.
CONCERNS = [
    ("tracing and the OTLP export", crates("opentelemetry", "opentelemetry_sdk", "opentelemetry_otlp", "tracing_opentelemetry", "tracing_subscriber", "tracing_core")),
    ("metrics (the answers counter, Prometheus)", crates("metrics", "metrics_exporter_prometheus", "metrics_util")),
    ("the query's normalisation", r"normalise_query|" + crates("unicode_normalization", "icu_normalizer", "icu_properties", "icu_collections", "unicode_segmentation")),
    ("JSON: request parse and answer encoding", crates("serde_json", "serde_core", "serde") + r"|Json<"),
    ("Redis client: FCALL build, send, reply parse", crates("redis", "combine") + r"|queue::library|queue::slot|queue::conn"),
    ("queue: enqueue's Rust side (ids, keys, decode)", crates("queue", "model")),
    ("the embedded workers and simulator", crates("worker", "sim", "reqwest")),
    ("the answer (app crate: view, freshness)", crates("app")),
    ("repoll's HTTP layers (server crate: middleware, handler)", crates("server")),
    ("axum routing and middleware (axum, tower, tower_http)", crates("axum", "axum_core", "tower", "tower_http", "matchit")),
    ("HTTP/1 (hyper: parse, write, connection)", crates("hyper", "hyper_util", "http", "httparse", "http_body", "http_body_util")),
    ("socket reads and writes (the kernel's TCP, for hyper and Redis alike)", r"mio::net::|tokio::net::"),
    ("tokio runtime (scheduler, timers, I/O driver, parking)", crates("tokio", "mio")),
    ("kernel outside the above (scheduling, interrupts)", r"_\[k\]$"),
    ("allocator outside the above", r"malloc|_int_free|cfree|realloc|unlink_chunk|malloc_consolidate|tcache"),
]


def library(frame: str) -> str:
    """The crate (or library) a frame belongs to: the first path segment of a Rust symbol."""
    frame = frame.strip()
    if frame.endswith("_[k]") or frame.startswith("[k]"):
        return "kernel"
    m = re.match(r"^<?(?:&(?:mut )?)?(?:dyn )?([A-Za-z_][A-Za-z0-9_]*)::", frame)
    if m:
        return m.group(1)
    if re.search(r"malloc|free|realloc|memmove|memcpy|memset|memcmp|pthread|__GI_|libc", frame):
        return "libc"
    return "other (" + frame[:40] + ")"


def concern_of(frames, ours, catch_all) -> str:
    """The concern of the innermost frame that names one; else what the leaf is."""
    for frame in reversed(frames):
        for name, rx in ours:
            if rx.search(frame):
                return name
    for name, rx in catch_all:
        if rx.search(frames[-1]):
            return name
    return "other"


def main() -> None:
    path = sys.argv[1]
    stacks = []
    total = 0
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        frames = stack.split(";")
        stacks.append((frames, n))
        total += n
    if total == 0:
        sys.exit("no samples in " + path)

    compiled = [(name, re.compile(p)) for name, p in CONCERNS]
    by_concern = Counter()
    ours, catch_all = compiled[:-2], compiled[-2:]
    for frames, n in stacks:
        by_concern[concern_of(frames, ours, catch_all)] += n

    self_time = Counter()
    by_library = Counter()
    for frames, n in stacks:
        leaf = frames[-1]
        self_time[leaf] += n
        by_library[library(leaf)] += n

    pct = lambda n: f"{100.0 * n / total:.1f} %"
    print(f"{total / 1e9:.2f} s of CPU sampled\n")
    print("| concern (innermost frame naming one) | share |")
    print("|---|---|")
    for name, _ in CONCERNS + [("other", None)]:
        if by_concern[name]:
            print(f"| {name} | {pct(by_concern[name])} |")
    print("\n| function (self time) | share |")
    print("|---|---|")
    for leaf, n in self_time.most_common(25):
        shown = leaf if len(leaf) <= 110 else leaf[:107] + "..."
        print(f"| `{shown}` | {pct(n)} |")
    print("\n| library (self time) | share |")
    print("|---|---|")
    for lib, n in by_library.most_common(15):
        print(f"| {lib} | {pct(n)} |")


if __name__ == "__main__":
    main()
