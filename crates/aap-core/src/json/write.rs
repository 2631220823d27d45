//! Writing a JSON string, escaped as `serde_json` escapes it.
//!
//! The MCP text block is the payload's JSON text as a string: a quote every
//! few bytes. `serde_json` copies the run before each escape with a call of
//! its own. Here each 16-byte lane of the input is stored whole into the
//! output at once; for each byte in it that needs an escape, the escape is
//! written over that byte's place and the rest of the lane is stored again
//! one place further on. That is one fixed-size store per lane and one per
//! escape, with no call per run (a search's text block: about 380 lanes and
//! 630 quotes for 6 KB). The output room is reserved, not zeroed. The bytes
//! are the same as `serde_json::to_writer(out, s)` writes, so the two stay
//! interchangeable.

use super::scan::special16;
use std::mem::MaybeUninit;

/// Append `s` to `out` as a JSON string (quotes included).
///
/// ```
/// let mut out = Vec::new();
/// aap_core::json::write_str(&mut out, "say \"hi\"\n");
/// assert_eq!(out, serde_json::to_vec("say \"hi\"\n").unwrap());
/// ```
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let src = s.as_bytes();
    out.push(b'"');
    let mut pos = 0;
    while src.len() - pos >= 16 {
        pos = lanes(out, src, pos);
        // Fewer than 16 bytes left, or a byte that takes a `\u00XX` escape.
        match src.get(pos) {
            Some(&b) if pos + 16 <= src.len() => {
                push_escaped(out, b);
                pos += 1;
            }
            _ => break,
        }
    }
    write_tail(out, &src[pos..]);
    out.push(b'"');
}

/// The last bytes (fewer than 16; short strings, such as the access log's,
/// are only this): one look at them padded to a lane, and one copy when
/// none needs an escape.
fn write_tail(out: &mut Vec<u8>, tail: &[u8]) {
    // A space needs no escape, so the padding finds none.
    let mut lane = [b' '; 16];
    if let Some(head) = lane.get_mut(..tail.len()) {
        head.copy_from_slice(tail);
        if special16(&lane) == 0 {
            out.extend_from_slice(tail);
            return;
        }
    }
    for &b in tail {
        push_escaped(out, b);
    }
}

/// The short escape's second byte for each byte (`"` → `"`, `\n` → `n`), 0
/// for a byte written as itself or as `\u00XX`.
const SHORT: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t
};

/// Escape `src[pos..]` into `out` 16 bytes at a time, until fewer than 16
/// are left or a byte needs a `\u00XX` escape; returns where it stopped.
///
/// Each lane is stored whole into the reserved room; then, for each of its
/// special bytes in turn, the escape is written over that byte's place and
/// the 16 input bytes after it are stored again one place further on (each
/// escape shifts the rest of the lane by one). The room is reserved for two
/// output bytes per input byte plus 16, which each lane keeps (it writes at
/// most two per input byte it consumes), and which holds a lane's stores:
/// each ends within `2 * 16 + 16` of the lane's start while at least 16
/// input bytes are left.
fn lanes(out: &mut Vec<u8>, src: &[u8], mut pos: usize) -> usize {
    out.reserve(2 * (src.len() - pos) + 16);
    let spare: &mut [MaybeUninit<u8>] = out.spare_capacity_mut();
    // Output bytes written past the length.
    let mut w = 0;
    'lanes: while let Some(lane) = src.get(pos..).and_then(|rest| rest.first_chunk::<16>()) {
        let Some(dst) = spare.get_mut(w..w + 16) else {
            break; // not reached: the room holds every store
        };
        dst.write_copy_of_slice(lane);
        let mut special = special16(lane);
        // Escapes written in this lane so far (each one byte longer than its input).
        let mut shift = 0;
        while special != 0 {
            let at = special.trailing_zeros() as usize;
            special &= special - 1;
            let escape = SHORT[usize::from(lane[at])];
            let o = w + at + shift;
            let dst = match spare.get_mut(o..o + 2) {
                Some(dst) if escape != 0 => dst,
                // A `\u00XX` escape (six bytes where the room keeps two), or
                // (not reached) no room: the lane's bytes before this one are
                // written, and the caller writes the rest.
                _ => {
                    w = o;
                    pos += at;
                    break 'lanes;
                }
            };
            dst.write_copy_of_slice(&[b'\\', escape]);
            shift += 1;
            let next = pos + at + 1;
            match (src.get(next..next + 16), spare.get_mut(o + 2..o + 2 + 16)) {
                (Some(rest), Some(dst)) => {
                    dst.write_copy_of_slice(rest);
                }
                _ => {
                    // Fewer than 16 input bytes after this one: they are the
                    // tail's to write.
                    w = o + 2;
                    pos = next;
                    break 'lanes;
                }
            }
        }
        w += 16 + shift;
        pos += 16;
    }
    let len = out.len() + w;
    // SAFETY: the `w` bytes after the length were written: a lane's bytes
    // are counted only after the lane was stored (and stored again after each
    // escape in it, one place further on each time), an escape only after it
    // was written, and every store went through a bounds-checked slice of the
    // spare capacity, so they lie within it.
    unsafe { out.set_len(len) };
    pos
}

/// Append one byte, escaped if it needs it (the tail and `\u00XX` escapes),
/// from the same table as the lanes.
#[inline]
fn push_escaped(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match SHORT[usize::from(b)] {
        // The other control characters.
        0 if b < 0x20 => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
        0 => out.push(b),
        c => out.extend_from_slice(&[b'\\', c]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_as_serde(s: &str) {
        let mut ours = b"prefix".to_vec();
        write_str(&mut ours, s);
        let mut theirs = b"prefix".to_vec();
        serde_json::to_writer(&mut theirs, s).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let pieces = [
            "a",
            "\"",
            "\\",
            "\n",
            "\t",
            "\r",
            "\u{8}",
            "\u{c}",
            "\u{1}",
            "\u{1f}",
            "\u{7f}",
            "é",
            "🚗",
            "/",
            "zzzzzzzzzzzzzzzzzzzz",
        ];
        same_as_serde("");
        let mut x: u32 = 11;
        for len in (0..120).chain([200, 511, 1000, 4096]) {
            for _ in 0..10 {
                let mut s = String::new();
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    s.push_str(pieces[x as usize % pieces.len()]);
                }
                same_as_serde(&s);
            }
        }
        // All control characters in a row: the room grows as needed.
        same_as_serde(&"\u{1}".repeat(500));
        // Six-byte escapes in lanes and in the tail, each followed by text
        // that fills the room the invariant keeps (quotes: two bytes each).
        for at in 0..40 {
            for tail in [0, 1, 15, 16, 17, 200] {
                let s = format!("{}\u{1f}{}\u{0}", "a".repeat(at), "\"".repeat(tail));
                same_as_serde(&s);
                same_as_serde(&format!("{s}{s}"));
            }
        }
        let payload = serde_json::json!({"v": [{"a": "x\"y", "b": 1}], "c": "\u{2}"});
        same_as_serde(&payload.to_string());
        same_as_serde(&serde_json::to_string_pretty(&payload).unwrap());
    }
}
