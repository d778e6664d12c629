//! The values a statement binds: the few column types Boson's tables hold, bound the same way
//! through sqlx (`super::backend`) and through the SQLite writer's own connection
//! (`super::direct`).

/// A value bound to a placeholder.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'a str),
    OptText(Option<&'a str>),
    Bytes(&'a [u8]),
}

impl From<i64> for Arg<'_> {
    fn from(value: i64) -> Self {
        Arg::Int(value)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(value: Option<i64>) -> Self {
        Arg::OptInt(value)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(value: &'a str) -> Self {
        Arg::Text(value)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(value: &'a String) -> Self {
        Arg::Text(value)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(value: Option<&'a str>) -> Self {
        Arg::OptText(value)
    }
}

impl<'a> From<&'a Option<String>> for Arg<'a> {
    fn from(value: &'a Option<String>) -> Self {
        Arg::OptText(value.as_deref())
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(value: &'a [u8]) -> Self {
        Arg::Bytes(value)
    }
}
