//! The live page at `/` and the files it loads.
//!
//! Everything the page needs is compiled into the binary, so the page works on a machine
//! with no network and leaks nothing about the service it watches to a third party: the
//! only requests it makes are to this admin server (its assets, then `/api/snapshot` once
//! a second). The `Content-Security-Policy` sent with each file makes the browser hold the
//! page to that, whatever a future edit of the script tries.
//!
//! The charts are uPlot, vendored from the npm registry (`assets/vendor/uplot/`, with its
//! licence and where it came from); the page's own code is plain HTML, CSS and JavaScript
//! with no build step, so what is in the tree is exactly what is served.

/// One file the admin server serves as part of the page.
#[derive(Debug)]
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// Only this origin, for everything: scripts, styles, images, `fetch`. No inline script or
/// style, no frames, no forms to elsewhere.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";
const TEXT: &str = "text/plain; charset=utf-8";

/// `GET /`.
pub const INDEX: Asset = Asset {
    content_type: HTML,
    body: include_bytes!("assets/index.html"),
};

/// Every other file, by request path.
const ASSETS: &[(&str, Asset)] = &[
    (
        "/assets/app.js",
        Asset {
            content_type: JS,
            body: include_bytes!("assets/app.js"),
        },
    ),
    (
        "/assets/style.css",
        Asset {
            content_type: CSS,
            body: include_bytes!("assets/style.css"),
        },
    ),
    (
        "/assets/favicon.svg",
        Asset {
            content_type: SVG,
            body: include_bytes!("assets/favicon.svg"),
        },
    ),
    (
        "/assets/vendor/uplot/uPlot.iife.min.js",
        Asset {
            content_type: JS,
            body: include_bytes!("assets/vendor/uplot/uPlot.iife.min.js"),
        },
    ),
    (
        "/assets/vendor/uplot/uPlot.min.css",
        Asset {
            content_type: CSS,
            body: include_bytes!("assets/vendor/uplot/uPlot.min.css"),
        },
    ),
    (
        "/assets/vendor/uplot/LICENSE",
        Asset {
            content_type: TEXT,
            body: include_bytes!("assets/vendor/uplot/LICENSE"),
        },
    ),
];

/// The page file at `path`, if there is one.
pub fn asset(path: &str) -> Option<&'static Asset> {
    if path == "/" {
        return Some(&INDEX);
    }
    ASSETS
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, asset)| asset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page must name only files that are served, or it breaks silently in a browser.
    #[test]
    fn every_file_the_page_names_is_served() {
        let index = std::str::from_utf8(INDEX.body).unwrap();
        let mut named = 0;
        for part in index.split(['"', '\'']) {
            if part.starts_with("/assets/") {
                assert!(asset(part).is_some(), "{part} is named but not served");
                named += 1;
            }
        }
        assert!(named >= 4, "the page names {named} assets");
        assert!(asset("/assets/nope.js").is_none());
        assert!(asset("/assets").is_none());
    }
}
