//! The chunked transfer coding's decoder (RFC 9112 §7.1), for request bodies at the ingress
//! and response bodies at the upstream client: strict size lines, extensions and trailers.
//!
//! Hand-written rather than `httparse::parse_chunk_size`, which accepts any byte (a bare LF
//! included) inside a chunk extension while refusing a bare LF at the end of the size line: a
//! front proxy that stops at that LF would read a different body than we do (request smuggling).

use crate::exchange::is_tchar;

/// The longest chunk-size line (size, extensions, CRLF).
const MAX_CHUNK_LINE: usize = 4096;
/// The most hex digits of a chunk size (below 2^60, no overflow).
const MAX_CHUNK_DIGITS: usize = 15;

/// Why a chunked body cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A size line, a chunk's end or a trailer field breaks the grammar (what, in words).
    Malformed(&'static str),
    /// The trailer section is over its bound.
    TrailerTooLarge,
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkError::Malformed(m) => write!(f, "malformed chunked body: {m}"),
            ChunkError::TrailerTooLarge => f.write_str("chunked trailer too large"),
        }
    }
}

/// A strict decoder for a chunked body (RFC 9112 §7.1): size lines of hex
/// digits with optional well-formed extensions, every line ended by CRLF,
/// and trailer fields read and dropped. Feed it the buffered bytes; it
/// consumes what it can and says what it needs next.
#[derive(Debug)]
pub struct Chunked {
    state: ChunkState,
    /// Trailer bytes so far (bounded).
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk data, this many bytes left.
    Data(u64),
    /// After chunk data: expecting CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
    Done,
}

/// What one [`Chunked::decode`] step did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// `consumed` bytes used; body data is `buf[data]`.
    Progress {
        consumed: usize,
        data: std::ops::Range<usize>,
    },
    /// Need more bytes (nothing consumed).
    More,
    /// The body is complete after `consumed` bytes.
    Done { consumed: usize },
}

impl Chunked {
    pub fn new(max_trailer_bytes: usize) -> Chunked {
        Chunked {
            state: ChunkState::Size,
            trailer_bytes: 0,
            max_trailer_bytes,
        }
    }

    /// The data bytes the current chunk still announces (0 outside chunk data): a body limit
    /// can refuse a chunk as soon as its size line is read, without waiting for its data.
    pub fn announced(&self) -> u64 {
        match self.state {
            ChunkState::Data(left) => left,
            _ => 0,
        }
    }

    /// Decode from the start of `buf`.
    pub fn decode(&mut self, buf: &[u8]) -> Result<Step, ChunkError> {
        let bad = ChunkError::Malformed;
        match self.state {
            ChunkState::Done => Ok(Step::Done { consumed: 0 }),
            ChunkState::Size => {
                let Some(line) = crlf_line(buf, MAX_CHUNK_LINE).map_err(bad)? else {
                    // A size that is already too long, or no size at all, is refused at once
                    // rather than after waiting for the rest of the line.
                    let digits = buf.iter().take_while(|b| b.is_ascii_hexdigit()).count();
                    if digits > MAX_CHUNK_DIGITS {
                        return Err(bad("chunk size too large"));
                    }
                    if digits == 0 && !buf.is_empty() && buf[0] != b'\r' {
                        return Err(bad("missing chunk size"));
                    }
                    return Ok(Step::More);
                };
                let size = parse_chunk_line(&buf[..line]).map_err(bad)?;
                self.state = if size == 0 {
                    ChunkState::Trailer
                } else {
                    ChunkState::Data(size)
                };
                Ok(Step::Progress {
                    consumed: line + 2,
                    data: 0..0,
                })
            }
            ChunkState::Data(left) => {
                if buf.is_empty() {
                    return Ok(Step::More);
                }
                let n = (buf.len() as u64).min(left) as usize;
                self.state = if n as u64 == left {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left - n as u64)
                };
                Ok(Step::Progress {
                    consumed: n,
                    data: 0..n,
                })
            }
            ChunkState::DataEnd => match buf {
                [b'\r', b'\n', ..] => {
                    self.state = ChunkState::Size;
                    Ok(Step::Progress {
                        consumed: 2,
                        data: 0..0,
                    })
                }
                [] | [b'\r'] => Ok(Step::More),
                _ => Err(bad("chunk data not followed by CRLF")),
            },
            ChunkState::Trailer => {
                let Some(line) = crlf_line(buf, self.max_trailer_bytes + 2).map_err(bad)? else {
                    return Ok(Step::More);
                };
                if line == 0 {
                    self.state = ChunkState::Done;
                    return Ok(Step::Done { consumed: 2 });
                }
                self.trailer_bytes += line + 2;
                if self.trailer_bytes > self.max_trailer_bytes {
                    return Err(ChunkError::TrailerTooLarge);
                }
                let field = &buf[..line];
                let colon = field.iter().position(|&b| b == b':');
                let ok = colon.is_some_and(|c| {
                    c > 0
                        && field[..c].iter().all(|&b| is_tchar(b))
                        && field[c + 1..]
                            .iter()
                            .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
                });
                if !ok {
                    return Err(bad("invalid trailer field"));
                }
                Ok(Step::Progress {
                    consumed: line + 2,
                    data: 0..0,
                })
            }
        }
    }
}

/// The length of the line at the start of `buf` without its CRLF, `None` if
/// it has not fully arrived; a bare CR or LF, or a line over `max`, is an error.
fn crlf_line(buf: &[u8], max: usize) -> Result<Option<usize>, &'static str> {
    for (i, &b) in buf.iter().enumerate() {
        match b {
            b'\n' => return Err("bare LF"),
            b'\r' => {
                return match buf.get(i + 1) {
                    Some(b'\n') => Ok(Some(i)),
                    Some(_) => Err("bare CR"),
                    None => Ok(None),
                }
            }
            _ if i >= max => return Err("line too long"),
            _ => {}
        }
    }
    if buf.len() > max {
        return Err("line too long");
    }
    Ok(None)
}

/// `chunk-size *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )`.
fn parse_chunk_line(line: &[u8]) -> Result<u64, &'static str> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err("missing chunk size");
    }
    if digits > MAX_CHUNK_DIGITS {
        return Err("chunk size too large");
    }
    let mut size = 0u64;
    for &b in &line[..digits] {
        size = size * 16 + u64::from((b as char).to_digit(16).unwrap_or(0));
    }
    let mut rest = &line[digits..];
    let ws = |r: &mut &[u8]| {
        while let [b' ' | b'\t', tail @ ..] = *r {
            *r = tail;
        }
    };
    loop {
        ws(&mut rest);
        match rest {
            [] => return Ok(size),
            [b';', tail @ ..] => rest = tail,
            _ => return Err("invalid chunk extension"),
        }
        ws(&mut rest);
        let name = rest.iter().take_while(|&&b| is_tchar(b)).count();
        if name == 0 {
            return Err("invalid chunk extension");
        }
        rest = &rest[name..];
        ws(&mut rest);
        if let [b'=', tail @ ..] = rest {
            rest = tail;
            ws(&mut rest);
            if let [b'"', tail @ ..] = rest {
                rest = tail;
                loop {
                    match rest {
                        [b'"', tail @ ..] => {
                            rest = tail;
                            break;
                        }
                        [b'\\', q, tail @ ..] if *q == b'\t' || (*q >= 0x20 && *q != 0x7f) => {
                            rest = tail
                        }
                        [b, tail @ ..] if *b == b'\t' || (*b >= 0x20 && *b != 0x7f) => rest = tail,
                        _ => return Err("invalid chunk extension"),
                    }
                }
            } else {
                let value = rest.iter().take_while(|&&b| is_tchar(b)).count();
                if value == 0 {
                    return Err("invalid chunk extension");
                }
                rest = &rest[value..];
            }
        }
    }
}
