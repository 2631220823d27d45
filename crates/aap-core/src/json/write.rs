//! Writing a JSON string, escaped as `serde_json` escapes it.
//!
//! The MCP text block is the payload's JSON text as a string: a quote every
//! few bytes. `serde_json` copies the run before each escape with a call of
//! its own. Here each lane of the input (32 bytes where the CPU has AVX2,
//! detected at run time; else 16) is stored whole into the output at once;
//! for each byte in it that needs an escape, the escape is written over that
//! byte's place and the rest of the lane is stored again one place further
//! on. That is one fixed-size store per lane and one per escape, with no
//! call per run (a search's text block: 630 quotes in 6 KB; about 190 lanes
//! of 32, and ~16,000 instructions in all, against ~21,400 with 380 lanes of
//! 16). The output room is reserved, not zeroed. The bytes are the same as
//! `serde_json::to_writer(out, s)` writes, so the two stay interchangeable.

use super::scan::special16;
#[cfg(target_arch = "x86_64")]
use super::scan::special32;

/// Append `s` to `out` as a JSON string (quotes included).
///
/// ```
/// let mut out = Vec::new();
/// aap_core::json::write_str(&mut out, "say \"hi\"\n");
/// assert_eq!(out, serde_json::to_vec("say \"hi\"\n").unwrap());
/// ```
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    write_with(out, s, lanes);
}

/// [`write_str`] with the lane loop given (the tests run the 16-byte one
/// alone on a CPU that would take 32-byte lanes).
#[inline(always)]
fn write_with(out: &mut Vec<u8>, s: &str, lanes: impl Fn(&mut Vec<u8>, &[u8], usize) -> usize) {
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

/// Escape `src[pos..]` into `out` a lane at a time, until fewer than two
/// lanes are left or a byte needs a `\u00XX` escape; returns where it
/// stopped. Lanes of 32 bytes where the CPU has AVX2 (detected at run time),
/// then of 16 (SSE2, the x86_64 baseline) for what is left.
fn lanes(out: &mut Vec<u8>, src: &[u8], mut pos: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was just detected on this CPU, all `lanes_avx2` needs.
        pos = unsafe { lanes_avx2(out, src, pos) };
    }
    lanes_with::<16>(out, src, pos, |lane| u64::from(special16(lane)))
}

/// [`lanes_with`] over 32-byte lanes: half the lanes of the 16-byte loop,
/// whose per-lane mask and store were about 21 instructions (a search's
/// text block: ~380 lanes of 16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lanes_avx2(out: &mut Vec<u8>, src: &[u8], pos: usize) -> usize {
    lanes_with::<32>(out, src, pos, |lane| special32(lane))
}

/// Escape `src[pos..]` into `out` `W` bytes at a time (`W` is 16 or 32),
/// until fewer than `2 * W` are left or a byte needs a `\u00XX` escape;
/// returns where it stopped. (Stopping `2 * W` bytes short means the `W`
/// bytes after any escape in a lane are input, with no check per escape.)
/// `special` gives a lane's mask of the bytes that need an escape.
///
/// Each lane is stored whole into the reserved room; then, for each of its
/// special bytes in turn, the escape is written over that byte's place and
/// the `W` input bytes after it are stored again one place further on (each
/// escape shifts the rest of the lane by one).
///
/// Room: `2 * (src.len() - pos) + W` bytes are reserved at the start. With
/// `c` input bytes consumed, at most `2c` output bytes are written (each
/// input byte becomes one or two), and every store starts at most `2c`
/// bytes in and is `W` bytes long while at least `W` input bytes are left,
/// so it ends within `2c + W <= 2 * (src.len() - pos) + W`: inside the room.
///
/// The stores go through raw pointers: with bounds-checked slices this loop
/// took about 33 instructions per escape and 25 per lane (a search's text
/// block: 630 escapes, 380 lanes, ~34,000 instructions); the checks could
/// not fail (the room above) and were most of that.
#[inline(always)]
fn lanes_with<const W: usize>(
    out: &mut Vec<u8>,
    src: &[u8],
    mut pos: usize,
    special: impl Fn(&[u8; W]) -> u64,
) -> usize {
    let n = src.len();
    if pos + 2 * W > n {
        return pos;
    }
    out.reserve(2 * (n - pos) + W);
    let room = out.capacity() - out.len();
    let start = pos;
    // Output bytes written past the length.
    let mut w = 0;
    let s = src.as_ptr();
    // SAFETY: `d` points at the spare capacity, `room` bytes long; every
    // store below ends at most `2 * (consumed) + W <= room` bytes in, as
    // the comment above shows (checked by the `debug_assert`s); every load
    // reads `W` bytes at an input offset `i` with `i + W <= n`: a lane at
    // `pos` with `pos + 2W <= n`, and the bytes after an escape in it at
    // `next <= pos + W`.
    unsafe {
        let d = out.as_mut_ptr().add(out.len());
        'lanes: while pos + 2 * W <= n {
            debug_assert!(w + W <= room);
            let lane = &*s.add(pos).cast::<[u8; W]>();
            std::ptr::copy_nonoverlapping(s.add(pos), d.add(w), W);
            let mut special = special(lane);
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
                debug_assert!(o + 2 + W <= room && o + 2 <= 2 * (next - start));
                std::ptr::copy_nonoverlapping(s.add(next), d.add(o + 2), W);
                special &= special - 1;
            }
            w += W + shift;
            pos += W;
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
        let mut theirs = b"prefix".to_vec();
        serde_json::to_writer(&mut theirs, s).unwrap();
        let mut ours = b"prefix".to_vec();
        write_str(&mut ours, s);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
        // The 16-byte lanes alone, as on a CPU without AVX2.
        let mut narrow = b"prefix".to_vec();
        write_with(&mut narrow, s, |out, src, pos| {
            lanes_with::<16>(out, src, pos, |lane| u64::from(special16(lane)))
        });
        assert_eq!(
            String::from_utf8_lossy(&narrow),
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
