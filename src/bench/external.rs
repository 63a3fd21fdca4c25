//! `--load CMD`: an external load generator (wrk, ab, anything) instead of the built-in
//! one, for whoever trusts their own tool. `{url}`, `{duration}` (whole seconds) and
//! `{connections}` are filled in; the command runs under `sh -c` with a deadline.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;

/// Time the command may take beyond the run's duration before it is killed.
const SLACK: Duration = Duration::from_secs(30);

/// The command line with its placeholders filled in.
pub fn fill(template: &str, url: &str, duration: Duration, connections: usize) -> String {
    template
        .replace("{url}", url)
        .replace("{duration}", &duration.as_secs().max(1).to_string())
        .replace("{connections}", &connections.to_string())
}

/// Runs `command` to completion; its output is shown only when it fails.
pub async fn run(command: &str, duration: Duration) -> anyhow::Result<()> {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting `{command}`"))?;
    let out = tokio::time::timeout(duration + SLACK, child.wait_with_output())
        .await
        .with_context(|| format!("`{command}` ran past {:?}", duration + SLACK))?
        .with_context(|| format!("running `{command}`"))?;
    if !out.status.success() {
        anyhow::bail!(
            "`{command}` failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled() {
        assert_eq!(
            fill(
                "wrk -c{connections} -d{duration}s {url}",
                "http://h:1/PING",
                Duration::from_millis(5500),
                50
            ),
            "wrk -c50 -d5s http://h:1/PING"
        );
    }
}
