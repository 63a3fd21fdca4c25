//! Route rules: turning a request into a bounded `route` label.
//!
//! The label space is bounded twice. A rule maps a request to a *key* (for Webdis the
//! Redis command, for `prefix` the first path segments); the first `max_routes` distinct
//! keys of a tap get their own label, every later one is `other`. Hostile random paths
//! therefore cost at most `max_routes` entries, once.
//!
//! Resolution runs once per request on every worker, so the known keys are copied into a
//! per-thread cache: a hit is a hash of a few bytes with no lock and no shared write. The
//! shared table is locked only to learn a key the thread has not seen yet, which stops for
//! good once the table is full and the thread's cache holds all of it. In front of that,
//! each thread remembers the last request it resolved and its route: a repeated target
//! skips the key and its hash altogether.
//!
//! The relay resolves a request's route from its head, before anything is recorded; the
//! metrics name their series with [`RouteTable::name`]; config validates a tap's rules by
//! building its table. So it imports none of the three: a tap's settings reach it as a
//! [`RouteSpec`]. docs/metrics.md ("Routes") is the contract of every rule.

pub mod webdis;

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, OnceLock};

use anyhow::{bail, ensure, Context};
use serde::Deserialize;
use thread_local::ThreadLocal;

use crate::recorder::RouteId;
use crate::sync::lock;

/// The label of requests past `max_routes`, or that no rule matched.
pub const OTHER: &str = "other";
/// The single label of the `none` rule.
pub const ALL: &str = "all";
/// Webdis: a request for `/` (or an empty command segment).
pub const ROOT: &str = "root";
/// Webdis: a `POST`, whose command is in the body, which the proxy does not read.
pub const POST_BODY: &str = "post_body";
/// Requests `phasescope probe` sent (they carry its marker field), kept apart from the
/// traffic whose statistics the probe reads.
pub const PROBE: &str = "probe";

/// Longest key given its own label; a longer one is `other`. No Redis command comes close,
/// and a label this long is already unreadable on a dashboard.
pub const MAX_KEY_BYTES: usize = 128;
/// Route ids are 16 bits and id 0 is the fallback.
pub const MAX_ROUTES_LIMIT: usize = u16::MAX as usize - 1;

/// How a request becomes a bounded `route` label: a tap's `routes` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RouteRule {
    /// First path segment, upper-cased, extension stripped: the Redis command Webdis runs.
    Webdis,
    /// The first `route_segments` path segments.
    Prefix,
    /// Named regular expressions (`[[tap.route]]`), first match wins.
    Regex,
    /// One route for everything.
    #[default]
    None,
}

/// One named rule of the `regex` route rule: `[[tap.route]] name = "users" pattern = "^/u/"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegexRoute {
    /// The `route` label of requests whose path matches.
    pub name: String,
    /// A regular expression (Rust `regex` syntax) searched in the request path, query
    /// string excluded. Unanchored unless it says `^`/`$`.
    pub pattern: String,
}

/// What a route table is built from: a tap's route settings (`config::TapConfig` gives
/// them, see its `From` impl).
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec<'a> {
    /// The tap's name, for errors.
    pub tap: &'a str,
    /// RESP taps label by command name, whatever `rule` says.
    pub by_command: bool,
    pub rule: RouteRule,
    /// Path segments kept by the `prefix` rule.
    pub segments: usize,
    /// Distinct labels at most; later keys are `other`.
    pub max_routes: usize,
    /// The named rules of the `regex` rule (ignored by the other rules).
    pub rules: &'a [RegexRoute],
}

enum Rule {
    None,
    Webdis,
    Prefix(usize),
    /// The compiled patterns with the label id each one yields, in config order.
    Regex(Vec<(regex::bytes::Regex, RouteId)>),
    /// RESP taps: the command name (the `method` the relay passes), upper-cased.
    Command,
}

/// Resolves request targets to route ids. Shared by all connections of a tap.
pub struct RouteTable {
    rule: Rule,
    max_routes: usize,
    /// Label of each id; slot 0 is the fallback. Written once per id, read lock-free.
    names: Box<[OnceLock<Box<str>>]>,
    shared: Mutex<HashMap<Box<[u8]>, RouteId, Fnv>>,
    local: ThreadLocal<RefCell<LocalCache>>,
}

#[derive(Default)]
struct LocalCache {
    ids: HashMap<Box<[u8]>, RouteId, Fnv>,
    /// The shared table is full and every key in it is in `ids`: a miss is `other`.
    complete: bool,
    last: LastRequest,
}

/// Method and target bytes a [`LastRequest`] holds at most; a longer request is not kept.
const LAST_REQUEST_BYTES: usize = 96;

/// The last request a thread resolved on a table, and its route. Clients that repeat one
/// target (a poll, a health check, a load generator, the same Webdis command on one key)
/// get it back for two comparisons, without working out and hashing the key again. It
/// cannot go stale: the route of a request depends on its method, its target and the
/// table alone, and the table's answer for a key never changes (a label, once given, is
/// kept; a key refused is refused for good, and a full table stays full).
struct LastRequest {
    /// `method` then `target`; `method_len` 0 and `target_len` 0 when empty (no request
    /// has an empty method, so an empty memo matches nothing).
    bytes: [u8; LAST_REQUEST_BYTES],
    method_len: u8,
    target_len: u8,
    route: RouteId,
}

impl Default for LastRequest {
    fn default() -> Self {
        Self {
            bytes: [0; LAST_REQUEST_BYTES],
            method_len: 0,
            target_len: 0,
            route: RouteId(0),
        }
    }
}

impl LastRequest {
    #[inline]
    fn get(&self, method: &[u8], target: &[u8]) -> Option<RouteId> {
        let (m, t) = (usize::from(self.method_len), usize::from(self.target_len));
        (m != 0
            && m == method.len()
            && t == target.len()
            && self.bytes[..m] == *method
            && self.bytes[m..m + t] == *target)
            .then_some(self.route)
    }

    fn set(&mut self, method: &[u8], target: &[u8], route: RouteId) {
        let (m, t) = (method.len(), target.len());
        if m == 0 || m + t > LAST_REQUEST_BYTES {
            return;
        }
        self.bytes[..m].copy_from_slice(method);
        self.bytes[m..m + t].copy_from_slice(target);
        // Both at most LAST_REQUEST_BYTES, checked above.
        self.method_len = m as u8;
        self.target_len = t as u8;
        self.route = route;
    }
}

impl RouteTable {
    /// The route table of a tap (a `&TapConfig` will do). RESP taps always label by
    /// command name.
    pub fn new<'a>(spec: impl Into<RouteSpec<'a>>) -> anyhow::Result<Self> {
        let spec = spec.into();
        ensure!(
            spec.max_routes <= MAX_ROUTES_LIMIT,
            "tap {:?}: max_routes = {} is more than the {MAX_ROUTES_LIMIT} route ids there are",
            spec.tap,
            spec.max_routes
        );
        let (rule, labels): (Rule, Vec<String>) = match (spec.by_command, spec.rule) {
            (true, _) => (Rule::Command, vec![OTHER.into()]),
            (false, RouteRule::None) => (Rule::None, vec![ALL.into()]),
            (false, RouteRule::Webdis) => (Rule::Webdis, vec![OTHER.into()]),
            (false, RouteRule::Prefix) => (Rule::Prefix(spec.segments), vec![OTHER.into()]),
            (false, RouteRule::Regex) => compile_rules(spec.tap, spec.rules)?,
        };
        let slots = match rule {
            Rule::Webdis | Rule::Prefix(_) | Rule::Command => spec.max_routes + 1,
            Rule::None | Rule::Regex(_) => labels.len(),
        };
        // One more, last: the probe's route.
        let names: Box<[OnceLock<Box<str>>]> = (0..=slots).map(|_| OnceLock::new()).collect();
        for (slot, label) in names.iter().zip(labels) {
            let _ = slot.set(label.into_boxed_str());
        }
        let _ = names[slots].set(PROBE.into());
        Ok(Self {
            rule,
            max_routes: spec.max_routes,
            names,
            shared: Mutex::new(HashMap::default()),
            local: ThreadLocal::new(),
        })
    }

    /// The route of a request. Called once per request with the head in the read buffer;
    /// allocates nothing once the route is known to the calling thread.
    pub fn resolve(&self, method: &[u8], target: &[u8]) -> RouteId {
        if let Rule::None = self.rule {
            return RouteId(0);
        }
        let cell = self.local();
        let last = cell.borrow().last.get(method, target);
        if let Some(route) = last {
            return route;
        }
        let route = self.resolve_key(method, target);
        cell.borrow_mut().last.set(method, target, route);
        route
    }

    fn local(&self) -> &RefCell<LocalCache> {
        self.local.get_or(|| RefCell::new(LocalCache::default()))
    }

    /// [`RouteTable::resolve`] without the memo of the thread's last request.
    fn resolve_key(&self, method: &[u8], target: &[u8]) -> RouteId {
        let mut buf = [0u8; MAX_KEY_BYTES];
        let key = match &self.rule {
            Rule::None => return RouteId(0),
            Rule::Regex(rules) => {
                let Some(path) = origin_path(target) else {
                    return RouteId(0);
                };
                return rules
                    .iter()
                    .find(|(re, _)| re.is_match(path))
                    .map_or(RouteId(0), |&(_, id)| id);
            }
            Rule::Webdis => origin_path(target).and_then(|p| webdis_key(method, p, &mut buf)),
            Rule::Prefix(n) => origin_path(target).map(|p| prefix_key(p, *n)),
            Rule::Command => command_key(method).and_then(|k| upper_case(k, &mut buf)),
        };
        key.map_or(RouteId(0), |k| self.intern(k))
    }

    /// The route of a RESP command, by name (`GET`, `hset`; `other` for a name the
    /// framer does not know). The same label a Webdis tap gives `/GET/…`, so the two taps'
    /// series line up.
    pub fn resolve_command(&self, name: &str) -> RouteId {
        match self.rule {
            Rule::Command | Rule::Webdis => {
                command_key(name.as_bytes()).map_or(RouteId(0), |k| self.intern_upper(k))
            }
            Rule::None | Rule::Prefix(_) | Rule::Regex(_) => RouteId(0),
        }
    }

    fn intern_upper(&self, key: &[u8]) -> RouteId {
        let mut buf = [0u8; MAX_KEY_BYTES];
        upper_case(key, &mut buf).map_or(RouteId(0), |k| self.intern(k))
    }

    /// The route of requests `phasescope probe` sent (label `probe`).
    pub fn probe(&self) -> RouteId {
        // At most MAX_ROUTES_LIMIT + 1 slots, so the last index fits.
        RouteId((self.names.len() - 1) as u16)
    }

    /// The label value of a route id (the fallback label for an id this table never gave).
    pub fn name(&self, id: RouteId) -> &str {
        self.names
            .get(usize::from(id.0))
            .and_then(OnceLock::get)
            .or_else(|| self.names.first().and_then(OnceLock::get))
            .map_or(OTHER, |s| s)
    }

    /// How many ids this table can hand out, fallback included: every id it returns is
    /// below this.
    pub fn capacity(&self) -> usize {
        self.names.len()
    }

    /// How many labels exist so far, fallback included.
    pub fn len(&self) -> usize {
        match self.rule {
            Rule::Webdis | Rule::Prefix(_) | Rule::Command => 1 + lock(&self.shared).len(),
            // The probe's slot is not counted until a probe request used it: see probe().
            Rule::None | Rule::Regex(_) => self.names.len() - 1,
        }
    }

    /// Never true: the fallback label always exists.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn intern(&self, key: &[u8]) -> RouteId {
        // A path segment `probe` (prefix rule) would repeat the probe's label: fallback.
        if key.is_empty()
            || key.len() > MAX_KEY_BYTES
            || !key.iter().all(|b| (0x21..=0x7e).contains(b))
            || key == PROBE.as_bytes()
        {
            return RouteId(0);
        }
        let mut cache = self.local().borrow_mut();
        if let Some(&id) = cache.ids.get(key) {
            return id;
        }
        if cache.complete {
            return RouteId(0);
        }
        let mut shared = lock(&self.shared);
        let id = match shared.get(key) {
            Some(&id) => id,
            None if shared.len() < self.max_routes => {
                let index = shared.len() + 1;
                // The key is printable ASCII, checked above.
                let label = String::from_utf8_lossy(key).into_owned().into_boxed_str();
                if let Some(slot) = self.names.get(index) {
                    let _ = slot.set(label);
                }
                // index ≤ max_routes ≤ MAX_ROUTES_LIMIT, so it fits in 16 bits.
                let id = RouteId(index as u16);
                shared.insert(key.into(), id);
                id
            }
            None => RouteId(0),
        };
        if id != RouteId(0) {
            cache.ids.insert(key.into(), id);
        }
        if shared.len() >= self.max_routes {
            for (k, &v) in shared.iter() {
                if !cache.ids.contains_key(k) {
                    cache.ids.insert(k.clone(), v);
                }
            }
            cache.complete = true;
        }
        id
    }
}

impl fmt::Debug for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = match &self.rule {
            Rule::None => "none".to_owned(),
            Rule::Webdis => "webdis".to_owned(),
            Rule::Prefix(n) => format!("prefix({n})"),
            Rule::Regex(r) => format!("regex({} rules)", r.len()),
            Rule::Command => "command".to_owned(),
        };
        f.debug_struct("RouteTable")
            .field("rule", &rule)
            .field("max_routes", &self.max_routes)
            .field("labels", &self.len())
            .finish()
    }
}

fn compile_rules(tap: &str, rules: &[RegexRoute]) -> anyhow::Result<(Rule, Vec<String>)> {
    if rules.is_empty() {
        bail!("tap {tap:?}: routes = \"regex\" needs at least one [[tap.route]] name/pattern rule");
    }
    ensure!(
        rules.len() <= MAX_ROUTES_LIMIT,
        "tap {tap:?}: {} route rules is more than the {MAX_ROUTES_LIMIT} route ids there are",
        rules.len()
    );
    // Several rules may share a name (one label); a rule named `other` is the fallback.
    let mut labels = vec![OTHER.to_owned()];
    let mut compiled = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        ensure!(
            !r.name.is_empty(),
            "tap {tap:?}: route rule {i} has an empty name"
        );
        ensure!(
            r.name != PROBE,
            "tap {tap:?}: route rule {i}: the name {PROBE:?} is reserved for the requests of phasescope probe"
        );
        let re = regex::bytes::Regex::new(&r.pattern).with_context(|| {
            format!(
                "tap {tap:?}: route {:?}: pattern {:?} is not a valid regular expression",
                r.name, r.pattern
            )
        })?;
        let index = match labels.iter().position(|l| *l == r.name) {
            Some(index) => index,
            None => {
                labels.push(r.name.clone());
                labels.len() - 1
            }
        };
        compiled.push((re, RouteId(index as u16)));
    }
    Ok((Rule::Regex(compiled), labels))
}

/// The path of an origin-form or absolute-form target, query and fragment cut off. `None`
/// for authority-form (`CONNECT host:port`) and asterisk-form (`OPTIONS *`), which have no
/// path to label.
fn origin_path(target: &[u8]) -> Option<&[u8]> {
    let end = memchr::memchr2(b'?', b'#', target).unwrap_or(target.len());
    let t = &target[..end];
    if t.first() == Some(&b'/') {
        return Some(t);
    }
    let authority = memchr::memmem::find(t, b"://")? + 3;
    let rest = &t[authority..];
    Some(memchr::memchr(b'/', rest).map_or(b"/".as_slice(), |p| &rest[p..]))
}

/// The Redis command Webdis runs for a request ([`webdis::command`]), upper-cased (Redis
/// commands are case-insensitive); `root` when it names none.
fn webdis_key<'a>(
    method: &[u8],
    path: &[u8],
    buf: &'a mut [u8; MAX_KEY_BYTES],
) -> Option<&'a [u8]> {
    if method == b"POST" {
        return Some(POST_BODY.as_bytes());
    }
    let p = path.strip_prefix(b"/").unwrap_or(path);
    match webdis::command(p) {
        Some(command) => upper_case(command.name, buf),
        None => Some(ROOT.as_bytes()),
    }
}

/// A command name as a key; `other` (what the RESP framer says for a name it does not
/// know) is the fallback, not a command called OTHER.
fn command_key(name: &[u8]) -> Option<&[u8]> {
    (!name.eq_ignore_ascii_case(OTHER.as_bytes())).then_some(name)
}

/// The path cut before its (n+1)-th slash: `/api/v1/users/7` with n = 2 is `/api/v1`.
fn prefix_key(path: &[u8], n: usize) -> &[u8] {
    let mut slashes = 0;
    for (i, &b) in path.iter().enumerate() {
        if b == b'/' {
            slashes += 1;
            if slashes > n {
                return if i == 0 { b"/" } else { &path[..i] };
            }
        }
    }
    path
}

fn upper_case<'a>(s: &[u8], buf: &'a mut [u8; MAX_KEY_BYTES]) -> Option<&'a [u8]> {
    let out = buf.get_mut(..s.len())?;
    out.copy_from_slice(s);
    out.make_ascii_uppercase();
    Some(out)
}

/// FNV-1a. The maps hold at most `max_routes` keys, all admitted by the table, so a
/// flooding attacker cannot build long collision chains; a fast hash of a short key is
/// what matters here.
#[derive(Clone, Copy)]
struct FnvHasher(u64);

impl Default for FnvHasher {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for FnvHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type Fnv = BuildHasherDefault<FnvHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, PartialEq)]
    enum Protocol {
        Http,
        Resp,
    }

    fn tap(protocol: Protocol, rule: RouteRule) -> RouteSpec<'static> {
        RouteSpec {
            tap: "t",
            by_command: protocol == Protocol::Resp,
            rule,
            segments: 1,
            max_routes: 64,
            rules: &[],
        }
    }

    fn label(table: &RouteTable, method: &str, target: &str) -> String {
        table
            .name(table.resolve(method.as_bytes(), target.as_bytes()))
            .to_owned()
    }

    #[test]
    fn webdis_rule_names_the_redis_command() {
        let t = RouteTable::new(tap(Protocol::Http, RouteRule::Webdis)).unwrap();
        let cases = [
            ("GET", "/GET/key", "GET"),
            ("GET", "/get/key?x=1", "GET"),
            ("GET", "/PING", "PING"),
            ("GET", "/ping.json", "PING"),
            ("GET", "/PING.raw", "PING"),
            // Unknown extensions are part of the command, as in Webdis.
            ("GET", "/PING.foo", "PING.FOO"),
            // Extensions belong to the last segment only.
            ("GET", "/JSON.GET/key.json", "JSON.GET"),
            ("GET", "/7/GET/key", "GET"),
            ("GET", "/0/PING.txt", "PING"),
            // A lone number is a command, not a database.
            ("GET", "/7", "7"),
            ("GET", "/", ROOT),
            ("GET", "/.json", ROOT),
            ("GET", "/7/", ROOT),
            ("POST", "/", POST_BODY),
            ("POST", "/SET/x", POST_BODY),
            ("PUT", "/SET/key", "SET"),
            ("GET", "http://example.test:7379/INCR/n", "INCR"),
            ("GET", "http://example.test", ROOT),
            // Webdis does not decode the command segment, so neither does the label.
            ("GET", "/%50ING", "%50ING"),
            ("CONNECT", "example.test:443", OTHER),
            ("OPTIONS", "*", OTHER),
        ];
        for (method, target, want) in cases {
            assert_eq!(label(&t, method, target), want, "{method} {target}");
        }
    }

    #[test]
    fn prefix_rule_keeps_the_first_segments() {
        let mut cfg = tap(Protocol::Http, RouteRule::Prefix);
        cfg.segments = 2;
        let t = RouteTable::new(cfg).unwrap();
        assert_eq!(label(&t, "GET", "/api/v1/users/7?q=1"), "/api/v1");
        assert_eq!(label(&t, "GET", "/api"), "/api");
        assert_eq!(label(&t, "GET", "/api/"), "/api/");
        assert_eq!(label(&t, "GET", "/"), "/");
        cfg.segments = 0;
        let t = RouteTable::new(cfg).unwrap();
        assert_eq!(label(&t, "GET", "/api/v1"), "/");
    }

    #[test]
    fn regex_rule_takes_the_first_match_and_shares_names() {
        let cfg = tap(Protocol::Http, RouteRule::Regex);
        let rules = [
            RegexRoute {
                name: "user".into(),
                pattern: r"^/users/\d+$".into(),
            },
            RegexRoute {
                name: "users".into(),
                pattern: r"^/users".into(),
            },
            RegexRoute {
                name: "user".into(),
                pattern: r"^/u/\d+$".into(),
            },
            RegexRoute {
                name: "other".into(),
                pattern: r"^/junk".into(),
            },
        ];
        let t = RouteTable::new(RouteSpec {
            rules: &rules,
            ..cfg
        })
        .unwrap();
        assert_eq!(label(&t, "GET", "/users/42"), "user");
        assert_eq!(label(&t, "GET", "/u/42?x"), "user");
        assert_eq!(label(&t, "GET", "/users/42/posts"), "users");
        assert_eq!(label(&t, "GET", "/junk"), OTHER);
        assert_eq!(label(&t, "GET", "/nothing"), OTHER);
        assert_eq!(
            t.resolve(b"GET", b"/users/1"),
            t.resolve(b"GET", b"/u/1"),
            "one name, one id"
        );
        assert_eq!(t.len(), 3);

        let err = RouteTable::new(cfg).unwrap_err().to_string();
        assert!(err.contains("[[tap.route]]"), "{err}");
        let bad = [RegexRoute {
            name: "x".into(),
            pattern: "(".into(),
        }];
        let err = format!(
            "{:#}",
            RouteTable::new(RouteSpec { rules: &bad, ..cfg }).unwrap_err()
        );
        assert!(err.contains("not a valid regular expression"), "{err}");
    }

    #[test]
    fn the_probe_has_a_route_of_its_own_under_every_rule() {
        for (protocol, rule) in [
            (Protocol::Http, RouteRule::None),
            (Protocol::Http, RouteRule::Webdis),
            (Protocol::Http, RouteRule::Prefix),
            (Protocol::Resp, RouteRule::None),
        ] {
            let t = RouteTable::new(tap(protocol, rule)).unwrap();
            let id = t.probe();
            assert_eq!(t.name(id), PROBE);
            assert!(usize::from(id.0) < t.capacity());
            assert_ne!(id, t.resolve(b"GET", b"/PING"));
            assert_ne!(
                id,
                t.resolve(b"GET", b"/probe/x"),
                "a path is never the probe"
            );
            assert_ne!(t.name(t.resolve(b"GET", b"/probe/x")), PROBE);
        }
        let rules = [RegexRoute {
            name: PROBE.into(),
            pattern: "^/p".into(),
        }];
        let cfg = RouteSpec {
            rules: &rules,
            ..tap(Protocol::Http, RouteRule::Regex)
        };
        let e = RouteTable::new(cfg)
            .expect_err("probe is reserved")
            .to_string();
        assert!(e.contains("reserved"), "{e}");
    }

    #[test]
    fn none_rule_has_one_route() {
        let t = RouteTable::new(tap(Protocol::Http, RouteRule::None)).unwrap();
        assert_eq!(label(&t, "GET", "/a"), ALL);
        assert_eq!(label(&t, "POST", "/b/c"), ALL);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn resp_taps_label_by_command() {
        let t = RouteTable::new(tap(Protocol::Resp, RouteRule::None)).unwrap();
        assert_eq!(label(&t, "get", ""), "GET");
        assert_eq!(label(&t, "HSET", ""), "HSET");
        assert_eq!(label(&t, "other", ""), OTHER);
        assert_eq!(t.resolve_command("hset"), t.resolve(b"HSET", b""));
        assert_eq!(t.resolve_command("other"), RouteId(0));
        assert_eq!(t.len(), 3);

        // A Webdis tap gives a command the same label as the URL that runs it.
        let w = RouteTable::new(tap(Protocol::Http, RouteRule::Webdis)).unwrap();
        assert_eq!(w.name(w.resolve_command("get")), label(&w, "GET", "/GET/k"));
        let none = RouteTable::new(tap(Protocol::Http, RouteRule::None)).unwrap();
        assert_eq!(none.resolve_command("GET"), RouteId(0));
    }

    #[test]
    fn labels_stop_at_max_routes_and_ids_stay_stable() {
        let mut cfg = tap(Protocol::Http, RouteRule::Webdis);
        cfg.max_routes = 3;
        let t = RouteTable::new(cfg).unwrap();
        let a = t.resolve(b"GET", b"/A");
        let ids: Vec<_> = ["/B", "/C", "/D", "/E"]
            .iter()
            .map(|p| t.resolve(b"GET", p.as_bytes()))
            .collect();
        assert_ne!(a, RouteId(0));
        assert_ne!(ids[0], RouteId(0));
        assert_ne!(ids[1], RouteId(0));
        assert_eq!(ids[2], RouteId(0), "past max_routes");
        assert_eq!(ids[3], RouteId(0));
        assert_eq!(t.resolve(b"GET", b"/a/x"), a, "known keys keep their id");
        assert_eq!(t.len(), 4);
        assert!(usize::from(a.0) < t.capacity());

        // Another thread learns the full table and agrees on every id.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(t.resolve(b"GET", b"/Z"), RouteId(0));
                assert_eq!(t.resolve(b"GET", b"/A"), a);
                assert_eq!(t.resolve(b"GET", b"/C"), ids[1]);
            });
        });

        cfg.max_routes = 0;
        let t = RouteTable::new(cfg).unwrap();
        assert_eq!(label(&t, "GET", "/A"), OTHER);
        cfg.max_routes = MAX_ROUTES_LIMIT + 1;
        assert!(RouteTable::new(cfg).is_err());
    }

    /// The memo of the last request gives every request the route the table would give it
    /// without the memo, under every rule: repeated, alternating and long targets, POST
    /// after GET on one target, and a table filling up halfway.
    #[test]
    fn the_last_request_memo_changes_no_route() {
        let rules = [RegexRoute {
            name: "g".into(),
            pattern: "^/G".into(),
        }];
        let long = format!("/GET/{}", "k".repeat(LAST_REQUEST_BYTES));
        let requests: Vec<(&[u8], &[u8])> = vec![
            (b"GET", b"/"),
            (b"GET", b"/"),
            (b"POST", b"/"),
            (b"GET", b"/"),
            (b"GET", b"/GET/a"),
            (b"GET", b"/GET/a"),
            (b"GET", b"/SET/a"),
            (b"GET", b"/GET/a?x"),
            (b"PUT", b"/GET/a"),
            (b"GET", long.as_bytes()),
            (b"GET", long.as_bytes()),
            (b"GET", b"/HGET/x"),
            (b"GET", b"/INCR/x"),
            (b"GET", b"/INCR/x"),
            (b"GET", b"/DEL/x"),
            (b"GET", b"/GET/a"),
            (b"get", b"/a"),
            (b"GET", b""),
            (b"GET", b"*"),
            (b"GET", b"*"),
        ];
        for (by_command, rule) in [
            (false, RouteRule::Webdis),
            (false, RouteRule::Prefix),
            (false, RouteRule::Regex),
            (true, RouteRule::None),
        ] {
            let spec = RouteSpec {
                by_command,
                rules: &rules,
                max_routes: 4,
                ..tap(Protocol::Http, rule)
            };
            let (memo, plain) = (
                RouteTable::new(spec).unwrap(),
                RouteTable::new(spec).unwrap(),
            );
            for _ in 0..2 {
                for &(method, target) in &requests {
                    let (a, b) = (
                        memo.resolve(method, target),
                        plain.resolve_key(method, target),
                    );
                    assert_eq!(
                        memo.name(a),
                        plain.name(b),
                        "{rule:?} {method:?} {target:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn unprintable_or_long_keys_are_other() {
        let t = RouteTable::new(tap(Protocol::Http, RouteRule::Webdis)).unwrap();
        let long = format!("/{}", "A".repeat(MAX_KEY_BYTES + 1));
        assert_eq!(label(&t, "GET", &long), OTHER);
        assert_eq!(
            t.name(t.resolve(b"GET", b"/G\xc3\xa9T")),
            OTHER,
            "non-ASCII bytes"
        );
        assert_eq!(t.len(), 1, "nothing was interned");
        assert_eq!(t.name(RouteId(999)), OTHER);
    }
}
