//! The answer of Prometheus's HTTP API (`/api/v1/query`): its envelope (a status, an
//! error, `data.result`), read once for the classic buckets' queries and the native
//! histograms' alike.

use anyhow::{bail, ensure, Context};
use serde::Deserialize;

/// The envelope of every `/api/v1` answer: a status, an error, and `data.result`.
#[derive(Deserialize)]
struct Answer<T> {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default = "Option::default")]
    data: Option<Data<T>>,
}

#[derive(Deserialize)]
struct Data<T> {
    #[serde(rename = "resultType", default)]
    result_type: String,
    result: Vec<T>,
}

/// The results of a successful answer, refusing another `resultType` than `kind`
/// (`vector`, `matrix`) when one is given.
pub fn results<T: serde::de::DeserializeOwned>(
    body: &[u8],
    kind: Option<&str>,
) -> anyhow::Result<Vec<T>> {
    let answer: Answer<T> = serde_json::from_slice(body).context("not a Prometheus API answer")?;
    if answer.status != "success" {
        bail!(
            "Prometheus answered {}: {}",
            answer.status,
            answer.error.unwrap_or_default()
        );
    }
    let data = answer.data.context("the answer has no data")?;
    if let Some(kind) = kind {
        ensure!(
            data.result_type == kind,
            "expected a {kind}, got a {}",
            data.result_type
        );
    }
    Ok(data.result)
}
