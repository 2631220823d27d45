//! [`Secret`]: a config value written inline, or read from a file or an environment variable
//! while the config is parsed. `Debug` and every error name the source, never the value.
//!
//! Every `Secret` field accepts three forms:
//!
//! ```toml
//! bearer_token = "inline value"
//! bearer_token = { file = "secrets/upstream.token" }  # relative to the config file's directory
//! bearer_token = { env = "UPSTREAM_TOKEN" }
//! ```
//!
//! Why resolution happens in `Deserialize` (and not in a pass after parsing):
//! every `Secret` wherever it sits (a backend table, a map of header values,
//! fields added later) is read by this one impl, so there is no list of
//! secret fields to keep in step, and a reload, which parses the file again,
//! reads every file and variable again. The one thing the deserializer needs
//! from outside, the config file's directory, is passed through a
//! thread-local set only for the duration of [`with_base_dir`] (the TOML
//! deserializer runs synchronously on the calling thread).

use hmac::{Hmac, Mac};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use sha2::Sha256;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Every error a secret reference raises starts with this, so the TOML
/// error rewriting in `config` can tell it from errors that may quote a value.
pub(crate) const SECRET_ERROR_MARK: &str = "secret ";

/// Where a secret came from (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// Written in the config text.
    Inline,
    /// `{ file = "…" }`: the path as resolved against the config directory.
    File(PathBuf),
    /// `{ env = "…" }`: the variable's name.
    Env(String),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Inline => f.write_str("inline"),
            SecretSource::File(p) => write!(f, "file {}", p.display()),
            SecretSource::Env(v) => write!(f, "environment variable {v}"),
        }
    }
}

/// A secret from the configuration, or from a file or an environment
/// variable it names. `Debug` never prints it; [`Secret::expose`] is the
/// only way to the value.
#[derive(Clone)]
pub struct Secret {
    value: String,
    source: SecretSource,
}

impl Secret {
    /// A secret given in code (treated as inline).
    pub fn new(value: String) -> Secret {
        Secret {
            value,
            source: SecretSource::Inline,
        }
    }

    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Where the value came from (safe to log).
    pub fn source(&self) -> &SecretSource {
        &self.source
    }

    /// A keyed hash of the value under a key drawn once per process: equal
    /// values give equal tags within one process (so a reload can tell a
    /// rotated secret from an unchanged one by comparing `Debug` output), and
    /// the tag says nothing about the value outside it.
    fn tag(&self) -> String {
        static KEY: OnceLock<[u8; 32]> = OnceLock::new();
        let key = KEY.get_or_init(|| {
            let mut k = [0u8; 32];
            k[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            k[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            k
        });
        // `new_from_slice` accepts any key length for HMAC.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            return String::new();
        };
        mac.update(self.value.as_bytes());
        hex::encode(&mac.finalize().into_bytes()[..8])
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret([redacted], {}, #{})", self.source, self.tag())
    }
}

thread_local! {
    static BASE_DIR: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Run `f` (a deserialization) with relative `{ file = … }` secrets resolved
/// against `dir`; restores the previous directory afterwards, also on panic.
pub fn with_base_dir<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<PathBuf>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            BASE_DIR.with(|b| *b.borrow_mut() = old);
        }
    }
    let old = BASE_DIR.with(|b| b.borrow_mut().replace(dir.to_path_buf()));
    let _restore = Restore(old);
    f()
}

fn resolve_path(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    BASE_DIR.with(|b| match &*b.borrow() {
        Some(dir) => dir.join(p),
        None => p.to_path_buf(),
    })
}

/// Drop the line ending(s) an editor, `echo` or a Kubernetes Secret mounted
/// from a file leaves at the end; nothing else is trimmed.
fn trim_line_end(mut s: String) -> String {
    let kept = s.trim_end_matches(['\n', '\r']).len();
    s.truncate(kept);
    s
}

/// Read `{ file = path }`. Errors name the file, never its content.
pub fn read_file(path: &Path) -> Result<Secret, String> {
    let path = resolve_path(path);
    let text = std::fs::read(&path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => e.to_string(),
        };
        format!(
            "{SECRET_ERROR_MARK}file {}: cannot read: {why}",
            path.display()
        )
    })?;
    let text = String::from_utf8(text).map_err(|_| {
        format!(
            "{SECRET_ERROR_MARK}file {}: not valid UTF-8",
            path.display()
        )
    })?;
    let value = trim_line_end(text);
    if value.is_empty() {
        return Err(format!(
            "{SECRET_ERROR_MARK}file {}: is empty",
            path.display()
        ));
    }
    Ok(Secret {
        value,
        source: SecretSource::File(path),
    })
}

/// Read `{ env = name }`. Errors name the variable, never its value.
pub fn read_env(name: &str) -> Result<Secret, String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!(
            "{SECRET_ERROR_MARK}{{ env = {name:?} }}: must be the name of an environment variable"
        ));
    }
    let value = match std::env::var(name) {
        Ok(v) => trim_line_end(v),
        Err(std::env::VarError::NotPresent) => {
            return Err(format!(
                "{SECRET_ERROR_MARK}environment variable {name}: not set"
            ))
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!(
                "{SECRET_ERROR_MARK}environment variable {name}: not valid UTF-8"
            ))
        }
    };
    if value.is_empty() {
        return Err(format!(
            "{SECRET_ERROR_MARK}environment variable {name}: is empty"
        ));
    }
    Ok(Secret {
        value,
        source: SecretSource::Env(name.to_owned()),
    })
}

impl<'de> de::Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        d.deserialize_any(SecretVisitor)
    }
}

/// The three forms a secret may be written in, for the config's JSON Schema.
impl schemars::JsonSchema for Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A secret: the value itself, { file = \"path\" } (relative to the config file's directory) or { env = \"VARIABLE\" }",
            "oneOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {"file": {"type": "string"}},
                    "required": ["file"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {"env": {"type": "string"}},
                    "required": ["env"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

struct SecretVisitor;

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string, { file = \"path\" } or { env = \"VARIABLE\" }")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret::new(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
        Ok(Secret::new(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Secret, A::Error> {
        let mut found: Option<Result<Secret, String>> = None;
        while let Some(k) = map.next_key::<String>()? {
            if found.is_some() {
                return Err(de::Error::custom(format!(
                    "{SECRET_ERROR_MARK}reference: give exactly one of `file` or `env`"
                )));
            }
            found = Some(match k.as_str() {
                "file" => read_file(Path::new(&map.next_value::<String>()?)),
                "env" => read_env(&map.next_value::<String>()?),
                _ => {
                    return Err(de::Error::custom(format!(
                        "{SECRET_ERROR_MARK}reference: unknown key `{k}` (use `file` or `env`)"
                    )))
                }
            });
        }
        match found {
            Some(r) => r.map_err(de::Error::custom),
            None => Err(de::Error::custom(format!(
                "{SECRET_ERROR_MARK}reference: give exactly one of `file` or `env`"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Holder {
        s: Secret,
    }

    fn dir() -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("aapgw-secret-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn parse(text: &str, base: &Path) -> Result<Secret, String> {
        with_base_dir(base, || toml::from_str::<Holder>(text))
            .map(|h| h.s)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn inline_file_and_env_forms() {
        let d = dir();
        assert_eq!(parse("s = \"in-line\"", &d).unwrap().expose(), "in-line");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/tok"), "from-file\r\n\n").unwrap();
        let s = parse("s = { file = \"sub/tok\" }", &d).unwrap();
        assert_eq!(s.expose(), "from-file");
        assert_eq!(s.source(), &SecretSource::File(d.join("sub/tok")));
        // An absolute path ignores the base directory.
        let abs = format!("s = {{ file = {:?} }}", d.join("sub/tok"));
        assert_eq!(
            parse(&abs, Path::new("/elsewhere")).unwrap().expose(),
            "from-file"
        );
        std::env::set_var("AAP_SECRET_TEST_VAR_1", "from-env\n");
        let s = parse("s = { env = \"AAP_SECRET_TEST_VAR_1\" }", &d).unwrap();
        assert_eq!(s.expose(), "from-env");
        assert_eq!(
            s.source(),
            &SecretSource::Env("AAP_SECRET_TEST_VAR_1".into())
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn bad_references_are_clear_errors_without_values() {
        let d = dir();
        let e = parse("s = { file = \"missing.token\" }", &d).unwrap_err();
        assert!(
            e.contains("missing.token") && e.contains("no such file"),
            "{e}"
        );
        std::fs::write(d.join("empty"), "\n").unwrap();
        let e = parse("s = { file = \"empty\" }", &d).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
        let e = parse("s = { env = \"AAP_SECRET_TEST_SURELY_UNSET\" }", &d).unwrap_err();
        assert!(
            e.contains("AAP_SECRET_TEST_SURELY_UNSET") && e.contains("not set"),
            "{e}"
        );
        std::env::set_var("AAP_SECRET_TEST_VAR_2", "v");
        std::fs::write(d.join("f"), "v").unwrap();
        for bad in [
            "s = { file = \"f\", env = \"AAP_SECRET_TEST_VAR_2\" }",
            "s = { }",
            "s = { path = \"f\" }",
            "s = { env = \"\" }",
            "s = 12",
        ] {
            assert!(parse(bad, &d).is_err(), "{bad}");
        }
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn debug_never_shows_the_value_but_tells_values_apart() {
        let d = dir();
        std::fs::write(d.join("tok"), "hunter2-file-secret").unwrap();
        let a = parse("s = { file = \"tok\" }", &d).unwrap();
        let b = parse("s = { file = \"tok\" }", &d).unwrap();
        let debug = format!("{a:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(
            debug.contains("[redacted]") && debug.contains("tok"),
            "{debug}"
        );
        assert_eq!(debug, format!("{b:?}"));
        std::fs::write(d.join("tok"), "rotated-secret").unwrap();
        let c = parse("s = { file = \"tok\" }", &d).unwrap();
        assert_ne!(debug, format!("{c:?}"), "a rotated file reads as a change");
        let inline = format!("{:?}", Secret::new("hunter2".into()));
        assert!(!inline.contains("hunter2"), "{inline}");
        std::fs::remove_dir_all(&d).ok();
    }
}
