//! Secrets never printed: the API key and header values stay out of `--help` and `Debug` even
//! when they are set in the environment. A test binary of its own, since it sets variables
//! of the process.

use clap::{CommandFactory, Parser};
use worker::UpstreamArgs;

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    upstream: UpstreamArgs,
}

const KEY: &str = "sk_live_s3cret-api-key";
const TOKEN: &str = "t0ken-in-a-header";
const URL_TOKEN: &str = "t0ken-in-the-url";

#[test]
fn help_and_debug_never_show_the_api_key_or_header_values() {
    // The only test of this binary: nothing else reads the environment meanwhile.
    std::env::set_var("REPOLL_UPSTREAM_API_KEY", KEY);
    std::env::set_var(
        "REPOLL_UPSTREAM_HEADERS",
        format!("Authorization: Bearer {TOKEN};X-Trace: 1"),
    );
    std::env::set_var(
        "REPOLL_UPSTREAM_URL",
        format!("https://api.example.com/v2/{{key}}?token={URL_TOKEN}"),
    );

    let mut cmd = Cli::command();
    // `repoll --config file.toml` turns the file's settings into defaults: hidden too.
    let mut from_file = Cli::command()
        .mut_arg("headers", |a| {
            a.default_values([format!("Authorization: Bearer {TOKEN}")])
        })
        .mut_arg("url", |a| {
            a.default_value(format!("https://h/{{key}}?token={URL_TOKEN}"))
        });
    for help in [
        cmd.render_help().to_string(),
        cmd.render_long_help().to_string(),
        from_file.render_long_help().to_string(),
    ] {
        assert!(help.contains("REPOLL_UPSTREAM_HEADERS"), "{help}");
        assert!(!help.contains(KEY), "{help}");
        assert!(!help.contains(TOKEN), "{help}");
        assert!(!help.contains(URL_TOKEN), "{help}");
    }

    // The environment is read all the same.
    let cli = Cli::try_parse_from(["repoll"]).expect("parse");
    assert_eq!(cli.upstream.api_key.as_ref().map(|k| k.expose()), Some(KEY));
    assert_eq!(cli.upstream.headers.len(), 2);
    let shown = format!("{cli:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(!shown.contains(&format!("Bearer {TOKEN}")), "{shown}");
    assert!(shown.contains("Authorization"), "{shown}");

    // Nor does a configuration error quote a header line.
    let err = worker::Upstream::new(&UpstreamArgs {
        headers: vec![format!("Bearer {TOKEN}")],
        ..UpstreamArgs::default()
    })
    .expect_err("no colon");
    assert!(!err.to_string().contains(TOKEN), "{err}");
    let err = worker::Upstream::new(&UpstreamArgs {
        headers: vec![format!("Bearer {TOKEN}: x")],
        ..UpstreamArgs::default()
    })
    .expect_err("bad name");
    assert!(!err.to_string().contains(TOKEN), "{err}");
}
