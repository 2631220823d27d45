//! The config's JSON Schema as editors get it: the shipped docs/*.schema.json are exactly what
//! `aap-gateway schema` prints, and every shipped config validates while a typo or a wrong type does not.

use crate::support::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `aap-gateway schema <of>` prints (`schema` alone when `of` is empty).
fn generated(of: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("schema")
        .args(Some(of).filter(|o| !o.is_empty()))
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn shipped(name: &str) -> String {
    std::fs::read_to_string(repo().join("docs").join(name)).unwrap_or_default()
}

fn validator(schema_text: &str) -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(schema_text).expect("the schema is JSON");
    aap_gateway::aap::schemas::compile(&schema).expect("the schema compiles")
}

/// The problems `validator` finds in a TOML text (parsed to JSON as an editor does).
fn problems(validator: &jsonschema::Validator, toml_text: &str) -> Vec<String> {
    let parsed: toml::Value = toml::from_str(toml_text).expect("valid TOML");
    let instance = serde_json::to_value(parsed).expect("TOML as JSON");
    validator
        .iter_errors(&instance)
        .map(|e| e.to_string())
        .collect()
}

/// The TOML of a Kubernetes ConfigMap's `gateway.toml: |` block.
fn configmap_toml(yaml: &str) -> String {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "gateway.toml: |");
    lines.next();
    let block: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    block
        .iter()
        .map(|l| l.get(4..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn toml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            toml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "toml") {
            out.push(p);
        }
    }
}

#[test]
fn the_shipped_schemas_are_what_the_binary_generates() {
    for (of, file) in [
        ("config", "gateway.schema.json"),
        ("tenant", "tenant.schema.json"),
    ] {
        let now = generated(of);
        assert!(
            now == shipped(file),
            "docs/{file} is stale: regenerate it with `aap-gateway schema {of} > docs/{file}`"
        );
        let v: Value = serde_json::from_str(&now).unwrap();
        assert_eq!(
            v["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{of}"
        );
        assert!(v["title"]
            .as_str()
            .is_some_and(|t| t.contains("aap-gateway")));
    }
    // `config` is the default, and descriptions come from the config types' documentation.
    assert_eq!(generated(""), generated("config"));
    let v: Value = serde_json::from_str(&shipped("gateway.schema.json")).unwrap();
    assert_eq!(
        v["additionalProperties"], false,
        "unknown top-level keys are refused"
    );
    assert!(v["required"]
        .as_array()
        .is_some_and(|r| r.contains(&Value::from("server"))));
}

#[test]
fn every_shipped_config_validates_against_the_schema() {
    let config = validator(&shipped("gateway.schema.json"));
    let mut files = vec![repo().join("gateway.toml")];
    toml_files(&repo().join("examples"), &mut files);
    assert!(files.len() >= 6, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let found = problems(&config, &text);
        assert!(found.is_empty(), "{}: {found:?}", f.display());
    }
    // The Kubernetes ConfigMap's gateway.toml.
    let yaml = std::fs::read_to_string(repo().join("ops/k8s/configmap.yaml")).unwrap();
    let k8s = configmap_toml(&yaml);
    assert!(k8s.contains("[server]"), "{k8s}");
    let found = problems(&config, &k8s);
    assert!(found.is_empty(), "ops/k8s/configmap.yaml: {found:?}");
    // The configs the integration tests run on, and a tenant file of tenants_dir.
    for text in [
        config_with("", "", ""),
        forwarding_config("kind = \"mcp\"\npeers = [\"http://127.0.0.1:9\"]\nbearer_token = { env = \"UPSTREAM_TOKEN\" }"),
        config_with_tenants_dir(Path::new("/srv/tenants")),
    ] {
        let found = problems(&config, &text);
        assert!(found.is_empty(), "{text}\n{found:?}");
    }
    let tenant = validator(&shipped("tenant.schema.json"));
    let found = problems(&tenant, &tenant_file("demo-honda", "", ""));
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn a_typo_a_wrong_type_or_a_bad_secret_fails_validation_as_it_fails_check() {
    let config = validator(&shipped("gateway.schema.json"));
    let base = config_with("", "", "");
    let dir = temp_dir("schema-bad");
    let check = |i: usize, text: &str| {
        let file = dir.join(format!("config-{i}.toml"));
        std::fs::write(&file, text).unwrap();
        Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .arg("--config")
            .arg(&file)
            .arg("check")
            .env("AAP_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap()
    };
    let control = check(99, &base);
    assert!(
        control.status.success(),
        "{}",
        String::from_utf8_lossy(&control.stderr)
    );
    let cases = [
        // A typo'd key (every config table refuses unknown keys).
        ("[server]\n", "[server]\nlisen = \"127.0.0.1:1\"\n"),
        // A wrong type.
        ("threads = 2\n", "threads = \"two\"\n"),
        // A secret in none of its three forms.
        (
            "[server]\n",
            "[server]\nadmin_token = { fil = \"token.txt\" }\n",
        ),
        // An unknown backend kind.
        ("kind = \"embedded\"", "kind = \"embeded\""),
    ];
    for (i, (from, to)) in cases.iter().enumerate() {
        assert!(base.contains(from), "{from}");
        let text = base.replacen(from, to, 1);
        let found = problems(&config, &text);
        assert!(!found.is_empty(), "case {i} passes the schema: {to}");
        // `check` refuses it too: the schema is no looser than the gateway here.
        assert!(
            !check(i, &text).status.success(),
            "case {i} passes check: {to}"
        );
    }
    // A typo in a tenant file.
    let tenant = validator(&shipped("tenant.schema.json"));
    let found = problems(
        &tenant,
        &tenant_file("demo-honda", "skils = [\"inventory.search\"]", ""),
    );
    assert!(!found.is_empty());
}
