//! The chunked body decoder of the ingress (`h1::Chunked`) against an independent whole-buffer
//! decoder written here from RFC 9112 §7.1 and the same strictness rules (CRLF only, 1–15 hex
//! digits, token / quoted-string extensions, trailer fields), and against itself fed the same
//! bytes in pieces: every way of splitting the input yields the same body and the same end.
#![no_main]

use aap_gateway::ingress::h1::{Chunked, Step};
use libfuzzer_sys::fuzz_target;

const MAX_TRAILER: usize = 1024;

/// `Ok(Some((body, consumed)))`, `Ok(None)` when more bytes are needed, `Err` when refused.
type Outcome = Result<Option<(Vec<u8>, usize)>, ()>;

/// The decoder fed `data` in pieces of the given sizes (the way reads arrive), keeping unused
/// bytes in a buffer as the connection loop does.
fn decoder(data: &[u8], pieces: &[usize]) -> Outcome {
    let mut d = Chunked::new(MAX_TRAILER);
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut used = 0;
    let mut body = Vec::new();
    let mut sizes = pieces.iter().copied().cycle();
    loop {
        match d.decode(&buf).map_err(|_| ())? {
            Step::Progress { consumed, data: r } => {
                body.extend_from_slice(&buf[r]);
                buf.drain(..consumed);
                used += consumed;
            }
            Step::Done { consumed } => return Ok(Some((body, used + consumed))),
            Step::More => {
                if fed == data.len() {
                    return Ok(None);
                }
                let n = sizes.next().unwrap_or(1).clamp(1, data.len() - fed);
                buf.extend_from_slice(&data[fed..fed + n]);
                fed += n;
            }
        }
    }
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn vchar_or_ws(b: u8) -> bool {
    b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80
}

/// `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )`, whole line.
fn extensions_ok(mut s: &[u8]) -> bool {
    fn bws(s: &mut &[u8]) {
        while let [b' ' | b'\t', r @ ..] = *s {
            *s = r;
        }
    }
    fn token<'a>(s: &mut &'a [u8]) -> bool {
        let n = s.iter().take_while(|&&b| tchar(b)).count();
        *s = &s[n..];
        n > 0
    }
    loop {
        bws(&mut s);
        if s.is_empty() {
            return true;
        }
        if s[0] != b';' {
            return false;
        }
        s = &s[1..];
        bws(&mut s);
        if !token(&mut s) {
            return false;
        }
        bws(&mut s);
        if s.first() == Some(&b'=') {
            s = &s[1..];
            bws(&mut s);
            if s.first() == Some(&b'"') {
                s = &s[1..];
                loop {
                    match s {
                        [b'"', r @ ..] => {
                            s = r;
                            break;
                        }
                        [b'\\', q, r @ ..] if vchar_or_ws(*q) => s = r,
                        [b, r @ ..] if vchar_or_ws(*b) && *b != b'\\' => s = r,
                        _ => return false,
                    }
                }
            } else if !token(&mut s) {
                return false;
            }
        }
    }
}

/// The next CRLF-ended line at `at`: `Ok(Some(end))` (index of its CR), `Ok(None)` when it has
/// not ended yet, `Err` on a bare CR or LF or a line over `max`.
fn line(data: &[u8], at: usize, max: usize) -> Result<Option<usize>, ()> {
    let rest = &data[at..];
    match rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(i) if i > max => Err(()),
        Some(i) if rest[i] == b'\n' => Err(()),
        Some(i) => match rest.get(i + 1) {
            Some(b'\n') => Ok(Some(at + i)),
            Some(_) => Err(()),
            None => Ok(None),
        },
        None if rest.len() > max => Err(()),
        None => Ok(None),
    }
}

/// The independent decoder: the whole input at once.
fn reference(data: &[u8]) -> Outcome {
    let mut at = 0;
    let mut body = Vec::new();
    loop {
        let digits = data[at..].iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits > 15 || (digits == 0 && at < data.len() && data[at] != b'\r') {
            return Err(());
        }
        let Some(end) = line(data, at, 4096)? else {
            return Ok(None);
        };
        if digits == 0 || !extensions_ok(&data[at + digits..end]) {
            return Err(());
        }
        let size = u64::from_str_radix(std::str::from_utf8(&data[at..at + digits]).unwrap(), 16)
            .map_err(|_| ())?;
        at = end + 2;
        if size == 0 {
            break;
        }
        let size = size as usize;
        if data.len() - at < size {
            return Ok(None);
        }
        body.extend_from_slice(&data[at..at + size]);
        at += size;
        match &data[at..] {
            [b'\r', b'\n', ..] => at += 2,
            [] | [b'\r'] => return Ok(None),
            _ => return Err(()),
        }
    }
    let mut trailer = 0;
    loop {
        let Some(end) = line(data, at, MAX_TRAILER + 2)? else {
            return Ok(None);
        };
        if end == at {
            return Ok(Some((body, end + 2)));
        }
        trailer += end - at + 2;
        if trailer > MAX_TRAILER {
            return Err(());
        }
        let field = &data[at..end];
        let ok = field.iter().position(|&b| b == b':').is_some_and(|c| {
            c > 0
                && field[..c].iter().all(|&b| tchar(b))
                && field[c + 1..].iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
        });
        if !ok {
            return Err(());
        }
        at = end + 2;
    }
}

fuzz_target!(|input: &[u8]| {
    // Byte 0 and 1 choose the piece sizes, the rest is the body on the wire.
    let (pieces, data) = match input {
        [a, b, rest @ ..] => (vec![usize::from(*a) + 1, usize::from(*b) + 1], rest),
        _ => return,
    };
    let whole = decoder(data, &[data.len().max(1)]);
    let split = decoder(data, &pieces);
    let bytewise = decoder(data, &[1]);
    assert_eq!(whole, split, "the framing depends on how the bytes arrive");
    assert_eq!(whole, bytewise, "the framing depends on how the bytes arrive");
    let independent = reference(data);
    match (&whole, &independent) {
        (Ok(Some(a)), Ok(Some(b))) => assert_eq!(a, b, "a different body or end"),
        (Ok(Some(_)), _) | (_, Ok(Some(_))) => {
            panic!("one decoder completes, the other does not: {whole:?} vs {independent:?}")
        }
        _ => {}
    }
});
