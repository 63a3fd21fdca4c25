//! Finding where a key was set, so a validation error can name the spot to fix.
//!
//! serde forgets positions once a value is deserialized, and the config types stay plain
//! (the rest of the program should not carry spans around). So the parsed document is kept
//! beside the `Config` as a tree of spans, and a validation problem names the key it is
//! about by path (`tap[1].limits.max_head_bytes`); this module turns that path into a line
//! and column, or into the flag or variable that overrode the value.

use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::error::{line_col, Location, Source};

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(&'static str),
    Index(usize),
}

/// The spans of one parsed config text.
pub(crate) struct FileSpans<'a> {
    path: PathBuf,
    text: &'a str,
    root: Spanned<DeTable<'a>>,
}

impl<'a> FileSpans<'a> {
    pub(crate) fn new(path: &Path, text: &'a str, root: Spanned<DeTable<'a>>) -> Self {
        Self {
            path: path.to_owned(),
            text,
            root,
        }
    }

    pub(crate) fn location_of_offset(&self, offset: usize) -> Location {
        let (line, column) = line_col(self.text, offset);
        Location::File {
            path: self.path.clone(),
            line,
            column,
        }
    }

    /// The position of the deepest part of `path` present in the file: the key itself when
    /// it was written, else the table it would belong to (a defaulted key has no position
    /// of its own, and its table is the best place to add it).
    pub(crate) fn locate(&self, path: &[Seg]) -> Location {
        self.location_of_offset(self.span_of(path))
    }

    fn span_of(&self, path: &[Seg]) -> usize {
        let mut best = self.root.span().start;
        let mut table: Option<&DeTable<'a>> = Some(self.root.get_ref());
        let mut value: Option<&Spanned<DeValue<'a>>> = None;
        for seg in path {
            match *seg {
                Seg::Key(key) => {
                    let Some((k, v)) = table.and_then(|t| t.get_key_value(key)) else {
                        break;
                    };
                    best = k.span().start;
                    table = v.get_ref().as_table();
                    value = Some(v);
                }
                Seg::Index(i) => {
                    let Some(item) = value.and_then(|v| v.get_ref().get(i)) else {
                        break;
                    };
                    // An element of `[[tap]]` spans its header; an inline element spans itself.
                    best = item.span().start;
                    table = item.get_ref().as_table();
                    value = Some(item);
                }
            }
        }
        best
    }
}

/// Where the values of one assembled `Config` came from: a file (if any) and overrides.
#[derive(Default)]
pub(crate) struct Origins<'a> {
    pub(crate) file: Option<FileSpans<'a>>,
    /// Paths set by flags or environment variables; a path covers everything below it.
    pub(crate) overridden: Vec<(Vec<Seg>, Source)>,
}

impl Origins<'_> {
    pub(crate) fn overridden_by(&self, path: &[Seg]) -> Option<Source> {
        self.overridden
            .iter()
            .find(|(p, _)| path.starts_with(p))
            .map(|(_, s)| *s)
    }

    pub(crate) fn locate(&self, path: &[Seg]) -> Location {
        if let Some(source) = self.overridden_by(path) {
            return Location::Override(source);
        }
        match &self.file {
            Some(file) => file.locate(path),
            None => Location::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
shutdown_grace = \"1s\"

[[tap]]
name = \"a\"

[[tap]]
name = \"b\"
[tap.limits]
max_headers = 0

[metrics]
buckets = [0.1, 0.2,
  0.05]
";

    fn spans() -> FileSpans<'static> {
        FileSpans::new(Path::new("t.toml"), TEXT, DeTable::parse(TEXT).unwrap())
    }

    fn line(loc: Location) -> usize {
        match loc {
            Location::File { line, .. } => line,
            other => panic!("not a file location: {other:?}"),
        }
    }

    #[test]
    fn keys_inside_arrays_of_tables() {
        let s = spans();
        assert_eq!(line(s.locate(&[Seg::Key("shutdown_grace")])), 1);
        assert_eq!(
            line(s.locate(&[Seg::Key("tap"), Seg::Index(0), Seg::Key("name")])),
            4
        );
        assert_eq!(
            line(s.locate(&[Seg::Key("tap"), Seg::Index(1), Seg::Key("name")])),
            7
        );
        let deep = [
            Seg::Key("tap"),
            Seg::Index(1),
            Seg::Key("limits"),
            Seg::Key("max_headers"),
        ];
        assert_eq!(line(s.locate(&deep)), 9);
        let item = [Seg::Key("metrics"), Seg::Key("buckets"), Seg::Index(2)];
        assert_eq!(line(s.locate(&item)), 13);
    }

    #[test]
    fn a_missing_key_falls_back_to_its_table() {
        let s = spans();
        let missing = [Seg::Key("tap"), Seg::Index(0), Seg::Key("listen")];
        assert_eq!(line(s.locate(&missing)), 3);
        assert_eq!(line(s.locate(&[Seg::Key("log"), Seg::Key("format")])), 1);
    }

    #[test]
    fn overrides_win_over_the_file() {
        let origins = Origins {
            file: Some(spans()),
            overridden: vec![(
                vec![Seg::Key("tap"), Seg::Index(0), Seg::Key("listen")],
                Source::Flag("--listen"),
            )],
        };
        let listen = [Seg::Key("tap"), Seg::Index(0), Seg::Key("listen")];
        assert_eq!(
            origins.locate(&listen),
            Location::Override(Source::Flag("--listen"))
        );
        let name = [Seg::Key("tap"), Seg::Index(0), Seg::Key("name")];
        assert_eq!(line(origins.locate(&name)), 4);
    }
}
