//! CSV feeds with the `csv` crate: a header row names the columns, each later row is one vehicle.
//! Rows with a different number of cells or invalid UTF-8 in a mapped cell are rejected; the others are converted.

use super::{Builder, FeedError, Mapping, Raw, Row, FIELDS};

pub(super) fn read(bytes: &[u8], mapping: &Mapping, b: &mut Builder<'_>) -> Result<(), FeedError> {
    // A UTF-8 byte order mark (spreadsheet exports) is not part of the first header.
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut reader = ::csv::ReaderBuilder::new()
        .delimiter(mapping.delimiter)
        .flexible(true)
        .has_headers(true)
        .from_reader(bytes);
    // Headers are read as bytes: a byte that is not UTF-8 in a column the
    // mapping never names must not make the whole feed unreadable.
    let headers: Vec<String> = reader
        .byte_headers()
        .map_err(|e| FeedError::Syntax {
            format: "CSV",
            problem: format!("the header row cannot be read: {e}"),
        })?
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect();
    let width = headers.len();
    let position = |name: &str| {
        headers
            .iter()
            .position(|h| h.trim().eq_ignore_ascii_case(name.trim()))
    };
    // (field index, column index) for every field the feed holds.
    let mut columns = Vec::new();
    for (i, name) in b.source_names() {
        match position(&name) {
            Some(c) => columns.push((i, c)),
            None if mapping.columns.contains_key(FIELDS[i]) => {
                return Err(FeedError::Mapping(format!(
                    "columns.{} names the column {name:?}, which the header row does not have",
                    FIELDS[i]
                )))
            }
            None => {}
        }
    }
    if !columns
        .iter()
        .any(|(i, _)| matches!(FIELDS[*i], "vin" | "stock" | "vehicle_id"))
    {
        return Err(FeedError::Mapping(
            "no column holds vin, stock or vehicle_id (map one in [tenants.backend.feed.columns])"
                .into(),
        ));
    }
    let mut record = ::csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                return Err(FeedError::Syntax {
                    format: "CSV",
                    problem: e.to_string(),
                })
            }
        }
        // A blank line at the end of an export is not a vehicle.
        if record.len() == 1 && record.get(0).is_some_and(|c| c.trim_ascii().is_empty()) {
            continue;
        }
        let row_no = b.next_row();
        if record.len() != width {
            b.reject(
                row_no,
                None,
                "(row)",
                &format!("{} cells where the header has {width}", record.len()),
            );
            continue;
        }
        let mut row: Row = vec![None; FIELDS.len()];
        let mut bad_text = None;
        for &(i, c) in &columns {
            let cell = record.get(c).unwrap_or_default();
            match std::str::from_utf8(cell) {
                Ok(t) if t.trim().is_empty() => {}
                Ok(t) => row[i] = Some(Raw::Text(t.to_owned())),
                Err(_) => {
                    bad_text = Some(FIELDS[i]);
                    break;
                }
            }
        }
        match bad_text {
            Some(field) => b.reject(
                row_no,
                None,
                field,
                "not valid UTF-8 text (set the feed's encoding, e.g. encoding = \"windows-1252\")",
            ),
            None => b.row(row_no, row),
        }
    }
    Ok(())
}
