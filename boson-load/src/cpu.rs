//! CPU time, to tell how busy the machine was: the benchmark machine is shared, and a phase in
//! which other programs took a core says little about Boson.

use std::time::Instant;

use anyhow::{Context as _, Result};
use serde::Serialize;

/// The kernel reports CPU time in USER_HZ ticks, 100 per second on every Linux architecture
/// (sysconf is out of reach without `unsafe`).
const TICKS_PER_SEC: f64 = 100.0;

/// CPU time (user + system, all threads) a process has used so far, in seconds, read from its
/// `/proc/<pid>/stat` (or `/proc/self/stat`).
pub(crate) fn process_secs(stat_path: &str) -> Result<f64> {
    let stat =
        std::fs::read_to_string(stat_path).with_context(|| format!("reading {stat_path}"))?;
    // The command name may hold spaces; the fields after it are space-separated, and utime
    // and stime are the 12th and 13th of them.
    let after_name = stat.rsplit_once(')').context("no ')' in /proc stat")?.1;
    let mut fields = after_name.split_whitespace().skip(11);
    let mut ticks = |name: &str| -> Result<f64> {
        let field = fields
            .next()
            .with_context(|| format!("no {name} in {stat_path}"))?;
        field
            .parse::<f64>()
            .with_context(|| format!("parsing {name} in {stat_path}"))
    };
    Ok((ticks("utime")? + ticks("stime")?) / TICKS_PER_SEC)
}

/// Busy CPU time of the whole machine so far (all cores), in seconds.
fn machine_secs() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|line| line.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    // user nice system idle iowait irq softirq steal …: all but idle and iowait are busy.
    let busy: f64 = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .filter_map(|(_, ticks)| ticks.parse::<f64>().ok())
        .sum();
    Ok(busy / TICKS_PER_SEC)
}

/// One reading of the machine's and our processes' CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    at: Instant,
    machine: f64,
    /// This process.
    own: f64,
    /// The Boson nodes.
    boson: f64,
}

/// Cores kept busy on average between two readings.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Usage {
    pub(crate) boson: f64,
    /// Everything but Boson and boson-load: other programs (on PostgreSQL, the database server
    /// among them).
    pub(crate) others: f64,
}

impl Reading {
    /// A reading now; `nodes` are the Boson nodes' CPU times (`Boson::cpu_secs` of each).
    pub(crate) fn take(nodes: impl IntoIterator<Item = Result<f64>>) -> Result<Self> {
        let mut boson = 0.0;
        for node in nodes {
            boson += node?;
        }
        Ok(Self {
            at: Instant::now(),
            machine: machine_secs()?,
            own: process_secs("/proc/self/stat")?,
            boson,
        })
    }

    /// Cores used since `earlier`.
    pub(crate) fn since(&self, earlier: &Self) -> Usage {
        let wall = self.at.saturating_duration_since(earlier.at).as_secs_f64();
        let cores = |secs: f64| {
            if wall > 0.0 {
                (secs.max(0.0) / wall * 100.0).round() / 100.0
            } else {
                0.0
            }
        };
        let boson = self.boson - earlier.boson;
        let own = self.own - earlier.own;
        Usage {
            boson: cores(boson),
            others: cores(self.machine - earlier.machine - boson - own),
        }
    }
}
