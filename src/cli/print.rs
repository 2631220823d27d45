//! Commands that need no configuration and print a document about the binary: the shell
//! completion script, the manual page, and the JSON Schema of gateway.toml or a tenant file.

use super::args::{Cli, SchemaOf};
use super::print_out;
use std::process::ExitCode;

/// `completions SHELL`.
pub fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut out = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "aap-gateway",
        &mut out,
    );
    print_out(&out)
}

/// `man`: the manual page (roff).
pub fn man() -> ExitCode {
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(<Cli as clap::CommandFactory>::command());
    if let Err(e) = man.render(&mut out) {
        eprintln!("aap-gateway: man: {e}");
        return ExitCode::from(1);
    }
    print_out(&out)
}

/// `schema [config|tenant]`.
pub fn schema(of: SchemaOf) -> ExitCode {
    let schema = match of {
        SchemaOf::Config => crate::config::json_schema(),
        SchemaOf::Tenant => crate::config::tenant_json_schema(),
    };
    let mut out = serde_json::to_vec_pretty(&schema).unwrap_or_default();
    out.push(b'\n');
    print_out(&out)
}
