//! A JSON text walked by hand between its values, each value read by serde_json.
//!
//! serde_json does not say where in its input a value was, except between the values of a
//! stream. So where a caller needs a value's text as well as what it reads (ingest keeps events
//! and batch members as the text they came in, delivery sends stored events as their stored
//! text), the containers around those values are walked here, a few bytes of punctuation, and
//! each value in them is read as one value of a stream, whose end the stream tells. Capturing a
//! value's text first and reading it after costs a second pass over it: at ingest that pass was
//! a tenth of Boson's instructions (issue 16, docs/PERFORMANCE.md).
//!
//! A value read on its own may nest as deep as a whole text may, levels deeper than it stands in
//! the whole. Readers that check nesting themselves are told their level; [`Cursor::nested_value`]
//! checks a `Value`'s.

use serde::Deserialize;
use serde_json::{Deserializer, Value};

use super::nesting;

/// A place in a JSON text being walked.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The start of `text`.
    pub(crate) fn new(text: &'a str) -> Self {
        Self { text, at: 0 }
    }

    fn skip_whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        while matches!(bytes.get(self.at), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    /// The next byte past any whitespace.
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.text.as_bytes().get(self.at).copied()
    }

    /// Steps over `byte` if it comes next.
    pub(crate) fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        if next {
            self.at += 1;
        }
        next
    }

    /// Whether only whitespace is left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.skip_whitespace();
        self.at == self.text.len()
    }

    /// The next value, read as `T`, and its text; `None`, the cursor left where it was, if
    /// serde_json refuses it as a `T`.
    pub(crate) fn value<T: Deserialize<'a>>(&mut self) -> Option<(T, &'a str)> {
        self.skip_whitespace();
        let rest = self.text.get(self.at..)?;
        let mut stream = Deserializer::from_str(rest).into_iter::<T>();
        let value = stream.next()?.ok()?;
        let len = stream.byte_offset();
        self.at += len;
        Some((value, rest.get(..len)?))
    }

    /// The next value, parsed, and its text, unless it reaches past serde_json's depth limit
    /// from `level` of the whole text.
    pub(crate) fn nested_value(&mut self, level: usize) -> Option<(Value, &'a str)> {
        let (value, text) = self.value::<Value>()?;
        (!too_deep(text, level)).then_some((value, text))
    }

    /// Walks the array that comes next, calling `each` with the cursor at each of its values
    /// (which `each` must step over); `None` if it is not an array or `each` fails.
    pub(crate) fn array(&mut self, mut each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(());
        }
        loop {
            each(self)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b']').then_some(());
        }
    }

    /// Walks the object that comes next, calling `each` with each key and the cursor at its
    /// value (which `each` must step over); `None` if it is not an object or `each` fails.
    pub(crate) fn object(
        &mut self,
        mut each: impl FnMut(String, &mut Self) -> Option<()>,
    ) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let (key, _) = self.value::<String>()?;
            if !self.eat(b':') {
                return None;
            }
            each(key, self)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }
}

/// Whether the value written as `text`, standing at `level` of the whole, nests past serde_json's
/// depth limit. Counted on the text, not on a `Value` read from it: a key given twice keeps only
/// its last value in a `Value`, and an object holding serde_json's reserved key reads as
/// something else, so the tree can be shallower than the text the whole parse refuses. Each
/// level takes two brackets: a text too short or with too few opening ones (strings' counted
/// too) cannot nest that deep, which spares the count for (nearly) every value.
pub(crate) fn too_deep(text: &str, level: usize) -> bool {
    let levels = (nesting::MAX_LEVEL + 1).saturating_sub(level);
    text.len() > 2 * levels
        && opening_brackets(text.as_bytes()) > levels
        && nests_deeper_than(text.as_bytes(), levels)
}

/// Whether containers nest more than `levels` deep in `json` (`1` nests none, `[1]` one),
/// brackets in strings left out. `json` is one value serde_json has read.
fn nests_deeper_than(json: &[u8], levels: usize) -> bool {
    let (mut depth, mut at) = (0usize, 0);
    while let Some(&byte) = json.get(at) {
        at += 1;
        match byte {
            b'"' => at = past_string(json, at),
            b'[' | b'{' => {
                depth += 1;
                if depth > levels {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Where the string whose contents start at `at` of `bytes` (JSON text) ends: just past its
/// closing quote, or past the end of `bytes` if it has none.
pub(crate) fn past_string(bytes: &[u8], mut at: usize) -> usize {
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    at
}

/// How many `[` and `{` are in `bytes` (strings' too). Counted in byte-wide sums, which the
/// compiler turns into vector instructions: counted a byte at a time, it was 8 instructions
/// per byte of every stored batch.
fn opening_brackets(bytes: &[u8]) -> usize {
    // `[` is `{` but for the 0x20 bit, which no other byte adds to make `{`.
    let chunk_count = |chunk: &[u8]| {
        chunk
            .iter()
            .fold(0u8, |n, &b| n + u8::from(b | 0x20 == b'{'))
    };
    bytes
        .chunks(255)
        .map(|chunk| usize::from(chunk_count(chunk)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_read_gives_its_text_without_the_whitespace_around_it() {
        let mut cursor = Cursor::new(" \n{\"a\" : [1, 2]} ,7");
        let (value, text) = cursor.value::<Value>().expect("an object");
        assert_eq!(value, serde_json::json!({"a": [1, 2]}));
        assert_eq!(text, "{\"a\" : [1, 2]}");
        assert!(cursor.eat(b','));
        let (n, text) = cursor.value::<u32>().expect("a number");
        assert_eq!((n, text), (7, "7"));
        assert!(cursor.at_end());
    }

    #[test]
    fn a_value_refused_leaves_the_cursor_where_it_was() {
        let mut cursor = Cursor::new("\"x\"");
        assert!(cursor.value::<u32>().is_none());
        assert_eq!(
            cursor.value::<String>().map(|(s, _)| s).as_deref(),
            Some("x")
        );
    }

    #[test]
    fn objects_and_arrays_are_walked_member_by_member() {
        let mut cursor = Cursor::new(r#"{"a": [1, {"b": 2}], "c\u0041": null}"#);
        let mut seen = Vec::new();
        cursor
            .object(|key, cursor| {
                if key == "a" {
                    cursor.array(|cursor| {
                        seen.push(cursor.value::<Value>()?.1.to_owned());
                        Some(())
                    })
                } else {
                    seen.push(format!("{key}={}", cursor.value::<Value>()?.1));
                    Some(())
                }
            })
            .expect("an object");
        assert!(cursor.at_end());
        assert_eq!(seen, ["1", r#"{"b": 2}"#, "cA=null"]);
    }

    #[test]
    fn broken_containers_are_refused() {
        for text in [
            r#"{"a" 1}"#,
            r#"{"a": 1"#,
            "[1 2]",
            "[1,]",
            r#"{"a": 1,}"#,
            "[",
            "1",
        ] {
            let mut cursor = Cursor::new(text);
            let walked = if text.starts_with('[') {
                cursor.array(|c| c.value::<Value>().map(drop))
            } else {
                cursor.object(|_, c| c.value::<Value>().map(drop))
            };
            assert!(walked.is_none(), "{text}");
        }
    }

    #[test]
    fn opening_brackets_are_counted_in_strings_too() {
        let text = r#"{"a":["[{",{"b":[]},"]"],"c":"{x[y"}"#.repeat(40);
        assert_eq!(opening_brackets(text.as_bytes()), 40 * 8);
    }

    #[test]
    fn a_value_nested_past_the_limit_from_its_level_is_refused() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let levels = nesting::MAX_LEVEL + 1 - 3;
        assert!(Cursor::new(&deep(levels)).nested_value(3).is_some());
        assert!(Cursor::new(&deep(levels + 1)).nested_value(3).is_none());
        // Brackets in strings do not nest.
        let in_strings = format!(r#"["{}", {{"k{}": 1}}]"#, "[".repeat(200), "{".repeat(200));
        assert!(Cursor::new(&in_strings).nested_value(3).is_some());
        assert!(!too_deep(r#"["\"[[[[", 1]"#, nesting::MAX_LEVEL));
    }

    /// The depth is the text's: a `Value` read from it keeps only the last of a key given twice,
    /// and reads an object holding serde_json's reserved key as what that key holds.
    #[test]
    fn a_branch_a_value_drops_still_counts_toward_the_depth() {
        let levels = nesting::MAX_LEVEL + 1 - 2;
        let deep = format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
        let repeated = format!(r#"{{"a":{deep},"a":1}}"#);
        assert!(serde_json::from_str::<Value>(&format!(r#"{{"m":{repeated}}}"#)).is_err());
        assert!(Cursor::new(&repeated).nested_value(2).is_none());
        let reserved = format!(
            r#"{}{{"{}":"1"}}{}"#,
            "[".repeat(levels),
            nesting::RESERVED_KEY,
            "]".repeat(levels)
        );
        assert!(serde_json::from_str::<Value>(&format!(r#"{{"m":{reserved}}}"#)).is_err());
        assert!(Cursor::new(&reserved).nested_value(2).is_none());
    }
}
