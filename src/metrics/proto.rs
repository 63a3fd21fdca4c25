//! The protobuf exposition's messages: the subset of `io.prometheus.client` (vendored in
//! proto/io/prometheus/client/metrics.proto) that phasescope sends, with the same field
//! numbers and wire types. prost derives the encoding; `prost-build` would generate the
//! same structs but needs `protoc` on every machine that builds.
//!
//! The prometheus crate's own `proto` types predate native histograms (no schema, spans
//! or deltas), which is why these exist.

// proto2 `repeated` scalars are unpacked unless the .proto says otherwise; Prometheus reads
// both, but the encoding follows the file.

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
    Summary = 2,
    Untyped = 3,
    Histogram = 4,
    GaugeHistogram = 5,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Counter {
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(uint64, optional, tag = "1")]
    pub sample_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub sample_sum: Option<f64>,
    /// The classic buckets, cumulative, in increasing order of upper bound.
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    /// Native: each power of two is divided into 2^schema buckets.
    #[prost(sint32, optional, tag = "5")]
    pub schema: Option<i32>,
    /// Native: observations in [-zero_threshold, zero_threshold] count in the zero bucket.
    #[prost(double, optional, tag = "6")]
    pub zero_threshold: Option<f64>,
    #[prost(uint64, optional, tag = "7")]
    pub zero_count: Option<u64>,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Each bucket's count minus the previous bucket's (0 before the first).
    #[prost(sint64, repeated, packed = "false", tag = "13")]
    pub positive_delta: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    #[prost(uint64, optional, tag = "1")]
    pub cumulative_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub upper_bound: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    /// Gap to the previous span, or the index of the first bucket for the first span.
    #[prost(sint32, optional, tag = "1")]
    pub offset: Option<i32>,
    #[prost(uint32, optional, tag = "2")]
    pub length: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub help: Option<String>,
    #[prost(enumeration = "MetricType", optional, tag = "3")]
    pub r#type: Option<i32>,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The vendored .proto and these structs must agree on every field sent: a renumbered
    /// or retyped field would be read as another by Prometheus, silently.
    #[test]
    fn field_numbers_and_types_match_the_vendored_proto() {
        let proto = include_str!("../../proto/io/prometheus/client/metrics.proto");
        let declared = |message: &str, field: &str| -> String {
            let body = proto
                .split(&format!("message {message} {{"))
                .nth(1)
                .unwrap_or_else(|| panic!("message {message} in metrics.proto"));
            let body = &body[..body.find("\n}").unwrap()];
            let line = body
                .lines()
                .find(|l| {
                    l.split_whitespace()
                        .nth(2)
                        .is_some_and(|name| name == field)
                })
                .unwrap_or_else(|| panic!("{message}.{field} in metrics.proto"));
            let words: Vec<_> = line.split_whitespace().collect();
            format!(
                "{} {} {}",
                words[0],
                words[1],
                words[4].trim_end_matches(';')
            )
        };
        for (message, field, want) in [
            ("LabelPair", "name", "optional string 1"),
            ("LabelPair", "value", "optional string 2"),
            ("Gauge", "value", "optional double 1"),
            ("Counter", "value", "optional double 1"),
            ("Histogram", "sample_count", "optional uint64 1"),
            ("Histogram", "sample_sum", "optional double 2"),
            ("Histogram", "bucket", "repeated Bucket 3"),
            ("Histogram", "schema", "optional sint32 5"),
            ("Histogram", "zero_threshold", "optional double 6"),
            ("Histogram", "zero_count", "optional uint64 7"),
            ("Histogram", "positive_span", "repeated BucketSpan 12"),
            ("Histogram", "positive_delta", "repeated sint64 13"),
            ("Bucket", "cumulative_count", "optional uint64 1"),
            ("Bucket", "upper_bound", "optional double 2"),
            ("BucketSpan", "offset", "optional sint32 1"),
            ("BucketSpan", "length", "optional uint32 2"),
            ("Metric", "label", "repeated LabelPair 1"),
            ("Metric", "gauge", "optional Gauge 2"),
            ("Metric", "counter", "optional Counter 3"),
            ("Metric", "histogram", "optional Histogram 7"),
            ("MetricFamily", "name", "optional string 1"),
            ("MetricFamily", "help", "optional string 2"),
            ("MetricFamily", "type", "optional MetricType 3"),
            ("MetricFamily", "metric", "repeated Metric 4"),
        ] {
            assert_eq!(declared(message, field), want, "{message}.{field}");
        }
        for (name, value) in [("COUNTER", 0), ("GAUGE", 1), ("HISTOGRAM", 4)] {
            assert!(
                proto.contains(&format!("  {name} = {value};")),
                "MetricType {name} = {value}"
            );
        }
        assert_eq!(MetricType::Counter as i32, 0);
        assert_eq!(MetricType::Gauge as i32, 1);
        assert_eq!(MetricType::Histogram as i32, 4);
    }

    #[test]
    fn sint_fields_use_zigzag_and_repeated_deltas_are_unpacked() {
        let h = Histogram {
            schema: Some(-1),
            positive_delta: vec![-1, 2],
            ..Default::default()
        };
        // schema: tag 5 varint (0x28), zigzag(-1) = 1; each delta: tag 13 varint (0x68),
        // zigzag(-1) = 1, zigzag(2) = 4.
        assert_eq!(h.encode_to_vec(), [0x28, 0x01, 0x68, 0x01, 0x68, 0x04]);
    }
}
