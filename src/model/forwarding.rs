//! Kit forwarding statistics, the pure rules: which kit a Web SDK report counts for, and how
//! many distinct kits an input keeps. A public key sends these reports, so what one key can
//! make Boson store is bounded here: at most `cap` kits per input plus two named buckets.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The kit a report is counted for. Ordered as stored and listed: the two buckets first,
/// then kits by module id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kit {
    /// Reports of kits an input had no room left for.
    Overflow,
    /// Reports of sideloaded kits, which have no module id (the Web SDK sends no `mid`).
    Sideloaded,
    /// A kit by its module id (positive).
    Module(i64),
}

/// The `module_id` column's values for the buckets. mParticle's module ids are positive, and
/// reports with any other `mid` are refused, so these cannot collide with a kit.
const OVERFLOW_COLUMN: i64 = -2;
const SIDELOADED_COLUMN: i64 = -1;
const OVERFLOW_NAME: &str = "overflow";
const SIDELOADED_NAME: &str = "sideloaded";

impl Kit {
    /// The value stored in the `module_id` column.
    pub(crate) fn column(self) -> i64 {
        match self {
            Kit::Overflow => OVERFLOW_COLUMN,
            Kit::Sideloaded => SIDELOADED_COLUMN,
            Kit::Module(id) => id,
        }
    }

    /// The kit a stored `module_id` stands for.
    pub(crate) fn from_column(column: i64) -> Self {
        match column {
            OVERFLOW_COLUMN => Kit::Overflow,
            SIDELOADED_COLUMN => Kit::Sideloaded,
            id => Kit::Module(id),
        }
    }

    /// The kit's name in the admin API: its module id, or the bucket's name.
    pub(crate) fn name(self) -> String {
        match self {
            Kit::Overflow => OVERFLOW_NAME.to_owned(),
            Kit::Sideloaded => SIDELOADED_NAME.to_owned(),
            Kit::Module(id) => id.to_string(),
        }
    }

    /// The kit a name (as [`Kit::name`] spells it) stands for.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            OVERFLOW_NAME => Some(Kit::Overflow),
            SIDELOADED_NAME => Some(Kit::Sideloaded),
            id => id.parse().ok().filter(|id| *id > 0).map(Kit::Module),
        }
    }

    /// The module id, for a kit that has one.
    pub(crate) fn module_id(self) -> Option<i64> {
        match self {
            Kit::Module(id) => Some(id),
            Kit::Overflow | Kit::Sideloaded => None,
        }
    }
}

/// The reports of a request body: `/v2/…/Forwarding` sends `{"uuid", "data": [reports]}`,
/// `/v1/…/Forwarding` one report.
pub(crate) fn reports_of(body: Value) -> Vec<Value> {
    match body {
        Value::Object(mut object) if object.get("data").is_some_and(Value::is_array) => {
            match object.remove("data") {
                Some(Value::Array(reports)) => reports,
                _ => Vec::new(),
            }
        }
        report => vec![report],
    }
}

/// Reports counted per kit, or why one of them is refused (then none is counted).
pub(crate) fn tally(reports: &[Value]) -> Result<BTreeMap<Kit, i64>, String> {
    let mut counts = BTreeMap::new();
    for report in reports {
        *counts.entry(kit_of(report)?).or_insert(0) += 1;
    }
    Ok(counts)
}

/// The kit one report counts for. Web SDK 2.20 reports sideloaded kits without `mid` (the kit
/// has no numeric id, so JSON drops the undefined value).
fn kit_of(report: &Value) -> Result<Kit, String> {
    let Value::Object(report) = report else {
        return Err("Each forwarding report must be a JSON object.".into());
    };
    match report.get("mid") {
        None | Some(Value::Null) => Ok(Kit::Sideloaded),
        Some(mid) => mid
            .as_i64()
            .filter(|id| *id > 0)
            .map(Kit::Module)
            .ok_or_else(|| {
                "A forwarding report's \"mid\" must be a positive integer \
                 (or absent, for a sideloaded kit)."
                    .into()
            }),
    }
}

/// What to add to an input's statistics: `counts` with every kit the input has no room for
/// moved to the overflow bucket. `known` are the reported kits the input already keeps and
/// `kept` how many kits it keeps in all; new kits take the free places up to `cap` in module-id
/// order, so the same request always gives the same result.
pub(crate) fn cap_kits(
    counts: BTreeMap<Kit, i64>,
    known: &BTreeSet<i64>,
    kept: usize,
    cap: usize,
) -> BTreeMap<Kit, i64> {
    let mut kept = kept;
    let mut capped = BTreeMap::new();
    for (kit, events) in counts {
        let kit = match kit {
            Kit::Module(id) if known.contains(&id) => kit,
            Kit::Module(_) if kept < cap => {
                kept += 1;
                kit
            }
            Kit::Module(_) => Kit::Overflow,
            bucket => bucket,
        };
        *capped.entry(kit).or_insert(0) += events;
    }
    capped
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reports_count_per_kit_and_a_missing_mid_is_a_sideloaded_kit() {
        let body =
            json!({"uuid": "u", "data": [{"mid": 160}, {"n": "x"}, {"mid": 160}, {"mid": null}]});
        let counts = tally(&reports_of(body)).unwrap();
        let expected = BTreeMap::from([(Kit::Sideloaded, 2), (Kit::Module(160), 2)]);
        assert_eq!(counts, expected);
        let single = tally(&reports_of(json!({"mid": 82, "n": "x"}))).unwrap();
        assert_eq!(single, BTreeMap::from([(Kit::Module(82), 1)]));
    }

    #[test]
    fn a_report_that_names_no_usable_kit_refuses_the_request() {
        for bad in [
            json!([{"mid": 1}, {"mid": "1"}]),
            json!([{"mid": 0}]),
            json!([{"mid": -1}]),
            json!([{"mid": 1.5}]),
            json!([3]),
        ] {
            let reports = bad.as_array().unwrap().clone();
            assert!(tally(&reports).is_err(), "{bad}");
        }
    }

    #[test]
    fn new_kits_beyond_the_cap_go_to_the_overflow_bucket() {
        let counts = BTreeMap::from([
            (Kit::Sideloaded, 1),
            (Kit::Module(3), 1),
            (Kit::Module(5), 2),
            (Kit::Module(7), 4),
            (Kit::Module(9), 8),
        ]);
        // The input keeps kits 5 and 11; one place is free.
        let capped = cap_kits(counts, &BTreeSet::from([5]), 2, 3);
        let expected = BTreeMap::from([
            (Kit::Overflow, 12),
            (Kit::Sideloaded, 1),
            (Kit::Module(3), 1),
            (Kit::Module(5), 2),
        ]);
        assert_eq!(capped, expected);
    }

    #[test]
    fn a_full_input_still_counts_its_known_kits() {
        let counts = BTreeMap::from([(Kit::Module(1), 1), (Kit::Module(2), 1)]);
        let capped = cap_kits(counts, &BTreeSet::from([2]), 100, 100);
        assert_eq!(
            capped,
            BTreeMap::from([(Kit::Overflow, 1), (Kit::Module(2), 1)])
        );
    }

    #[test]
    fn kit_names_and_columns_round_trip_in_listing_order() {
        let kits = [
            Kit::Overflow,
            Kit::Sideloaded,
            Kit::Module(1),
            Kit::Module(160),
        ];
        for kit in kits {
            assert_eq!(Kit::parse(&kit.name()), Some(kit));
            assert_eq!(Kit::from_column(kit.column()), kit);
        }
        let columns: Vec<i64> = kits.iter().map(|kit| kit.column()).collect();
        assert!(columns.is_sorted(), "column order is listing order");
        assert_eq!(Kit::parse("0"), None);
        assert_eq!(Kit::parse("other"), None);
    }
}
