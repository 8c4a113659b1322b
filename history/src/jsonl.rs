//! Reading `history.jsonl`: [`History::from_jsonl`] for a history held in
//! memory, [`read_jsonl`] for one checked as it streams past. Each line
//! takes [`scan`](crate::scan)'s fast path when it has the shape the
//! harness writes, serde's otherwise.

use crate::{next_line, Event, History, ParseError};
use std::io::BufRead;

impl History {
    /// Reads JSON Lines. A malformed *last* line is what a crash mid-write
    /// leaves: it is dropped and the history marked truncated. A malformed
    /// line anywhere else is an error naming the line.
    pub fn from_jsonl(reader: impl BufRead) -> Result<Self, ParseError> {
        let mut history = History::default();
        read_jsonl(reader, &mut history.truncated, |e| history.events.push(e))?;
        Ok(history)
    }
}

/// Reads JSON Lines one event at a time. A malformed last line *without
/// its newline* is what a crash mid-write leaves: it is dropped and
/// `truncated` set. Any other malformed line is an error naming it.
pub fn read_jsonl(
    mut reader: impl BufRead,
    truncated: &mut bool,
    mut each: impl FnMut(Event),
) -> Result<(), ParseError> {
    let mut buf = Vec::new();
    let mut n = 0;
    while next_line(&mut reader, &mut buf, n + 1)? {
        n += 1;
        // The common line, well-formed: scanned, or parsed from the bytes as
        // they are. Anything else takes the careful path below, so what it
        // accepts (invalid UTF-8 replaced, Unicode spaces trimmed) and the
        // errors it gives are unchanged.
        if let Some(event) = crate::scan::event(&buf) {
            each(event);
            continue;
        }
        if let Ok(event) = serde_json::from_slice::<Event>(&buf) {
            each(event);
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(text) {
            Ok(event) => each(event),
            // Only the last line can lack its newline.
            Err(_) if buf.last() != Some(&b'\n') => *truncated = true,
            Err(e) => {
                return Err(ParseError::Line {
                    line: n,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_last_line_marks_the_history_truncated() {
        let text = "{\"index\":0,\"time\":1,\"process\":0,\"type\":\"invoke\",\"f\":\"read\"}\n{\"index\":1,\"ti";
        let h = History::from_jsonl(text.as_bytes()).unwrap();
        assert_eq!(h.events.len(), 1);
        assert!(h.truncated);
    }

    #[test]
    fn a_bad_last_line_that_ends_with_a_newline_is_malformed_not_truncated() {
        let text =
            "{\"index\":0,\"time\":1,\"process\":0,\"type\":\"invoke\",\"f\":\"read\"}\nnot json\n";
        let err = History::from_jsonl(text.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("history line 2:"), "{err}");
    }

    #[test]
    fn a_line_longer_than_the_bound_is_an_error_without_reading_on() {
        let endless = std::io::BufReader::new(std::io::repeat(b'0'));
        let err = History::from_jsonl(endless).unwrap_err();
        assert!(err.to_string().contains("longer than 1 MiB"), "{err}");
    }

    #[test]
    fn a_bad_line_in_the_middle_is_an_error_naming_it() {
        let text = "{\"index\":0,\"time\":1,\"process\":0,\"type\":\"invoke\",\"f\":\"read\"}\nnot json\n{\"index\":1,\"time\":2,\"process\":0,\"type\":\"ok\",\"f\":\"read\"}\n";
        let err = History::from_jsonl(text.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("history line 2:"), "{err}");
    }
}
