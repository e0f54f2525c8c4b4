//! Every on/off setting of the command line takes the same words — `1`/`0`, `true`/`false`,
//! `yes`/`no`, `on`/`off`, in any case — from its flag, its environment variable and the
//! config file, and any other word stops the start with a message naming the setting and the
//! words. The settings are found in the command line's own definition (every argument whose
//! value is a `bool`, in every subcommand), so a new one cannot be left out.
//!
//! Its own test binary: the first test sets environment variables, which every thread of a
//! test process shares (the other one parses nothing).

use std::path::Path;

use clap::CommandFactory;
use server::{
    cli::Cli,
    config_file,
    settings::{OFF_WORDS, ON_WORDS},
};

/// One on/off setting where a subcommand has it.
#[derive(Debug)]
struct Switch {
    /// The subcommands that lead to it (`["admin", "repartition"]`).
    path: Vec<String>,
    id: String,
    long: String,
    env: String,
}

/// Every `bool` argument under `cmd` (help and version flags are clap's own actions).
fn switches(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<Switch>) {
    for a in cmd.get_arguments() {
        let is_bool = a.get_value_parser().type_id() == std::any::TypeId::of::<bool>();
        let clap_own = matches!(
            a.get_action(),
            clap::ArgAction::Help
                | clap::ArgAction::HelpShort
                | clap::ArgAction::HelpLong
                | clap::ArgAction::Version
        );
        if is_bool && !clap_own {
            out.push(Switch {
                path: path.clone(),
                id: a.get_id().to_string(),
                long: a
                    .get_long()
                    .unwrap_or_else(|| panic!("{path:?} {}: no --flag", a.get_id()))
                    .to_string(),
                env: a
                    .get_env()
                    .unwrap_or_else(|| panic!("{path:?} {}: no environment variable", a.get_id()))
                    .to_string_lossy()
                    .into_owned(),
            });
        }
    }
    for sc in cmd.get_subcommands() {
        path.push(sc.get_name().to_string());
        switches(sc, path, out);
        path.pop();
    }
}

/// `cmd` with nothing required (`admin repartition --to`), so a switch is parsed alone.
fn nothing_required(cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut cmd = cmd.mut_args(|a| a.required(false));
    for name in names {
        cmd = cmd.mut_subcommand(name, nothing_required);
    }
    cmd
}

/// The switch's value after parsing `extra` after its subcommands, with `file` (TOML) as the
/// config file; clap's message when refused.
fn parse(s: &Switch, file: &str, extra: &[&str]) -> Result<bool, String> {
    let cmd = Cli::command();
    let settings = config_file::settings_from_str(&cmd, Path::new("t.toml"), file)
        .map_err(|e| e.to_string())?;
    let cmd = nothing_required(config_file::apply(cmd, &settings));
    let argv = std::iter::once("repoll")
        .chain(s.path.iter().map(String::as_str))
        .chain(extra.iter().copied());
    let m = cmd.try_get_matches_from(argv).map_err(|e| e.to_string())?;
    let mut m = &m;
    for sub in &s.path {
        m = m.subcommand_matches(sub).expect("the subcommand's matches");
    }
    Ok(*m
        .get_one::<bool>(&s.id)
        .expect("a switch always has a value"))
}

/// `word` as written, in capitals and capitalised.
fn spellings(word: &str) -> Vec<String> {
    let mut cap = word.to_string();
    cap[..1].make_ascii_uppercase();
    vec![word.to_string(), word.to_ascii_uppercase(), cap]
}

#[test]
fn every_on_off_setting_takes_every_word_from_flag_variable_and_file() {
    let mut found = Vec::new();
    switches(&Cli::command(), &mut Vec::new(), &mut found);
    let envs: std::collections::BTreeSet<&str> = found.iter().map(|s| s.env.as_str()).collect();
    for known in [
        "REPOLL_SIM",
        "REDIS_CLUSTER",
        "REPOLL_COOKIE_SECURE",
        "REPOLL_TRUST_FORWARDED",
        "REPOLL_TRUST_FORWARDED_FOR",
    ] {
        assert!(envs.contains(known), "{known} not found among {envs:?}");
    }
    for env in &envs {
        std::env::remove_var(env);
    }

    let words = ON_WORDS
        .iter()
        .map(|w| (*w, true))
        .chain(OFF_WORDS.iter().map(|w| (*w, false)));
    let mut checked = 0;
    for s in &found {
        let at = format!("{} {}", s.path.join(" "), s.env);
        // Absent: off; the flag alone: on.
        assert_eq!(parse(s, "", &[]), Ok(false), "{at}");
        assert_eq!(parse(s, "", &[&format!("--{}", s.long)]), Ok(true), "{at}");
        for (word, on) in words.clone() {
            for w in spellings(word) {
                let flag = format!("--{}={w}", s.long);
                assert_eq!(parse(s, "", &[&flag]), Ok(on), "{at} {flag}");
                let file = format!("{} = \"{w}\"\n", s.env);
                assert_eq!(parse(s, &file, &[]), Ok(on), "{at} file: {file}");
                std::env::set_var(&s.env, &w);
                let from_env = parse(s, "", &[]);
                std::env::remove_var(&s.env);
                assert_eq!(from_env, Ok(on), "{at}={w}");
                checked += 3;
            }
        }
        // TOML's own booleans and numbers in the file.
        for (value, on) in [("true", true), ("false", false), ("1", true), ("0", false)] {
            let file = format!("{} = {value}\n", s.env);
            assert_eq!(parse(s, &file, &[]), Ok(on), "{at} file: {file}");
        }
        // Any other word stops the start, naming the setting and the words it takes.
        for refused in ["maybe", "", "2", "enabled"] {
            let flag = format!("--{}={refused}", s.long);
            let file = format!("{} = \"{refused}\"\n", s.env);
            std::env::set_var(&s.env, refused);
            let from_env = parse(s, "", &[]);
            std::env::remove_var(&s.env);
            for (source, outcome) in [
                ("flag", parse(s, "", &[&flag])),
                ("file", parse(s, &file, &[])),
                ("variable", from_env),
            ] {
                let e = outcome.expect_err(&format!("{at} {source} {refused:?}"));
                for needed in [
                    s.env.as_str(),
                    &format!("--{}", s.long),
                    &format!("'{refused}'"),
                ]
                .into_iter()
                .chain(ON_WORDS)
                .chain(OFF_WORDS)
                {
                    assert!(e.contains(needed), "{at} {source}: {needed:?} not in {e}");
                }
            }
        }
    }
    assert!(checked >= 5 * 8 * 3 * 3, "only {checked} words checked");
}

#[test]
fn the_manual_says_which_words_an_on_off_setting_takes() {
    let readme = include_str!("../../docs/configuration.md");
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let list = |words: &[&str]| {
        let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
        let (last, rest) = quoted.split_last().unwrap();
        format!("{} or {last}", rest.join(", "))
    };
    for words in [&ON_WORDS[..], &OFF_WORDS[..]] {
        let said = list(words);
        assert!(
            readme.contains(&said),
            "docs/configuration.md does not say {said}"
        );
    }
}
