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
    /// encoded alone and its key byte checked against the number and wire type the file
    /// declares.
    #[test]
    fn field_numbers_and_types_match_the_proto_file() {
        let proto = include_str!("../../proto/perftools/profiles/profile.proto");
        let declared = |message: &str, field: &str| -> (String, u32) {
            let body = proto
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
        };
        // (message, field, declared type, the field's key as encoded here)
        let key = |bytes: Vec<u8>| -> u32 {
            let mut b = bytes.as_slice();
            prost::encoding::decode_varint(&mut b).unwrap() as u32
        };
        let vt = || ValueType { r#type: 1, unit: 1 };
        let cases: Vec<(&str, &str, &str, u32)> = vec![
            (
                "Profile",
                "sample_type",
                "repeated ValueType",
                key(Profile {
                    sample_type: vec![vt()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "sample",
                "repeated Sample",
                key(Profile {
                    sample: vec![Sample::default()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "mapping",
                "repeated Mapping",
                key(Profile {
                    mapping: vec![Mapping::default()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "location",
                "repeated Location",
                key(Profile {
                    location: vec![Location::default()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "function",
                "repeated Function",
                key(Profile {
                    function: vec![Function::default()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "string_table",
                "repeated string",
                key(Profile {
                    string_table: vec![String::new()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "drop_frames",
                "int64",
                key(Profile {
                    drop_frames: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "keep_frames",
                "int64",
                key(Profile {
                    keep_frames: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "time_nanos",
                "int64",
                key(Profile {
                    time_nanos: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "duration_nanos",
                "int64",
                key(Profile {
                    duration_nanos: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "period_type",
                "ValueType",
                key(Profile {
                    period_type: Some(vt()),
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "period",
                "int64",
                key(Profile {
                    period: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "comment",
                "repeated int64",
                key(Profile {
                    comment: vec![1],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Profile",
                "default_sample_type",
                "int64",
                key(Profile {
                    default_sample_type: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "ValueType",
                "type",
                "int64",
                key(ValueType { r#type: 1, unit: 0 }.encode_to_vec()),
            ),
            (
                "ValueType",
                "unit",
                "int64",
                key(ValueType { r#type: 0, unit: 1 }.encode_to_vec()),
            ),
            (
                "Sample",
                "location_id",
                "repeated uint64",
                key(Sample {
                    location_id: vec![1],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Sample",
                "value",
                "repeated int64",
                key(Sample {
                    value: vec![1],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Sample",
                "label",
                "repeated Label",
                key(Sample {
                    label: vec![Label::default()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Label",
                "key",
                "int64",
                key(Label {
                    key: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Label",
                "str",
                "int64",
                key(Label {
                    str: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Label",
                "num",
                "int64",
                key(Label {
                    num: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Label",
                "num_unit",
                "int64",
                key(Label {
                    num_unit: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "id",
                "uint64",
                key(Mapping {
                    id: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "memory_start",
                "uint64",
                key(Mapping {
                    memory_start: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "memory_limit",
                "uint64",
                key(Mapping {
                    memory_limit: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "file_offset",
                "uint64",
                key(Mapping {
                    file_offset: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "filename",
                "int64",
                key(Mapping {
                    filename: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "build_id",
                "int64",
                key(Mapping {
                    build_id: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "has_functions",
                "bool",
                key(Mapping {
                    has_functions: true,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "has_filenames",
                "bool",
                key(Mapping {
                    has_filenames: true,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "has_line_numbers",
                "bool",
                key(Mapping {
                    has_line_numbers: true,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Mapping",
                "has_inline_frames",
                "bool",
                key(Mapping {
                    has_inline_frames: true,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Location",
                "id",
                "uint64",
                key(Location {
                    id: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Location",
                "mapping_id",
                "uint64",
                key(Location {
                    mapping_id: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Location",
                "address",
                "uint64",
                key(Location {
                    address: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Location",
                "line",
                "repeated Line",
                key(Location {
                    line: vec![Line::default()],
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Location",
                "is_folded",
                "bool",
                key(Location {
                    is_folded: true,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Line",
                "function_id",
                "uint64",
                key(Line {
                    function_id: 1,
                    line: 0,
                }
                .encode_to_vec()),
            ),
            (
                "Line",
                "line",
                "int64",
                key(Line {
                    function_id: 0,
                    line: 1,
                }
                .encode_to_vec()),
            ),
            (
                "Function",
                "id",
                "uint64",
                key(Function {
                    id: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Function",
                "name",
                "int64",
                key(Function {
                    name: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Function",
                "system_name",
                "int64",
                key(Function {
                    system_name: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Function",
                "filename",
                "int64",
                key(Function {
                    filename: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
            (
                "Function",
                "start_line",
                "int64",
                key(Function {
                    start_line: 1,
                    ..Default::default()
                }
                .encode_to_vec()),
            ),
        ];
        for (message, field, ty, key) in cases {
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
}
