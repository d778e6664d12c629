//! Where a value sits in an inbound batch (`events[2].data.custom_attributes`), for the messages
//! of validation errors. Validation walks every event of every batch and the name is needed only
//! when a check fails, so a path is a chain of borrowed parts, written out only then: formatting
//! each event's field names up front cost a tenth of the ingest path's instructions.

use std::fmt;

#[derive(Debug, Clone, Copy)]
pub(crate) enum FieldPath<'a> {
    /// The batch: empty for the only batch of a request, `[3]` for a bulk request's fourth.
    Root(&'a str),
    Key(&'a FieldPath<'a>, &'a str),
    Index(&'a FieldPath<'a>, usize),
}

impl<'a> FieldPath<'a> {
    /// The value under `key` of the object here.
    pub(crate) fn key(&'a self, key: &'a str) -> FieldPath<'a> {
        FieldPath::Key(self, key)
    }

    /// The `index`th item of the array here.
    pub(crate) fn index(&'a self, index: usize) -> FieldPath<'a> {
        FieldPath::Index(self, index)
    }

    fn is_empty(&self) -> bool {
        matches!(self, FieldPath::Root(prefix) if prefix.is_empty())
    }
}

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldPath::Root(prefix) => f.write_str(prefix),
            FieldPath::Key(parent, key) if parent.is_empty() => f.write_str(key),
            FieldPath::Key(parent, key) => write!(f, "{parent}.{key}"),
            FieldPath::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_reads_as_the_field_names_in_error_messages() {
        let single = FieldPath::Root("");
        let events = single.key("events");
        let third = events.index(2);
        let data = third.key("data");
        assert_eq!(events.to_string(), "events");
        assert_eq!(
            data.key("custom_attributes").to_string(),
            "events[2].data.custom_attributes"
        );
        let bulk = FieldPath::Root("[3]");
        assert_eq!(bulk.key("mpid").to_string(), "[3].mpid");
        assert_eq!(bulk.key("events").index(0).to_string(), "[3].events[0]");
    }
}
