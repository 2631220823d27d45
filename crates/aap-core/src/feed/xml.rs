//! XML feeds with `quick-xml`: a root element (any name) holding one listing element per vehicle,
//! each field a child element; a list field is either one text or child elements, one per item.

use super::{Builder, FeedError, Mapping, Raw, Row, FIELDS};
use quick_xml::events::Event;
use std::collections::{HashMap, HashSet};

fn syntax(problem: String) -> FeedError {
    FeedError::Syntax {
        format: "XML",
        problem,
    }
}

/// The field element being read inside a listing.
struct Field {
    /// Index in FIELDS, or `None` for an element no field maps.
    slot: Option<usize>,
    text: String,
    items: Vec<String>,
    /// The text of the item element being read (depth 3).
    item: Option<String>,
}

pub(super) fn read(bytes: &[u8], mapping: &Mapping, b: &mut Builder<'_>) -> Result<(), FeedError> {
    let text = std::str::from_utf8(bytes).map_err(|e| syntax(format!("not UTF-8: {e}")))?;
    let by_name: HashMap<String, usize> = b
        .source_names()
        .into_iter()
        .map(|(i, name)| (name.to_ascii_lowercase(), i))
        .collect();
    let listing = mapping.listing_element.as_str();
    let mut reader = quick_xml::Reader::from_str(text);
    let mut depth = 0usize;
    let mut row: Option<Row> = None;
    let mut field: Option<Field> = None;
    let mut seen: HashSet<usize> = HashSet::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| syntax(format!("at byte {}: {e}", reader.buffer_position())))?;
        match event {
            Event::Eof => break,
            Event::Start(e) => {
                depth += 1;
                let name = e.local_name().as_ref().to_owned();
                match depth {
                    2 if name == listing => row = Some(vec![None; FIELDS.len()]),
                    3 if row.is_some() => {
                        let slot = by_name.get(&name.to_ascii_lowercase()).copied();
                        field = Some(Field {
                            slot,
                            text: String::new(),
                            items: Vec::new(),
                            item: None,
                        });
                    }
                    4 => {
                        if let Some(f) = field.as_mut() {
                            f.item = Some(String::new());
                        }
                    }
                    _ => {}
                }
            }
            Event::Empty(e) => {
                let name = e.local_name().as_ref().to_owned();
                // `<listing/>`: a vehicle row without fields.
                if depth == 1 && name == listing {
                    let n = b.next_row();
                    b.row(n, vec![None; FIELDS.len()]);
                }
            }
            Event::Text(t) => append(&mut field, &t.xml10_content()),
            Event::CData(t) => append(&mut field, &t.into_inner()),
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    Ok(None) => match r.xml10_content().as_ref() {
                        "amp" => "&".into(),
                        "lt" => "<".into(),
                        "gt" => ">".into(),
                        "quot" => "\"".into(),
                        "apos" => "'".into(),
                        _ => return Err(syntax("an unknown entity reference".into())),
                    },
                    Err(e) => return Err(syntax(e.to_string())),
                };
                append(&mut field, &c);
            }
            Event::End(_) => {
                match depth {
                    4 => {
                        if let Some(f) = field.as_mut() {
                            if let Some(item) = f.item.take() {
                                f.items.push(item);
                            }
                        }
                    }
                    3 => {
                        if let (Some(f), Some(r)) = (field.take(), row.as_mut()) {
                            if let Some(slot) = f.slot {
                                seen.insert(slot);
                                r[slot] = if f.items.is_empty() {
                                    (!f.text.trim().is_empty()).then_some(Raw::Text(f.text))
                                } else {
                                    Some(Raw::Items(f.items))
                                };
                            }
                        }
                    }
                    2 => {
                        if let Some(r) = row.take() {
                            let n = b.next_row();
                            b.row(n, r);
                        }
                    }
                    _ => {}
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    if b.out.report.rows > 0 {
        for (field, name) in &mapping.columns {
            let Some(i) = FIELDS.iter().position(|f| f == field) else {
                continue;
            };
            if !seen.contains(&i) {
                return Err(FeedError::Mapping(format!(
                    "columns.{field} names the element {name:?}, which no <{listing}> has"
                )));
            }
        }
    }
    Ok(())
}

fn append(field: &mut Option<Field>, s: &str) {
    if let Some(f) = field.as_mut() {
        match f.item.as_mut() {
            Some(item) => item.push_str(s),
            None => f.text.push_str(s),
        }
    }
}
