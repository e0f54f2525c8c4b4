//! The Lua library. Redis Functions (Redis 7.0+): one library, loaded once per primary at
//! connect (`library.rs`), whose functions every call names with FCALL / FCALL_RO. Unlike
//! EVALSHA of "prelude + script", a call no longer re-runs the prelude's top level (≈ 35
//! closures built per call): the helpers are built once when the library loads.
//!
//! The source is the files under `queue/lua/` compiled in with `include_str!`: the shared
//! helpers by concern ([`PRELUDE_PARTS`]: `prelude.lua`, then `prelude/*.lua`), then every
//! function's body ([`FUNCTIONS`]), each wrapped as `function(KEYS, ARGV) ... end` with its
//! declared keys put in front (`K`, key_decl.rs). Every body keeps its KEYS/ARGV/returns
//! contract in its header comment.
//!
//! The library is named `repoll_<hash8>` (hash8: the SHA-1 of its source) and its functions
//! `repoll_<hash8>_<name>`: two builds of repoll run side by side during a rolling upgrade,
//! each calling its own code. Functions declare their keys like scripts, so Redis Cluster
//! refuses a call whose keys span two slots; the read-only ones carry the `no-writes` flag,
//! so Redis refuses them any write and lets them run on replicas (called with FCALL_RO).

use crate::key_decl::KeyDecl;
use std::collections::HashMap;
use std::sync::LazyLock;

/// One function of the library.
#[derive(Clone, Copy, Debug)]
pub struct FunctionDef {
    /// Short name (`claim`); Redis knows it as `repoll_<hash8>_claim`.
    pub name: &'static str,
    /// Its Lua body (header comment included), from `queue/lua/<name>.lua`.
    pub source: &'static str,
    /// Only reads: `no-writes` flag, called with FCALL_RO.
    pub read_only: bool,
    /// Takes the six common ARGV of the prelude (all but `login_attempt`).
    pub common_argv: bool,
}

impl FunctionDef {
    /// The keys its header declares ([`crate::key_decl`]), parsed once per process.
    pub fn keys(&self) -> &'static KeyDecl {
        &KEY_DECLS[self.name]
    }
}

static KEY_DECLS: LazyLock<HashMap<&'static str, KeyDecl>> = LazyLock::new(|| {
    FUNCTIONS
        .iter()
        .map(|f| {
            // The headers are compiled in, and every test that loads the library parses them
            // all: a malformed one fails the tests, never a running process.
            let decl = crate::key_decl::parse(f.source, PRELUDE_PARTS)
                .unwrap_or_else(|e| panic!("{}.lua header: {e}", f.name));
            (f.name, decl)
        })
        .collect()
});

/// The shared helpers, by concern, in load order (a file uses only helpers defined above it).
pub const PRELUDE_PARTS: &[(&str, &str)] = &[
    ("prelude", include_str!("../lua/prelude.lua")),
    ("history", include_str!("../lua/prelude/history.lua")),
    ("counters", include_str!("../lua/prelude/counters.lua")),
    ("records", include_str!("../lua/prelude/records.lua")),
    ("fair", include_str!("../lua/prelude/fair.lua")),
    ("breaker", include_str!("../lua/prelude/breaker.lua")),
    ("claims", include_str!("../lua/prelude/claims.lua")),
];

/// One list of every function: builds [`FUNCTIONS`] (loading, the key tests, docs) and
/// [`SCRIPTS`] (the call sites' handles), so the two cannot drift apart.
macro_rules! functions {
    ($($name:ident: read_only = $ro:expr, common_argv = $common:expr;)*) => {
        #[allow(non_upper_case_globals)]
        mod defs {
            use super::FunctionDef;
            $(pub const $name: FunctionDef = FunctionDef {
                name: stringify!($name),
                source: include_str!(concat!("../lua/", stringify!($name), ".lua")),
                read_only: $ro,
                common_argv: $common,
            };)*
        }

        /// Every function of the library: (name, source, read-only, common ARGV).
        pub const FUNCTIONS: &[FunctionDef] = &[$(defs::$name),*];

        /// A handle per function, for call sites (`self.invocation(&SCRIPTS.claim)`).
        pub(crate) struct Scripts {
            $(pub $name: FunctionDef,)*
        }

        pub(crate) static SCRIPTS: Scripts = Scripts { $($name: defs::$name,)* };
    };
}

functions! {
    enqueue: read_only = false, common_argv = true;
    count_answers: read_only = false, common_argv = true;
    claim: read_only = false, common_argv = true;
    renew: read_only = false, common_argv = true;
    complete: read_only = false, common_argv = true;
    reschedule: read_only = false, common_argv = true;
    fail: read_only = false, common_argv = true;
    release: read_only = false, common_argv = true;
    peek_expired: read_only = true, common_argv = true;
    reap: read_only = false, common_argv = true;
    retry: read_only = false, common_argv = true;
    cancel: read_only = false, common_argv = true;
    cancel_take: read_only = false, common_argv = true;
    cancel_settle: read_only = false, common_argv = true;
    pause: read_only = false, common_argv = true;
    purge: read_only = false, common_argv = true;
    purge_ready: read_only = false, common_argv = true;
    stats: read_only = true, common_argv = true;
    list: read_only = true, common_argv = true;
    heartbeat: read_only = false, common_argv = true;
    worker_command: read_only = false, common_argv = true;
    upstream_rate: read_only = false, common_argv = true;
    migrate: read_only = false, common_argv = true;
    callback: read_only = false, common_argv = true;
    breaker: read_only = false, common_argv = true;
    fair_sync: read_only = false, common_argv = true;
    login_attempt: read_only = false, common_argv = false;
}

/// The library as Redis loads it.
pub struct Library {
    /// `repoll_<hash8>`.
    pub name: String,
    /// The `FUNCTION LOAD` payload (starts with `#!lua name=<name>`).
    pub source: String,
}

impl Library {
    /// The name Redis knows `f` by in this library.
    pub fn function_name(&self, f: &FunctionDef) -> String {
        format!("{}_{}", self.name, f.name)
    }
}

/// The library text under a given name. The name is a parameter because it depends on the
/// text's own hash: hashed once with a placeholder, then built with the real name.
fn library_source(name: &str) -> String {
    let mut src = format!("#!lua name={name}\n");
    for (_, part) in PRELUDE_PARTS {
        src.push_str(part);
        src.push('\n');
    }
    for f in FUNCTIONS {
        // Validate the common ARGV before the body runs (and before it writes anything).
        let check = if f.common_argv {
            "local bad_common = read_common(ARGV)\nif bad_common then return bad_common end\n"
        } else {
            ""
        };
        let flags = if f.read_only { "{ 'no-writes' }" } else { "{}" };
        // Then the declared keys by name (key_decl.rs): bodies never index KEYS themselves.
        let keys = crate::key_decl::prologue(f.name, f.keys());
        src.push_str(&format!(
            "redis.register_function{{ function_name = '{name}_{}', flags = {flags},\n\
             callback = function(KEYS, ARGV)\n{check}{keys}{}\nend }}\n",
            f.name, f.source
        ));
    }
    src
}

/// Built once per process.
pub static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    // `Script::new` hashes its code with SHA-1: the same digest Redis would give it.
    let digest = redis::Script::new(&library_source("repoll"))
        .get_hash()
        .to_owned();
    let name = format!("repoll_{}", &digest[..8]);
    Library {
        source: library_source(&name),
        name,
    }
});
