//! The page at `/`. A placeholder until the live view exists: it only points at the
//! endpoints. Self-contained, like the live page will be (no network fetches).

pub const INDEX: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>phasescope</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:2em auto;padding:0 1em}</style>
</head>
<body>
<h1>phasescope</h1>
<p>Where the time of each request goes, phase by phase.</p>
<ul>
<li><a href="/metrics">/metrics</a>: Prometheus exposition</li>
<li><a href="/api/snapshot">/api/snapshot</a>: exact percentiles per tap, phase and route (JSON)</li>
<li><a href="/healthz">/healthz</a></li>
</ul>
<p><code>POST /api/reset</code> empties the snapshot histograms.</p>
</body>
</html>
"#;
