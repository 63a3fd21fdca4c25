//! The bounded `method` and `status_class` labels of `phasescope_requests_total`.
//!
//! Both come straight off the wire, so each is folded into a small fixed set: a client
//! sending made-up methods or a server answering 799 must not create new series.

use crate::config::Protocol;

/// `method` label values. The index of a value is what the per-thread counters store.
pub const METHODS: [&str; 11] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "other", "resp",
];

const OTHER_METHOD: usize = 9;
/// The label of the one protocol without methods (`Protocol::has_methods`), its name:
/// RESP, whose command is the `route`. A unit test checks every protocol without methods
/// finds its own name here.
const RESP_METHOD: usize = 10;

/// `status_class` label values.
pub const STATUS_CLASSES: [&str; 7] = ["none", "1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// The `method` label index of a request.
#[inline]
pub fn method_index(protocol: Protocol, method: &str) -> usize {
    if !protocol.has_methods() {
        return RESP_METHOD;
    }
    // Methods are case-sensitive (RFC 9110 §9.1): `get` is not `GET`.
    match method {
        "GET" => 0,
        "HEAD" => 1,
        "POST" => 2,
        "PUT" => 3,
        "DELETE" => 4,
        "CONNECT" => 5,
        "OPTIONS" => 6,
        "TRACE" => 7,
        "PATCH" => 8,
        _ => OTHER_METHOD,
    }
}

/// The `status_class` label index of a final status; 0 ("none") means no response came.
#[inline]
pub fn status_class_index(status: u16) -> usize {
    match status {
        0 => 0,
        100..=599 => usize::from(status / 100),
        _ => 6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_fold_into_a_bounded_set() {
        assert_eq!(METHODS[method_index(Protocol::Http, "GET")], "GET");
        assert_eq!(METHODS[method_index(Protocol::Http, "PATCH")], "PATCH");
        assert_eq!(METHODS[method_index(Protocol::Http, "get")], "other");
        assert_eq!(METHODS[method_index(Protocol::Http, "PROPFIND")], "other");
        assert_eq!(METHODS[method_index(Protocol::Resp, "GET")], "resp");
    }

    /// A new protocol without methods needs its own label: this fails until `METHODS`
    /// has its name and `method_index` returns it.
    #[test]
    fn a_protocol_without_methods_is_labelled_with_its_name() {
        for p in Protocol::ALL.into_iter().filter(|p| !p.has_methods()) {
            assert_eq!(METHODS[method_index(p, "GET")], p.as_str());
        }
    }

    #[test]
    fn statuses_fold_into_classes() {
        let class = |s| STATUS_CLASSES[status_class_index(s)];
        assert_eq!(class(0), "none");
        assert_eq!(class(101), "1xx");
        assert_eq!(class(200), "2xx");
        assert_eq!(class(304), "3xx");
        assert_eq!(class(404), "4xx");
        assert_eq!(class(599), "5xx");
        assert_eq!(class(99), "other");
        assert_eq!(class(600), "other");
    }
}
