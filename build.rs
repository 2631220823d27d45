//! Build metadata for `--version` and `aap_build_info`: the commit the binary
//! was built from and the build date, both overridable for builds without git.
//!
//! `AAP_BUILD_COMMIT` (e.g. set by an image build from a tarball) wins over
//! `git rev-parse`; `SOURCE_DATE_EPOCH` (reproducible builds) over the clock.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Days since 1970-01-01 as a proleptic Gregorian date (Howard Hinnant's
/// civil-from-days algorithm), so the build script needs no date crate.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn main() {
    println!("cargo:rerun-if-env-changed=AAP_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit or checkout changes HEAD (or the ref it names). Only
    // files that exist are named: cargo treats a missing one as changed on
    // every build, which would rebuild the crate every time.
    let watch = |path: String| {
        if std::path::Path::new(&path).is_file() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        watch(format!("{dir}/HEAD"));
        let head = git(&["symbolic-ref", "-q", "HEAD"]);
        if let Some(head) = &head {
            watch(format!("{dir}/{head}"));
        }
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            watch(format!("{common}/packed-refs"));
            if let Some(head) = &head {
                watch(format!("{common}/{head}"));
            }
        }
    }
    let commit = std::env::var("AAP_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    let (y, m, d) = civil(secs.div_euclid(86_400));
    println!("cargo:rustc-env=AAP_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=AAP_BUILD_DATE={y:04}-{m:02}-{d:02}");
}
