//! Command-line clients of a running gateway (subcommands that talk to its admin listener);
//! `main` parses the command line and dispatches here.

pub mod admin;
