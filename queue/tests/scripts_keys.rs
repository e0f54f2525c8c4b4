//! Every script touches only the keys its header declares (`-- KEYS:`, key_decl.rs), all
//! under the queue's `{name}` hash tag, or (only the scripts whose header says "Undeclared
//! keys") task keys derived from the queue's prefix. Two checks: a static one over the Lua
//! sources (a body reads keys only by name through `K` or `item_keys`, never indexes KEYS, and
//! never builds a key from a string except from PREFIX where declared), and a real one running
//! every operation as a Redis ACL user allowed only `~*{aclq}*`. Rust builds KEYS from the same
//! declaration (library.rs tests check the order it sends).
use crate::common;

use common::*;
use queue::scripts::{FUNCTIONS, PRELUDE_PARTS};
use queue::*;
use std::collections::{HashMap, HashSet};

/// Scripts that derive task keys from the prefix (their headers say which and why).
const UNDECLARED: &[&str] = &[
    "claim",
    "complete",
    "reschedule",
    "fail",
    "stats",
    "purge_ready",
    "fair_sync",
];

/// Commands whose first argument is not a key.
const NO_KEY: &[&str] = &["TIME", "PUBLISH"];

/// Top-level comma split of a call's argument list starting right after '('.
fn call_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for ch in s.chars() {
        if let Some(q) = quote {
            cur.push(ch);
            if ch == q {
                quote = None;
            }
            continue;
        }
        match ch {
            '\'' | '"' => {
                quote = Some(ch);
                cur.push(ch);
            }
            '(' | '{' | '[' => {
                depth += 1;
                cur.push(ch);
            }
            ')' | '}' | ']' if depth == 0 => {
                out.push(cur.trim().to_string());
                return out;
            }
            ')' | '}' | ']' => {
                depth -= 1;
                cur.push(ch);
            }
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
            }
            _ => cur.push(ch),
        }
    }
    out
}

/// Strips `--` comments (scripts have no `--` inside strings).
fn code(src: &str) -> String {
    src.lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// (name, params) of every `local function` in the source.
fn functions(src: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (i, _) in src.match_indices("local function ") {
        let rest = &src[i + "local function ".len()..];
        let Some(open) = rest.find('(') else { continue };
        let name = rest[..open].trim().to_string();
        let close = rest.find(')').unwrap();
        let params = rest[open + 1..close]
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        out.push((name, params));
    }
    out
}

/// All calls `name(args)` in the source.
fn calls(src: &str, name: &str) -> Vec<Vec<String>> {
    let pat = format!("{name}(");
    src.match_indices(&pat)
        .filter(|(i, _)| {
            // whole identifier, and not the definition itself
            let before = src[..*i].chars().last().unwrap_or(' ');
            !(before.is_alphanumeric()
                || before == '_'
                || before == '.'
                || src[..*i].ends_with("function "))
        })
        .map(|(i, _)| call_args(&src[i + pat.len()..]))
        .collect()
}

/// Every function of the library keeps its contract in its header comment: its KEYS, its
/// ARGV and what it returns, before its first line of code.
#[test]
fn every_function_has_a_keys_argv_returns_header() {
    for f in FUNCTIONS {
        let header: String = f
            .source
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        for part in ["-- KEYS:", "ARGV[", "Returns"] {
            assert!(header.contains(part), "{}: header lacks {part}", f.name);
        }
        assert!(!f.keys().fixed.is_empty(), "{}: declares no key", f.name);
    }
}

/// A body never numbers keys: no `KEYS[…]` at all (the library's prologue builds `K` from the
/// header), no `K` of its own, only declared names read from `K`, every declared key used, and
/// a batch function's item keys read through `item_keys` alone.
#[test]
fn bodies_read_keys_by_declared_name_only() {
    for f in FUNCTIONS {
        let body = code(f.source);
        let decl = f.keys();
        assert!(!body.contains("KEYS["), "{}: indexes KEYS by hand", f.name);
        assert!(!body.contains("local K ="), "{}: builds its own K", f.name);
        let declared: HashSet<&str> = decl
            .fixed
            .iter()
            .map(|t| queue::key_decl::KeyDecl::lua_name(t))
            .collect();
        let mut used = HashSet::new();
        for (i, _) in body.match_indices("K.") {
            let before = body[..i].chars().last().unwrap_or(' ');
            if before.is_alphanumeric() || before == '_' {
                continue;
            }
            let name: String = body[i + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                declared.contains(name.as_str()),
                "{}: reads K.{name}, which its header does not declare",
                f.name
            );
            used.insert(name);
        }
        // The claiming functions hand K to the prelude (claim_read, claim_apply), which reads
        // the [claim] group's keys there.
        let hands_k_on = body.contains("(K,") || body.contains("(K)");
        for name in &declared {
            assert!(
                used.contains(*name) || hands_k_on,
                "{}: declares {name} but never reads K.{name}",
                f.name
            );
        }
        assert_eq!(
            body.contains("item_keys(KEYS, ITEM_KEYS, i)"),
            !decl.per_item.is_empty(),
            "{}: per-item keys declared and item_keys() used must go together",
            f.name
        );
    }
}

/// The library is one Lua 5.1 chunk: a function may use at most 60 upvalues, and every
/// top-level local of the prelude parts is one a function body can use. Kept at or under 60
/// names, no body can pass the limit however many helpers it calls (FUNCTION LOAD would fail
/// at connect). Counts the names of the unindented `local` lines.
#[test]
fn the_prelude_declares_at_most_60_top_level_locals() {
    let names: usize = PRELUDE_PARTS
        .iter()
        .flat_map(|(_, src)| src.lines())
        .filter_map(|l| l.strip_prefix("local "))
        .map(|decl| {
            let lhs = decl
                .strip_prefix("function ")
                .map(|f| f.split('(').next().unwrap_or(""))
                .unwrap_or_else(|| decl.split('=').next().unwrap_or(""));
            lhs.split(',').filter(|n| !n.trim().is_empty()).count()
        })
        .sum();
    assert!(names > 40, "the count found the prelude's locals: {names}");
    assert!(
        names <= 60,
        "{names} top-level locals: some function could pass 60 upvalues"
    );
}

/// Which parameter positions of each prelude helper are keys: positions used as a redis.call
/// key or passed on at a key position of another helper (to a fixpoint).
fn prelude_key_positions() -> HashMap<String, HashSet<usize>> {
    let prelude_src: String = PRELUDE_PARTS.iter().map(|(_, p)| *p).collect();
    let prelude = code(&prelude_src);
    let funcs = functions(&prelude);
    // Which parameter positions of each helper are keys: positions used as a redis.call key
    // or passed on at a key position of another helper (to a fixpoint).
    let mut key_pos: HashMap<String, HashSet<usize>> = HashMap::new();
    loop {
        let mut changed = false;
        for (fname, params) in &funcs {
            let start = prelude.find(&format!("local function {fname}(")).unwrap();
            let body_end = prelude[start..]
                .find("\nend")
                .map(|e| start + e)
                .unwrap_or(prelude.len());
            let body = &prelude[start..body_end];
            let mut used: HashSet<String> = HashSet::new();
            for args in calls(body, "redis.call") {
                let cmd = args[0].trim_matches('\'').to_string();
                if !NO_KEY.contains(&cmd.as_str()) && args.len() > 1 {
                    used.insert(args[1].clone());
                }
            }
            for (other, _) in &funcs {
                if let Some(pos) = key_pos.get(other).cloned() {
                    for args in calls(body, other) {
                        for p in &pos {
                            if let Some(a) = args.get(*p) {
                                used.insert(a.clone());
                            }
                        }
                    }
                }
            }
            for (i, p) in params.iter().enumerate() {
                if used.contains(p) && key_pos.entry(fname.clone()).or_default().insert(i) {
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    assert!(
        key_pos.get("hist").is_some_and(|p| p.contains(&0)),
        "{key_pos:?}"
    );
    assert!(
        key_pos.get("to_dead").is_some_and(|p| p.len() == 4),
        "{key_pos:?}"
    );

    key_pos
}

#[test]
fn scripts_name_keys_only_through_keys() {
    let key_pos = prelude_key_positions();
    for f in FUNCTIONS {
        let (name, src) = (&f.name, f.source);
        let body = code(src);
        // identifiers holding keys: exactly `local x = K.name` or `local a, b = item_keys(…)`,
        // never reassigned
        let mut key_vars = HashSet::new();
        for line in body.lines() {
            let l = line.trim();
            if let Some(rest) = l.strip_prefix("local ") {
                if let Some((lhs, rhs)) = rest.split_once('=') {
                    let rhs = rhs.trim();
                    if rhs.starts_with("K.") || rhs.starts_with("item_keys(") {
                        assert!(!rhs.contains(".."), "{name}: key built from a string: {l}");
                        key_vars.extend(lhs.split(',').map(|v| v.trim().to_string()));
                    }
                }
            }
        }
        for v in &key_vars {
            let assigns = body
                .lines()
                .filter(|l| {
                    let t = l.trim().trim_start_matches("local ");
                    t.split_once('=').is_some_and(|(lhs, rhs)| {
                        let rhs = rhs.trim();
                        !lhs.contains(['(', '.', '[', '~', '<', '>'])
                            && lhs.split(',').any(|n| n.trim() == v)
                            && !(rhs.starts_with("K.") || rhs.starts_with("item_keys("))
                    })
                })
                .count();
            assert_eq!(assigns, 0, "{name}: key variable {v} assigned a non-key");
        }
        let undeclared = src.contains("Undeclared keys");
        assert_eq!(
            undeclared,
            UNDECLARED.contains(name),
            "{name}: the list of scripts with undeclared keys changed; review the header"
        );
        let is_key = |a: &str| {
            key_vars.contains(a)
                || (a.starts_with("K.") && !a.contains(' ') && !a.contains(".."))
                || (a.starts_with("ready_list(") && a.ends_with(')'))
                || (undeclared && a.starts_with("PREFIX .. '"))
        };
        let rc = calls(&body, "redis.call");
        assert!(
            // claim_apply and bump (count_answers) make the calls with the keys handed them.
            !rc.is_empty() || src.contains("claim_apply(") || src.contains("bump(K.tp, K.tpmin"),
            "{name}: no redis.call found"
        );
        for args in rc {
            let cmd = &args[0];
            assert!(
                cmd.starts_with('\'') && cmd.ends_with('\''),
                "{name}: command is not a literal: {cmd}"
            );
            let cmd = cmd.trim_matches('\'');
            if NO_KEY.contains(&cmd) {
                continue;
            }
            assert!(
                is_key(&args[1]),
                "{name}: {cmd} on non-KEYS key {:?}",
                args[1]
            );
        }
        for (helper, pos) in &key_pos {
            for args in calls(&body, helper) {
                for p in pos {
                    assert!(
                        is_key(&args[*p]),
                        "{name}: {helper}() gets non-KEYS key {:?}",
                        args[*p]
                    );
                }
            }
        }
        assert!(!body.contains("redis.pcall"), "{name}: pcall not checked");
    }
}

/// The ACL rule the manual (docs/operations.md) gives for a queue's user (the one line with `ACL SETUSER`), its
/// placeholders filled in: the test runs exactly what a reader would.
fn readme_acl_rule(user: &str, password: &str, queue: &str) -> Vec<String> {
    let readme = include_str!("../../docs/operations.md");
    let rules: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.split('`').find(|part| part.starts_with("ACL SETUSER ")))
        .collect();
    assert_eq!(
        rules.len(),
        1,
        "docs/operations.md gives one ACL SETUSER rule: {rules:?}"
    );
    rules[0]
        .split_whitespace()
        .skip(2)
        .map(|w| {
            w.replace("<user>", user)
                .replace("<password>", password)
                .replace("<queue>", queue)
        })
        .collect()
}

async fn acl_queue(name: &str) -> Queue {
    let mut c = raw().await;
    let rule = readme_acl_rule("qonly", "pw", "aclq");
    assert_eq!(rule[0], "qonly");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&rule)
        .query_async(&mut c)
        .await
        .unwrap();
    let url = format!("redis://qonly:pw@127.0.0.1:{}/", server().port);
    Queue::connect(&url, cfg(name))
        .await
        .expect("connect as ACL user")
}

#[tokio::test]
async fn every_operation_runs_under_a_key_restricted_acl_user() {
    let mut conf = cfg("aclq");
    conf.max_lease_losses = 1;
    // Every per-tenant path too: the cap (and its recount at reap) and the rate.
    conf.tenants.concurrency = 5;
    conf.tenants.rate_per_sec = 1000.0;
    conf.tenants.burst = 10;
    let q = acl_queue("aclq").await;
    let q = Queue::with_connection(q.connection(), conf).await.unwrap();
    exercise_every_operation(&q).await;

    // The user loaded the library (at connect) but may not remove functions: neither its own
    // library nor another version's.
    let mut c = q.connection();
    for sub in [
        &["FLUSH"][..],
        &["DELETE", queue::scripts::LIBRARY.name.as_str()][..],
    ] {
        let err = redis::cmd("FUNCTION")
            .arg(sub)
            .query_async::<redis::Value>(&mut c)
            .await
            .unwrap_err();
        assert!(
            format!("{err:?}").contains("NoPerm") || err.to_string().contains("NOPERM"),
            "{err:?}"
        );
    }

    // negative control: the same user may not touch another queue, so the ACL really bites
    // (already when connecting, which records the queue's partition count)
    let err = Queue::with_connection(q.connection(), cfg("otherq"))
        .await
        .unwrap_err();
    assert!(
        format!("{err}").contains("NOPERM") || format!("{err:?}").contains("NoPerm"),
        "{err:?}"
    );
}
