//! Finding the end of a JSON string.
//!
//! Most strings in an answer are short names and values. One is not: the
//! MCP text block holds the whole payload as JSON text, so it is kilobytes
//! long with a `\"` every few bytes. A byte loop pays a branch per escape
//! there. This scanner works on 64-byte blocks instead: it builds bit masks
//! of quotes, backslashes and control characters (AVX2 when the CPU has it,
//! else SSE2 on x86_64, else byte by byte), derives
//! which characters are escaped with carry arithmetic over the backslash
//! runs, and so costs a few branches per block, not one per escape.
//!
//! It validates as it goes, with the same rules as `serde_json` for a string
//! it skips: no raw control characters, only the escapes JSON defines, four
//! hex digits after `\u`. Surrogate pairing is checked where a string is
//! decoded ([`super::unescape`]), as in `serde_json`.

use super::Error;

const BLOCK: usize = 64;
/// Bits 1, 3, 5, …
const ODD_BITS: u64 = 0xAAAA_AAAA_AAAA_AAAA;
/// Bits 0, 2, 4, …
const EVEN_BITS: u64 = 0x5555_5555_5555_5555;

/// Bit `i` is set when byte `i` of a block is a quote / a backslash / below 0x20.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    control: u64,
}

/// Where a string ends: the index of its closing quote, and whether it
/// holds any escape (so it cannot be borrowed as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrEnd {
    pub close: usize,
    pub escaped: bool,
}

/// Scan the string whose first content byte is `bytes[start]` (just after
/// the opening quote).
///
/// ```
/// use aap_core::json::scan::string_end;
/// let text = br#""a \"quoted\" word" tail"#;
/// let end = string_end(text, 1).unwrap();
/// assert_eq!(end.close, 18);
/// assert!(end.escaped);
/// assert!(string_end(br#""open"#, 1).is_err());
/// ```
#[inline]
pub fn string_end(bytes: &[u8], start: usize) -> Result<StrEnd, Error> {
    // Most strings have no escapes: look 16 bytes at a time for the first
    // quote, backslash or control character. Only a backslash sends the
    // string to the block scanner.
    let mut pos = start;
    while let Some(lane) = bytes.get(pos..).and_then(|rest| rest.first_chunk::<16>()) {
        let special = special16(lane);
        if special == 0 {
            pos += 16;
            continue;
        }
        let i = special.trailing_zeros() as usize;
        match lane[i] {
            b'"' => {
                return Ok(StrEnd {
                    close: pos + i,
                    escaped: false,
                })
            }
            b'\\' => break,
            _ => return Err(Error::new("control character in a string", pos + i)),
        }
    }
    string_end_blocks(bytes, start)
}

/// The general case, 64 bytes at a time (kept out of line so the short
/// path above stays small). With AVX2 (detected at run time, cached by
/// `std`) a block's masks take two 32-byte compares instead of four 16-byte
/// ones: skipping the search answer's 6.6 KB text block (~630 `\"`) went
/// from 13,469 to 8,795 instructions under callgrind
/// (a harness; ~9,000 in the gateway).
#[inline(never)]
pub(super) fn string_end_blocks(bytes: &[u8], start: usize) -> Result<StrEnd, Error> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was just detected on this CPU, all `blocks_avx2`
        // requires.
        return unsafe { blocks_avx2(bytes, start) };
    }
    blocks_with(bytes, start, masks)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn blocks_avx2(bytes: &[u8], start: usize) -> Result<StrEnd, Error> {
    // (The closure inherits this function's target feature: a safe call.)
    blocks_with(bytes, start, |block| masks_avx2(block))
}

/// The block loop, with the masks of a block computed by `masks`: whole
/// blocks first, then the last bytes padded to one (the split spares the
/// whole blocks a validity mask and a padding copy).
#[inline(always)]
fn blocks_with(
    bytes: &[u8],
    start: usize,
    masks: impl Fn(&[u8; BLOCK]) -> Masks,
) -> Result<StrEnd, Error> {
    let mut scan = Blocks {
        pos: start,
        carry: 0,
        escaped_any: false,
    };
    while let Some(block) = bytes.get(scan.pos..).and_then(|r| r.first_chunk::<BLOCK>()) {
        if let Some(end) = scan.block(bytes, masks(block), !0) {
            return end;
        }
        scan.pos += BLOCK;
    }
    let rest = bytes.get(scan.pos..).unwrap_or_default();
    let mut padded = [b' '; BLOCK];
    padded[..rest.len()].copy_from_slice(rest);
    scan.block(bytes, masks(&padded), (1u64 << rest.len()) - 1)
        .unwrap_or(Err(Error::new("unterminated string", bytes.len())))
}

/// The block scanner's state between blocks.
struct Blocks {
    /// Where the current block starts.
    pos: usize,
    /// 1 when the first byte of the current block is escaped by a backslash
    /// run that ended the previous block.
    carry: u64,
    escaped_any: bool,
}

impl Blocks {
    /// One block's masks (`valid`: the bits that are bytes of the text):
    /// the string's end or an error, or `None` when it goes on.
    #[inline(always)]
    fn block(&mut self, bytes: &[u8], m: Masks, valid: u64) -> Option<Result<StrEnd, Error>> {
        let pos = self.pos;
        let backslash = m.backslash & valid;
        let (escaped, next_carry) = escaped_bits(backslash, self.carry);
        let quotes = m.quote & valid & !escaped;
        // Only what precedes the closing quote belongs to this string.
        let inside = if quotes != 0 {
            (1u64 << quotes.trailing_zeros()) - 1
        } else {
            valid
        };
        if m.control & inside != 0 {
            let at = pos + (m.control & inside).trailing_zeros() as usize;
            return Some(Err(Error::new("control character in a string", at)));
        }
        // `\"` and `\\` are the common escapes and already valid; any other
        // escaped byte is checked on its own (they are rare).
        let mut others = escaped & inside & !(m.quote | m.backslash);
        while others != 0 {
            if let Err(e) = check_escape(bytes, pos + others.trailing_zeros() as usize) {
                return Some(Err(e));
            }
            others &= others - 1;
        }
        self.escaped_any |= backslash & inside != 0;
        if quotes != 0 {
            return Some(Ok(StrEnd {
                close: pos + quotes.trailing_zeros() as usize,
                escaped: self.escaped_any,
            }));
        }
        self.carry = next_carry;
        None
    }
}

/// The byte at `at` follows a backslash: it must name a JSON escape.
fn check_escape(bytes: &[u8], at: usize) -> Result<(), Error> {
    match bytes.get(at) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(()),
        Some(b'u') => match bytes.get(at + 1..at + 5) {
            Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => Ok(()),
            Some(_) => Err(Error::new("invalid \\u escape", at)),
            None => Err(Error::new("unterminated string", bytes.len())),
        },
        Some(_) => Err(Error::new("invalid escape", at)),
        None => Err(Error::new("unterminated string", bytes.len())),
    }
}

/// Which bytes of a block are escaped, given its backslash mask and
/// whether the previous block's last backslash run escapes byte 0.
/// Returns the escaped mask and the carry into the next block.
///
/// In a run of backslashes starting at `s`, the bytes at `s+1, s+3, …` up
/// to one past the run are escaped: the odd offsets from `s`. So a run that
/// starts on an even bit escapes odd bits, and the reverse. Adding each
/// odd-starting run's first bit to the mask clears exactly those runs
/// (the carry ripples through them), which separates the two kinds without
/// a loop.
fn escaped_bits(backslash: u64, carry: u64) -> (u64, u64) {
    // An escaped backslash starts nothing.
    let b = backslash & !carry;
    let run_starts = b & !(b << 1);
    let cleared = b.wrapping_add(run_starts & ODD_BITS);
    let even_runs = b & cleared;
    let odd_runs = b & !cleared;
    let escaped = ((even_runs << 1) & ODD_BITS) | ((odd_runs << 1) & EVEN_BITS) | carry;
    // An odd-starting run that reaches bit 63 has odd length: it escapes
    // the first byte of the next block. An even-starting one there has even
    // length and does not.
    (escaped, odd_runs >> 63)
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn masks(block: &[u8; BLOCK]) -> Masks {
    // SAFETY: SSE2 is enabled for this build (the cfg above; it is part of
    // the x86_64 baseline), which is all `masks_sse2` requires.
    unsafe { masks_sse2(block) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn masks_sse2(block: &[u8; BLOCK]) -> Masks {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_set1_epi8};
    let quote = _mm_set1_epi8(b'"' as i8);
    let backslash = _mm_set1_epi8(b'\\' as i8);
    let below_space = _mm_set1_epi8(0x1f);
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        control: 0,
    };
    for (k, lane) in block.chunks_exact(16).enumerate() {
        let v = load16(lane);
        let bits = |x| u64::from(_mm_movemask_epi8(x) as u16) << (16 * k);
        m.quote |= bits(_mm_cmpeq_epi8(v, quote));
        m.backslash |= bits(_mm_cmpeq_epi8(v, backslash));
        // Unsigned `byte <= 0x1f` is `min(byte, 0x1f) == byte`.
        m.control |= bits(_mm_cmpeq_epi8(_mm_min_epu8(v, below_space), v));
    }
    m
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn masks_avx2(block: &[u8; BLOCK]) -> Masks {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
        _mm256_or_si256, _mm256_set1_epi8, _mm256_testz_si256,
    };
    // SAFETY: `block` is 64 readable bytes, so both 32-byte unaligned loads
    // (at 0 and 32) stay inside it.
    let (lo, hi) = unsafe {
        let p = block.as_ptr().cast::<__m256i>();
        (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)))
    };
    let bits = |x, y| {
        u64::from(_mm256_movemask_epi8(x) as u32) | u64::from(_mm256_movemask_epi8(y) as u32) << 32
    };
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    // Unsigned `byte <= 0x1f` is `min(byte, 0x1f) == byte`.
    let below_space = _mm256_set1_epi8(0x1f);
    let control_lo = _mm256_cmpeq_epi8(_mm256_min_epu8(lo, below_space), lo);
    let control_hi = _mm256_cmpeq_epi8(_mm256_min_epu8(hi, below_space), hi);
    let any_control = _mm256_or_si256(control_lo, control_hi);
    Masks {
        quote: bits(_mm256_cmpeq_epi8(lo, quote), _mm256_cmpeq_epi8(hi, quote)),
        backslash: bits(
            _mm256_cmpeq_epi8(lo, backslash),
            _mm256_cmpeq_epi8(hi, backslash),
        ),
        // A block without a control character (a text block's are escaped)
        // skips that mask.
        control: if _mm256_testz_si256(any_control, any_control) == 1 {
            0
        } else {
            bits(control_lo, control_hi)
        },
    }
}

/// Bit `i` set when byte `i` is a quote, a backslash or below 0x20.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(super) fn special16(lane: &[u8; 16]) -> u32 {
    // SAFETY: as for `masks`.
    unsafe { special16_sse2(lane) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
#[inline]
fn special16_sse2(lane: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let v = load16(lane);
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    let below_space = _mm_set1_epi8(0x1f);
    let control = _mm_cmpeq_epi8(_mm_min_epu8(v, below_space), v);
    u32::from(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u16)
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
#[inline]
fn load16(lane: &[u8]) -> std::arch::x86_64::__m128i {
    let word = |half: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(half);
        i64::from_le_bytes(w)
    };
    std::arch::x86_64::_mm_set_epi64x(word(&lane[8..16]), word(&lane[..8]))
}

/// [`special16`] for 32 bytes, with AVX2 (the caller has detected it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn special32(lane: &[u8; 32]) -> u64 {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
        _mm256_or_si256, _mm256_set1_epi8,
    };
    // SAFETY: `lane` is 32 readable bytes, the one unaligned load's size.
    let v = unsafe { _mm256_loadu_si256(lane.as_ptr().cast::<__m256i>()) };
    let quote = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8));
    let backslash = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8));
    // Unsigned `byte <= 0x1f` is `min(byte, 0x1f) == byte`.
    let control = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1f)), v);
    let any = _mm256_or_si256(_mm256_or_si256(quote, backslash), control);
    u64::from(_mm256_movemask_epi8(any) as u32)
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(super) fn special16(lane: &[u8; 16]) -> u32 {
    lane.iter().enumerate().fold(0, |m, (i, &b)| {
        m | (u32::from(b == b'"' || b == b'\\' || b < 0x20) << i)
    })
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn masks(block: &[u8; BLOCK]) -> Masks {
    masks_portable(block)
}

/// The masks byte by byte: the reference for the SIMD version, and the
/// path on other architectures.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn masks_portable(block: &[u8; BLOCK]) -> Masks {
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        control: 0,
    };
    for (i, &b) in block.iter().enumerate() {
        m.quote |= u64::from(b == b'"') << i;
        m.backslash |= u64::from(b == b'\\') << i;
        m.control |= u64::from(b < 0x20) << i;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One bit at a time, as the grammar reads.
    fn escaped_bits_reference(backslash: u64, carry: u64) -> (u64, u64) {
        let mut pending = carry == 1;
        let mut escaped = 0u64;
        for i in 0..64 {
            if pending {
                escaped |= 1 << i;
                pending = false;
            } else if backslash >> i & 1 == 1 {
                pending = true;
            }
        }
        (escaped, u64::from(pending))
    }

    #[test]
    fn escaped_bits_match_the_sequential_reading() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut masks = vec![0, !0, 1, 1 << 63, 3 << 62, 0x8000_0000_0000_0001, ODD_BITS];
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Dense, sparse and run-heavy patterns.
            masks.extend([x, x & (x >> 1), x | (x >> 3), x & (x >> 2) & (x >> 5)]);
        }
        for m in masks {
            for carry in [0, 1] {
                assert_eq!(
                    escaped_bits(m, carry),
                    escaped_bits_reference(m, carry),
                    "{m:064b} carry {carry}"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn special32_is_two_special16s() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut lane = [0u8; 32];
        for seed in 0..2_000u32 {
            for (i, b) in lane.iter_mut().enumerate() {
                let r = (seed.wrapping_mul(2_654_435_761) ^ (i as u32).wrapping_mul(40_503)) >> 7;
                *b = [b'"', b'\\', 0x00, 0x1f, 0x20, b'a', 0x7f, 0x80, 0xff, 0x9f][r as usize % 10];
            }
            let (lo, hi) = lane.split_at(16);
            let halves = |h: &[u8]| u64::from(special16(h.try_into().unwrap()));
            // SAFETY: AVX2 was detected above.
            let wide = unsafe { special32(&lane) };
            assert_eq!(wide, halves(lo) | halves(hi) << 16);
        }
    }

    #[test]
    fn simd_masks_match_the_portable_ones() {
        let mut block = [0u8; BLOCK];
        for seed in 0..2_000u32 {
            for (i, b) in block.iter_mut().enumerate() {
                let r = (seed.wrapping_mul(2_654_435_761) ^ (i as u32).wrapping_mul(40_503)) >> 7;
                *b = [b'"', b'\\', 0x00, 0x1f, 0x20, b'a', 0x7f, 0x80, 0xff, 0x9f][r as usize % 10];
            }
            assert_eq!(masks(&block), masks_portable(&block));
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was just detected.
                assert_eq!(unsafe { masks_avx2(&block) }, masks_portable(&block));
            }
        }
    }

    /// Every mask function gives the block loop the same answers (the
    /// strings of `agrees_with_serde_json_on_strings_of_every_length` take
    /// the AVX2 path where the CPU has it).
    fn same_on_every_path(text: &[u8]) {
        let baseline = blocks_with(text, 1, masks_portable);
        assert_eq!(blocks_with(text, 1, masks), baseline);
        assert_eq!(string_end_blocks(text, 1), baseline);
    }

    /// What `serde_json` says about the same string.
    fn serde_agrees(content: &[u8]) {
        let mut text = vec![b'"'];
        text.extend_from_slice(content);
        let ours = string_end(&text, 1);
        let mut de = serde_json::Deserializer::from_slice(&text);
        let theirs = serde::de::IgnoredAny::deserialize(&mut de).map(|_| ());
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{:?}",
            String::from_utf8_lossy(content)
        );
        if let Ok(end) = ours {
            assert_eq!(text[end.close], b'"');
            assert_eq!(end.escaped, text[1..end.close].contains(&b'\\'));
        }
    }
    use serde::Deserialize;

    #[test]
    fn agrees_with_serde_json_on_strings_of_every_length() {
        let pieces: [&[u8]; 12] = [
            b"a",
            b"\\\"",
            b"\\\\",
            b"\\n",
            b"\\u00e9",
            b"\\",
            b"\x01",
            b"\\x",
            b"\\u12G4",
            b"\"",
            b"\xc3\xa9",
            b"\\/",
        ];
        let mut x: u32 = 7;
        for len in 0..200 {
            for _ in 0..20 {
                let mut s = Vec::new();
                while s.len() < len {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    // Mostly plain bytes and valid escapes, now and then an error.
                    let p = match x % 40 {
                        0 => pieces[5],
                        1 => pieces[6],
                        2 => pieces[7],
                        3 => pieces[8],
                        4 => pieces[9],
                        n => pieces[[0, 0, 0, 1, 1, 2, 3, 4, 10, 11][n as usize % 10]],
                    };
                    s.extend_from_slice(p);
                }
                serde_agrees(&s);
                let mut closed = s.clone();
                closed.push(b'"');
                serde_agrees(&closed);
                closed.insert(0, b'"');
                same_on_every_path(&closed);
            }
        }
        // A run of backslashes across a block boundary, both parities.
        for run in 1..6 {
            for at in 58..70 {
                let mut s = vec![b'a'; at];
                s.extend(std::iter::repeat_n(b'\\', run));
                s.extend_from_slice(b"\" tail\"");
                serde_agrees(&s);
                s.insert(0, b'"');
                same_on_every_path(&s);
            }
        }
    }
}
