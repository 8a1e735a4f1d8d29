//! Where things are in the matrix file: a second, untyped pass over the YAML that records the
//! line and column of every key and value by field path, finds duplicate keys, and lets the
//! semantic checks point at the exact place they complain about.
//!
//! The pass goes through serde-saphyr itself (its [`Spanned`] wrapper), so positions are the
//! ones its own errors use, and anchors, aliases and `<<` merges are resolved the same way:
//! a value that comes from an alias or a merge is located where it is used.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Location, Options, Spanned};

use super::error::Position;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathSeg {
    /// A mapping key (a field name, or a template / group / scenario / variable name).
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// A field path such as `client_groups.grpc-clients.target` or `server_templates.a.args[2]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(pub Vec<PathSeg>);

impl FieldPath {
    /// The root of the document.
    pub fn root() -> Self {
        FieldPath(Vec::new())
    }

    /// A path made of keys.
    #[cfg(test)]
    pub fn keys<S: AsRef<str>>(keys: &[S]) -> Self {
        FieldPath(
            keys.iter()
                .map(|k| PathSeg::Key(k.as_ref().to_string()))
                .collect(),
        )
    }

    /// This path with one more key.
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut p = self.clone();
        p.0.push(PathSeg::Key(key.into()));
        p
    }

    /// This path with one more index.
    pub fn index(&self, index: usize) -> Self {
        let mut p = self.clone();
        p.0.push(PathSeg::Index(index));
        p
    }

    fn parent(&self) -> Option<Self> {
        let mut p = self.clone();
        p.0.pop().map(|_| p)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                PathSeg::Key(k) if i == 0 => f.write_str(k)?,
                PathSeg::Key(k) => write!(f, ".{k}")?,
                PathSeg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Which end of a `key: value` pair an error points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The key: for errors about a name, or about a whole mapping.
    Key,
    /// The value: for errors about what was written.
    Value,
}

#[derive(Debug, Clone)]
struct Entry {
    key: Option<Position>,
    value: Option<Position>,
    scalar: Option<String>,
}

/// A duplicate mapping key.
#[derive(Debug, Clone)]
pub struct Duplicate {
    /// Path of the duplicated entry.
    pub path: FieldPath,
    /// Where the key is repeated.
    pub at: Option<Position>,
    /// Where it first appeared.
    pub first: Option<Position>,
}

/// Positions of the keys and values of one YAML document, by field path.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    entries: HashMap<FieldPath, Entry>,
}

impl SourceMap {
    /// Reads `text` into a source map, listing the duplicate keys it contains.
    pub fn scan(text: &str) -> Result<(SourceMap, Vec<Duplicate>), serde_saphyr::Error> {
        let mut options = Options::default();
        // Let every entry through, so that all duplicates are found and reported here.
        options.duplicate_keys = DuplicateKeyPolicy::LastWins;
        let root: Node = serde_saphyr::from_str_with_options(text, options)?;
        let mut map = SourceMap::default();
        let mut duplicates = Vec::new();
        map.record(&FieldPath::root(), None, &root, &mut duplicates);
        Ok((map, duplicates))
    }

    fn record(
        &mut self,
        path: &FieldPath,
        key: Option<Position>,
        node: &Node,
        duplicates: &mut Vec<Duplicate>,
    ) {
        let scalar = match &node.0.value {
            Kind::Scalar(s) => Some(s.clone()),
            _ => None,
        };
        self.entries.insert(
            path.clone(),
            Entry {
                key,
                value: position(&node.0.referenced),
                scalar,
            },
        );
        match &node.0.value {
            Kind::Scalar(_) => {}
            Kind::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.record(
                        &path.index(i),
                        position(&item.0.referenced),
                        item,
                        duplicates,
                    );
                }
            }
            Kind::Map(entries) => {
                let mut seen: HashMap<&str, Option<Position>> = HashMap::new();
                for (k, v) in entries {
                    let child = path.key(k.value.clone());
                    let key_pos = position(&k.referenced);
                    if let Some(first) = seen.get(k.value.as_str()) {
                        duplicates.push(Duplicate {
                            path: child,
                            at: key_pos,
                            first: *first,
                        });
                        continue;
                    }
                    seen.insert(&k.value, key_pos);
                    self.record(&child, key_pos, v, duplicates);
                }
            }
        }
    }

    /// Where `path` is: its key or its value as asked (the value when it has no key, the key
    /// when its value has no position). A path that is not in the file (a field left at its
    /// default) resolves to the key of its nearest ancestor that is.
    pub fn locate(&self, path: &FieldPath, anchor: Anchor) -> Option<Position> {
        let mut current = Some(path.clone());
        let mut anchor = anchor;
        while let Some(p) = current {
            if let Some(e) = self.entries.get(&p) {
                let found = match anchor {
                    Anchor::Key => e.key.or(e.value),
                    Anchor::Value => e.value.or(e.key),
                };
                if found.is_some() {
                    return found;
                }
            }
            anchor = Anchor::Key;
            current = p.parent();
        }
        None
    }

    /// Every scalar value of an `env` mapping (`…env.NAME`), with where its value starts and
    /// its text.
    pub fn env_values(&self) -> Vec<(Position, String)> {
        self.entries
            .iter()
            .filter(|(path, _)| {
                path.0.len() >= 2
                    && matches!(&path.0[path.0.len() - 2], PathSeg::Key(k) if k == "env")
            })
            .filter_map(|(_, e)| Some((e.value?, e.scalar.clone()?)))
            .collect()
    }

    /// The text of the scalar at `path`, if there is one.
    pub fn scalar(&self, path: &FieldPath) -> Option<&str> {
        self.entries.get(path)?.scalar.as_deref()
    }

    /// Whether `path` is written in the file.
    #[cfg(test)]
    pub fn contains(&self, path: &FieldPath) -> bool {
        self.entries.contains_key(path)
    }
}

/// The position of a serde-saphyr location, if it is known (line 0 means unknown).
pub fn position(loc: &Location) -> Option<Position> {
    (loc.line() > 0).then(|| Position {
        line: loc.line(),
        column: loc.column(),
    })
}

/// Any YAML node, with where it is used.
struct Node(Spanned<Kind>);

enum Kind {
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(Spanned<String>, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Spanned::<Kind>::deserialize(d).map(Node)
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Kind, E> {
        Ok(Kind::Scalar(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Kind, E> {
        Ok(Kind::Scalar(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Scalar(String::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Scalar(String::new()))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        Kind::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Kind::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Kind::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(line: u64, column: u64) -> Option<Position> {
        Some(Position { line, column })
    }

    #[test]
    fn records_keys_values_and_sequence_items() {
        let text = "a:\n  b: 1\n  c: [x, y]\nd: {e: f}\n";
        let (map, dups) = SourceMap::scan(text).unwrap();
        assert!(dups.is_empty());
        let b = FieldPath::keys(&["a", "b"]);
        assert_eq!(map.locate(&b, Anchor::Key), pos(2, 3));
        assert_eq!(map.locate(&b, Anchor::Value), pos(2, 6));
        assert_eq!(map.scalar(&b), Some("1"));
        let y = FieldPath::keys(&["a", "c"]).index(1);
        assert_eq!(y.to_string(), "a.c[1]");
        assert_eq!(map.locate(&y, Anchor::Value), pos(3, 10));
        let e = FieldPath::keys(&["d", "e"]);
        assert_eq!(map.locate(&e, Anchor::Key), pos(4, 5));
        // Not written: falls back to the nearest ancestor's key.
        let missing = FieldPath::keys(&["a", "zzz", "q"]);
        assert_eq!(map.locate(&missing, Anchor::Value), pos(1, 1));
    }

    #[test]
    fn finds_every_duplicate_key() {
        let text = "a: 1\nb:\n  x: 1\n  x: 2\na: 3\n";
        let (_, dups) = SourceMap::scan(text).unwrap();
        let found: Vec<_> = dups
            .iter()
            .map(|d| (d.path.to_string(), d.at, d.first))
            .collect();
        assert_eq!(
            found,
            vec![
                ("b.x".to_string(), pos(4, 3), pos(3, 3)),
                ("a".to_string(), pos(5, 1), pos(1, 1)),
            ]
        );
    }

    #[test]
    fn merged_keys_are_not_duplicates() {
        let text = "base: &b\n  x: 1\n  y: 2\nother:\n  <<: *b\n  x: 3\n";
        let (map, dups) = SourceMap::scan(text).unwrap();
        assert!(dups.is_empty(), "{dups:?}");
        assert_eq!(map.scalar(&FieldPath::keys(&["other", "x"])), Some("3"));
        assert!(map.contains(&FieldPath::keys(&["other", "y"])));
    }
}
