//! pprof's profile messages (`perftools.profiles`, proto/perftools/profiles/profile.proto):
//! the fields phasescope writes, with the format's field numbers and wire types. As for the
//! Prometheus exposition (src/metrics/proto.rs), prost derives the encoding so that
//! building needs no `protoc`.
//!
//! proto3: every scalar is plain (absent means 0), and prost packs repeated numbers, as
//! proto3 does by default and as pprof writes them itself.

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Indices into the string table.
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A type and a unit, both indices into the string table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One per `Profile::sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The .proto under proto/ and these structs must agree on every field: a renumbered
    /// or retyped field would be read as another by pprof, silently. Each field is
    /// encoded alone (`case!`) and its key checked against the number and wire type the
    /// file declares (`check`).
    const PROTO: &str = include_str!("../../../proto/perftools/profiles/profile.proto");

    /// The declared type (with `repeated`) and number of `message.field` in the file.
    fn declared(message: &str, field: &str) -> (String, u32) {
        let body = PROTO
            .split(&format!("message {message} {{"))
            .nth(1)
            .unwrap_or_else(|| panic!("message {message} in profile.proto"));
        let body = &body[..body.find("\n}").unwrap()];
        let words: Vec<&str> = body
            .lines()
            .map(str::split_whitespace)
            .map(Iterator::collect::<Vec<_>>)
            .find(|w| {
                let at = usize::from(w.first() == Some(&"repeated"));
                w.get(at + 1) == Some(&field)
            })
            .unwrap_or_else(|| panic!("{message}.{field} in profile.proto"));
        let at = usize::from(words[0] == "repeated");
        let number = words[at + 3].trim_end_matches(';').parse().unwrap();
        (words[..=at].join(" "), number)
    }

    /// The first key of an encoded message.
    fn key(bytes: &[u8]) -> u32 {
        let mut b = bytes;
        prost::encoding::decode_varint(&mut b).unwrap() as u32
    }

    fn vt() -> ValueType {
        ValueType { r#type: 1, unit: 1 }
    }

    /// (message, field, declared type, the field's key as encoded here), the field set
    /// alone to `value`.
    macro_rules! case {
        ($message:ident . $field:ident = $value:expr, $ty:literal) => {
            (
                stringify!($message),
                stringify!($field).trim_start_matches("r#"),
                $ty,
                key(&$message {
                    $field: $value,
                    ..Default::default()
                }
                .encode_to_vec()),
            )
        };
    }

    fn check(cases: &[(&str, &str, &str, u32)]) {
        for &(message, field, ty, key) in cases {
            let (declared_ty, number) = declared(message, field);
            assert_eq!(declared_ty, ty, "{message}.{field}");
            // Varints and bools are wire type 0; messages, strings and packed repeated
            // numbers are length-delimited (2).
            let length_delimited = ty.starts_with("repeated")
                || ty.chars().next().is_some_and(char::is_uppercase)
                || ty == "string";
            let wire = if length_delimited { 2 } else { 0 };
            assert_eq!(key, number << 3 | wire, "{message}.{field}: key");
        }
    }

    #[test]
    fn the_profiles_fields_match_the_proto_file() {
        check(&[
            case!(Profile.sample_type = vec![vt()], "repeated ValueType"),
            case!(Profile.sample = vec![Sample::default()], "repeated Sample"),
            case!(
                Profile.mapping = vec![Mapping::default()],
                "repeated Mapping"
            ),
            case!(
                Profile.location = vec![Location::default()],
                "repeated Location"
            ),
            case!(
                Profile.function = vec![Function::default()],
                "repeated Function"
            ),
            case!(
                Profile.string_table = vec![String::new()],
                "repeated string"
            ),
            case!(Profile.drop_frames = 1, "int64"),
            case!(Profile.keep_frames = 1, "int64"),
            case!(Profile.time_nanos = 1, "int64"),
            case!(Profile.duration_nanos = 1, "int64"),
            case!(Profile.period_type = Some(vt()), "ValueType"),
            case!(Profile.period = 1, "int64"),
            case!(Profile.comment = vec![1], "repeated int64"),
            case!(Profile.default_sample_type = 1, "int64"),
        ]);
    }

    #[test]
    fn value_type_sample_and_label_fields_match_the_proto_file() {
        check(&[
            case!(ValueType.r#type = 1, "int64"),
            case!(ValueType.unit = 1, "int64"),
            case!(Sample.location_id = vec![1], "repeated uint64"),
            case!(Sample.value = vec![1], "repeated int64"),
            case!(Sample.label = vec![Label::default()], "repeated Label"),
            case!(Label.key = 1, "int64"),
            case!(Label.str = 1, "int64"),
            case!(Label.num = 1, "int64"),
            case!(Label.num_unit = 1, "int64"),
        ]);
    }

    #[test]
    fn mapping_fields_match_the_proto_file() {
        check(&[
            case!(Mapping.id = 1, "uint64"),
            case!(Mapping.memory_start = 1, "uint64"),
            case!(Mapping.memory_limit = 1, "uint64"),
            case!(Mapping.file_offset = 1, "uint64"),
            case!(Mapping.filename = 1, "int64"),
            case!(Mapping.build_id = 1, "int64"),
            case!(Mapping.has_functions = true, "bool"),
            case!(Mapping.has_filenames = true, "bool"),
            case!(Mapping.has_line_numbers = true, "bool"),
            case!(Mapping.has_inline_frames = true, "bool"),
        ]);
    }

    #[test]
    fn location_line_and_function_fields_match_the_proto_file() {
        check(&[
            case!(Location.id = 1, "uint64"),
            case!(Location.mapping_id = 1, "uint64"),
            case!(Location.address = 1, "uint64"),
            case!(Location.line = vec![Line::default()], "repeated Line"),
            case!(Location.is_folded = true, "bool"),
            case!(Line.function_id = 1, "uint64"),
            case!(Line.line = 1, "int64"),
            case!(Function.id = 1, "uint64"),
            case!(Function.name = 1, "int64"),
            case!(Function.system_name = 1, "int64"),
            case!(Function.filename = 1, "int64"),
            case!(Function.start_line = 1, "int64"),
        ]);
    }
}
