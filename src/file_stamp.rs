//! What identifies one version of a file on disk (size, modification time, inode), so that
//! watchers (certificates, dealer profiles, feeds) re-read a file only when it changed.

use std::path::Path;
use std::time::SystemTime;

/// One version of a file: size, modification time, inode; `None` when it cannot be read.
pub type Stamp = Option<(u64, SystemTime, u64)>;

/// The stamp of the file at `p` now.
pub fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.len(), m.modified().ok()?, m.ino()))
}
