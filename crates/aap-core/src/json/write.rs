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
    loop {
        pos = lanes(out, src, pos);
        // Fewer than 32 bytes left, or a byte that takes a `\u00XX` escape.
        match src.get(pos) {
            Some(&b) if src.len() - pos >= 32 => {
                push_escaped(out, b);
                pos += 1;
            }
            _ => break,
        }
    }
    for tail in src.get(pos..).unwrap_or_default().chunks(16) {
        write_tail(out, tail);
    }
    out.push(b'"');
}

/// The last bytes (at most 16; short strings, such as the access log's,
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

/// Escape `src[pos..]` into `out` 16 bytes at a time, until fewer than 32
/// are left or a byte needs a `\u00XX` escape; returns where it stopped.
/// (Stopping 32 bytes short means the 16 bytes after any escape in a lane
/// are input, with no check per escape.)
///
/// Each lane is stored whole into the reserved room; then, for each of its
/// special bytes in turn, the escape is written over that byte's place and
/// the 16 input bytes after it are stored again one place further on (each
/// escape shifts the rest of the lane by one).
///
/// Room: `2 * (src.len() - pos) + 16` bytes are reserved at the start. With
/// `c` input bytes consumed, at most `2c` output bytes are written (each
/// input byte becomes one or two), and every store starts at most `2c`
/// bytes in and is 16 bytes long while at least 16 input bytes are left,
/// so it ends within `2c + 16 <= 2 * (src.len() - pos)`: inside the room.
///
/// The stores go through raw pointers: with bounds-checked slices this loop
/// took about 33 instructions per escape and 25 per lane (a search's text
/// block: 630 escapes, 380 lanes, ~34,000 instructions); the checks could
/// not fail (the room above) and were most of that.
fn lanes(out: &mut Vec<u8>, src: &[u8], mut pos: usize) -> usize {
    let n = src.len();
    out.reserve(2 * (n - pos) + 16);
    let room = out.capacity() - out.len();
    let start = pos;
    // Output bytes written past the length.
    let mut w = 0;
    let s = src.as_ptr();
    // SAFETY: `d` points at the spare capacity, `room` bytes long; every
    // store below ends at most `2 * (consumed) + 16 <= room` bytes in, as
    // the comment above shows (checked by the `debug_assert`s); every load
    // reads 16 bytes at an input offset `i` with `i + 16 <= n`: a lane at
    // `pos` with `pos + 32 <= n`, and the bytes after an escape in it at
    // `next <= pos + 16`.
    unsafe {
        let d = out.as_mut_ptr().add(out.len());
        'lanes: while pos + 32 <= n {
            debug_assert!(w + 16 <= room);
            let lane = &*s.add(pos).cast::<[u8; 16]>();
            std::ptr::copy_nonoverlapping(s.add(pos), d.add(w), 16);
            let mut special = special16(lane);
            // Escapes written in this lane so far (each one byte longer than its input).
            let mut shift = 0;
            while special != 0 {
                let at = special.trailing_zeros() as usize;
                let escape = SHORT[usize::from(lane[at])];
                let o = w + at + shift;
                if escape == 0 {
                    // A `\u00XX` escape (six bytes where the room keeps two):
                    // the lane's bytes before this one are written, and the
                    // caller writes the rest.
                    w = o;
                    pos += at;
                    break 'lanes;
                }
                debug_assert!(o + 2 <= room);
                d.add(o).write(b'\\');
                d.add(o + 1).write(escape);
                shift += 1;
                let next = pos + at + 1;
                debug_assert!(o + 2 + 16 <= room && o + 2 <= 2 * (next - start));
                std::ptr::copy_nonoverlapping(s.add(next), d.add(o + 2), 16);
                special &= special - 1;
            }
            w += 16 + shift;
            pos += 16;
        }
        // SAFETY: the `w` bytes after the length were written: a lane's
        // bytes are counted only after the lane was stored (and stored again
        // after each escape in it, one place further on each time), an
        // escape only after it was written.
        out.set_len(out.len() + w);
    }
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
