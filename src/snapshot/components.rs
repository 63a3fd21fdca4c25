//! How readers name and group components (the `component` of a sample, a frame or a
//! function in the snapshot): the labels of the built-in rules whose names are not plain
//! words, and the groups several files of one library read in.
//!
//! The profiler's rules (`upstream::profile::rules`) give components their names; the
//! report, the SVG, the flame graphs and the findings show them. Those read a snapshot,
//! not the profiler, so the table they show from lives here, and the rules import it.

use regex::Regex;

/// How a report names the built-in components whose rule name is not already plain words:
/// a new built-in rule (`upstream::profile::rules`'s `BUILT_IN`) and its label change
/// together (a test there holds every label to a rule).
pub const LABELS: &[(&str, &str)] = &[
    ("kernel_network", "kernel network"),
    ("redis_client", "redis client (hiredis)"),
    ("event_loop", "event loop"),
    ("php_engine", "PHP engine"),
    ("http_parser", "HTTP parser"),
    ("response_head", "response head"),
    ("jit", "JIT-compiled code"),
    ("v8", "V8 (JavaScript runtime)"),
    ("jvm", "JVM"),
    ("gc", "garbage collector"),
    ("jit_compiler", "JIT compiler"),
];

/// The label a report gives component `name`: its built-in label, else the name itself
/// (the object's file name, a Composer package, a user rule's name).
pub fn component_label(name: &str) -> &str {
    LABELS
        .iter()
        .find(|(rule, _)| *rule == name)
        .map(|(_, label)| *label)
        .or_else(|| {
            NATIVE_GROUPS
                .iter()
                .find(|(group, ..)| *group == name)
                .map(|(_, label, _)| *label)
        })
        .unwrap_or(name)
}

/// Native libraries that one project ships in several files and that users name as one
/// (a TLS handshake is "OpenSSL", whether its time is in libssl or libcrypto): the group's
/// name, how a report calls it, and the file names it holds. libevent's files are one
/// component by a rule already (`event_loop`); glibc's (libc, libm, ld.so) and GCC's
/// runtime (libstdc++, libgcc_s) stay apart, as their users name them apart.
const NATIVE_GROUPS: &[(&str, &str, &str)] = &[
    ("openssl", "OpenSSL", r"^lib(ssl|crypto)\.so(\.[\d.]+)?$"),
    ("icu", "ICU", r"^libicu(uc|i18n|data|io)\.so(\.[\d.]+)?$"),
    (
        "glib",
        "GLib",
        r"^lib(glib|gobject|gio|gmodule|gthread)-2\.0\.so(\.[\d.]+)?$",
    ),
    ("boost", "Boost", r"^libboost_\w+\.so(\.[\d.]+)?$"),
];

fn native_groups() -> &'static [(&'static str, &'static str, Regex)] {
    static GROUPS: std::sync::OnceLock<Vec<(&str, &str, Regex)>> = std::sync::OnceLock::new();
    GROUPS.get_or_init(|| {
        NATIVE_GROUPS
            .iter()
            .filter_map(|&(name, label, pattern)| {
                // A constant pattern; the unit test compiles every one.
                Regex::new(pattern).ok().map(|re| (name, label, re))
            })
            .collect()
    })
}

/// The group that component `name` reads in when others of its group are sampled too,
/// or `None`. Only names that no rule gave: a Composer package (`vendor/package`, from
/// the fallback of `upstream::profile::rules`' PHP components) groups with the vendor's packages
/// of the same stem, the package's name up to its first `-` (`league/uri` and
/// `league/uri-interfaces` are `league/uri*`, the League URI library; `league/flysystem`
/// stays apart, another library of the same vendor); a native library's file name groups
/// by [`NATIVE_GROUPS`]. A rule's name (`http_parser`, a user's `json`) never has a `/`
/// and is no library's file name, so what a rule names keeps its own line.
pub fn component_group(name: &str) -> Option<String> {
    if let Some((vendor, package)) = name.split_once('/') {
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !valid(vendor) || !valid(package) {
            return None;
        }
        let stem = package.split('-').next().unwrap_or(package);
        return Some(format!("{vendor}/{stem}*"));
    }
    native_groups()
        .iter()
        .find(|(_, _, re)| re.is_match(name))
        .map(|(group, ..)| (*group).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_components_no_rule_names() {
        assert_eq!(
            NATIVE_GROUPS.len(),
            native_groups().len(),
            "a pattern failed"
        );
        // (component, its group)
        let table: &[(&str, Option<&str>)] = &[
            ("league/uri", Some("league/uri*")),
            ("league/uri-interfaces", Some("league/uri*")),
            ("league/uri-components", Some("league/uri*")),
            // Another library of the same vendor.
            ("league/flysystem", Some("league/flysystem*")),
            ("amphp/http-server", Some("amphp/http*")),
            ("amphp/byte-stream", Some("amphp/byte*")),
            ("symfony/polyfill-mbstring", Some("symfony/polyfill*")),
            ("libssl.so.3", Some("openssl")),
            ("libcrypto.so.3", Some("openssl")),
            ("libcrypto.so", Some("openssl")),
            ("libicuuc.so.72", Some("icu")),
            ("libgobject-2.0.so.0", Some("glib")),
            ("libboost_system.so.1.83.0", Some("boost")),
            // What rules name, and the libraries users name apart.
            ("http_parser", None),
            ("event_loop", None),
            ("php_builtin", None),
            ("index.php", None),
            ("libc.so.6", None),
            ("libm.so.6", None),
            ("libstdc++.so.6", None),
            ("libgcc_s.so.1", None),
            ("libssl3.so", None),
            ("webdis", None),
            ("[kernel]", None),
            ("a/b/c", None),
            ("/x", None),
        ];
        for &(name, group) in table {
            assert_eq!(component_group(name).as_deref(), group, "{name}");
        }
        assert_eq!(component_label("openssl"), "OpenSSL");
        assert_eq!(component_label("league/uri*"), "league/uri*");
    }
}
