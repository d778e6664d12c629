//! Reading Boson's `/metrics`: how many webhook attempts each node made for a connection, by
//! outcome (`boson_deliveries_total{connection, outcome}`), to tell what a failing endpoint cost
//! Boson even where the endpoint itself cannot count them (refused connections).

use anyhow::{Context as _, Result, ensure};

use crate::boson::Boson;

const DELIVERIES: &str = "boson_deliveries_total";

/// Attempts that ended with `outcome` (`delivered`, `retry`, `dead_letter`) for each of
/// `connections`, summed over `nodes`.
pub(crate) async fn attempts(
    http: &reqwest::Client,
    nodes: &[Boson],
    connections: &[String],
    outcome: &str,
) -> Result<Vec<u64>> {
    let mut totals = vec![0; connections.len()];
    for node in nodes {
        let url = format!("{}/metrics", node.base_url());
        let response = http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        ensure!(
            response.status().is_success(),
            "GET {url} answered {}",
            response.status()
        );
        let text = response
            .text()
            .await
            .with_context(|| format!("reading {url}"))?;
        for (total, connection) in totals.iter_mut().zip(connections) {
            *total += counter(
                &text,
                DELIVERIES,
                &[("connection", connection), ("outcome", outcome)],
            );
        }
    }
    Ok(totals)
}

/// The value of counter `name` with all of `labels` in a Prometheus text exposition, 0 if absent.
fn counter(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| rest.split_once('}'))
        .filter(|(found, _)| {
            labels.iter().all(|(key, value)| {
                found
                    .split(',')
                    .any(|pair| pair == format!("{key}=\"{value}\""))
            })
        })
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::counter;

    #[test]
    fn a_counter_is_read_by_its_labels() {
        let text = "# HELP boson_deliveries Webhook requests\n\
                    boson_deliveries_total{connection=\"c1\",outcome=\"retry\"} 7\n\
                    boson_deliveries_total{connection=\"c1\",outcome=\"delivered\"} 3\n\
                    boson_deliveries_total{connection=\"c10\",outcome=\"retry\"} 5\n";
        let retries = |c| {
            counter(
                text,
                "boson_deliveries_total",
                &[("connection", c), ("outcome", "retry")],
            )
        };
        assert_eq!(retries("c1"), 7);
        assert_eq!(retries("c10"), 5);
        assert_eq!(retries("c2"), 0);
    }
}
