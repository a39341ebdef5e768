//! The shape score of a decoded CRI message: its non-default leaf fields,
//! counted by walking the message through serde as a serializer, without
//! building a `serde_json::Value` tree (the late-attach method inference
//! scores every call's messages against all 34 methods' types:
//! docs/benchmarks.md "CRI decode", where the tree was most of its cost).
//!
//! What counts as one leaf is what the tree walk counted (serde_json's
//! data model, as the k8s-cri types derive `Serialize`): a `true`, a
//! non-zero finite number, a non-empty string; a non-empty sequence of
//! numbers only (a `bytes` field, or a repeated scalar) is one leaf; maps,
//! structs, sequences and enum variants sum their parts; `None`, unit and
//! NaN/infinities (serde_json's `null`) are none. A string holding a
//! control character other than tab and newlines fails the count: that is
//! what a nested message read as a string looks like.

use serde::ser::{self, Serialize};

/// The count failed: a string held control characters (or a serializer
/// error, which the CRI types do not raise).
#[derive(Debug)]
pub(crate) struct NotText;

impl std::fmt::Display for NotText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string field holds control characters")
    }
}

impl std::error::Error for NotText {}

impl ser::Error for NotText {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotText
    }
}

/// Non-default leaves of `m`; `None` when a string holds control
/// characters other than tab and newlines.
pub(crate) fn leaves<T: Serialize + ?Sized>(m: &T) -> Option<usize> {
    m.serialize(Counter).ok().map(|c| c.leaves)
}

/// What a value counted, and whether it was a number (for the rule on
/// sequences of numbers).
#[derive(Clone, Copy)]
pub(crate) struct Count {
    leaves: usize,
    number: bool,
}

impl Count {
    fn leaf(non_default: bool) -> Self {
        Count {
            leaves: usize::from(non_default),
            number: false,
        }
    }

    fn number(non_zero: bool) -> Self {
        Count {
            leaves: usize::from(non_zero),
            number: true,
        }
    }

    const NONE: Count = Count {
        leaves: 0,
        number: false,
    };
}

struct Counter;

/// A sequence, map, struct or variant being counted: the sum of its parts;
/// for a sequence also how many parts and whether all were numbers.
pub(crate) struct Parts {
    leaves: usize,
    items: usize,
    all_numbers: bool,
}

impl Parts {
    fn new() -> Self {
        Parts {
            leaves: 0,
            items: 0,
            all_numbers: true,
        }
    }

    fn add<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotText> {
        let c = v.serialize(Counter)?;
        self.leaves += c.leaves;
        self.items += 1;
        self.all_numbers &= c.number;
        Ok(())
    }

    /// A sequence: one leaf when it holds numbers only (a `bytes` field).
    fn seq(self) -> Count {
        if self.items > 0 && self.all_numbers {
            Count::leaf(true)
        } else {
            Count {
                leaves: self.leaves,
                number: false,
            }
        }
    }

    fn sum(self) -> Count {
        Count {
            leaves: self.leaves,
            number: false,
        }
    }
}

fn text(s: &str) -> Result<Count, NotText> {
    if s.chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(NotText);
    }
    Ok(Count::leaf(!s.is_empty()))
}

fn float(f: f64) -> Count {
    // serde_json writes a non-finite float as null: no leaf, not a number.
    if f.is_finite() {
        Count::number(f != 0.0)
    } else {
        Count::NONE
    }
}

impl ser::Serializer for Counter {
    type Ok = Count;
    type Error = NotText;
    type SerializeSeq = Parts;
    type SerializeTuple = Parts;
    type SerializeTupleStruct = Parts;
    type SerializeTupleVariant = Parts;
    type SerializeMap = Parts;
    type SerializeStruct = Parts;
    type SerializeStructVariant = Parts;

    fn serialize_bool(self, v: bool) -> Result<Count, NotText> {
        Ok(Count::leaf(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_i16(self, v: i16) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_i32(self, v: i32) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_i64(self, v: i64) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_u8(self, v: u8) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_u16(self, v: u16) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_u32(self, v: u32) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_u64(self, v: u64) -> Result<Count, NotText> {
        Ok(Count::number(v != 0))
    }
    fn serialize_f32(self, v: f32) -> Result<Count, NotText> {
        Ok(float(f64::from(v)))
    }
    fn serialize_f64(self, v: f64) -> Result<Count, NotText> {
        Ok(float(v))
    }
    fn serialize_char(self, v: char) -> Result<Count, NotText> {
        text(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Count, NotText> {
        text(v)
    }
    // serde_json writes bytes as an array of numbers: one leaf if any.
    fn serialize_bytes(self, v: &[u8]) -> Result<Count, NotText> {
        Ok(if v.is_empty() {
            Count::NONE
        } else {
            Count::leaf(true)
        })
    }
    fn serialize_none(self) -> Result<Count, NotText> {
        Ok(Count::NONE)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<Count, NotText> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Count, NotText> {
        Ok(Count::NONE)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Count, NotText> {
        Ok(Count::NONE)
    }
    // serde_json writes a unit variant as its name: a non-empty string.
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Count, NotText> {
        text(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Count, NotText> {
        v.serialize(self)
    }
    // `{"Variant": value}`: an object, the sum of its one value.
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<Count, NotText> {
        Ok(Count {
            leaves: v.serialize(self)?.leaves,
            number: false,
        })
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
    fn serialize_tuple(self, _: usize) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Parts, NotText> {
        Ok(Parts::new())
    }
}

/// serde's sequence-like and struct-like compound serializers all add
/// their parts; they differ in the method's name and in how the parts end
/// (`seq`: one leaf for numbers only; `sum`; a variant's array: `seq`, but
/// an object around it, so never a number).
macro_rules! parts_impl {
    ($trait:ident, $method:ident, |$p:ident| $end:expr $(, $key:ty)?) => {
        impl ser::$trait for Parts {
            type Ok = Count;
            type Error = NotText;
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $(_: $key,)?
                v: &T,
            ) -> Result<(), NotText> {
                self.add(v)
            }
            fn end(self) -> Result<Count, NotText> {
                let $p = self;
                Ok($end)
            }
        }
    };
}

parts_impl!(SerializeSeq, serialize_element, |p| p.seq());
parts_impl!(SerializeTuple, serialize_element, |p| p.seq());
parts_impl!(SerializeTupleStruct, serialize_field, |p| p.seq());
parts_impl!(SerializeTupleVariant, serialize_field, |p| Count {
    leaves: p.seq().leaves,
    number: false,
});
parts_impl!(SerializeStruct, serialize_field, |p| p.sum(), &'static str);
parts_impl!(
    SerializeStructVariant,
    serialize_field,
    |p| p.sum(),
    &'static str
);

impl ser::SerializeMap for Parts {
    type Ok = Count;
    type Error = NotText;
    // Keys are not leaves (the tree walk counted an object's values).
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), NotText> {
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NotText> {
        self.add(v)
    }
    fn end(self) -> Result<Count, NotText> {
        Ok(self.sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    /// The count the `serde_json::Value` walk gave, which this replaces.
    fn by_tree(v: &serde_json::Value) -> Option<usize> {
        use serde_json::Value;
        Some(match v {
            Value::Null => 0,
            Value::Bool(b) => usize::from(*b),
            Value::Number(n) => usize::from(n.as_f64() != Some(0.0)),
            Value::String(s) => {
                if s.chars()
                    .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
                {
                    return None;
                }
                usize::from(!s.is_empty())
            }
            Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_number) => 1,
            Value::Array(a) => a.iter().map(by_tree).sum::<Option<usize>>()?,
            Value::Object(o) => o.values().map(by_tree).sum::<Option<usize>>()?,
        })
    }

    #[derive(Serialize)]
    enum Oneof {
        Text(String),
        Number(i64),
    }

    #[derive(Serialize)]
    struct Inner {
        flag: bool,
        ratio: f64,
        raw: Vec<u8>,
        ints: Vec<i64>,
    }

    #[derive(Serialize)]
    struct Outer {
        id: String,
        attempt: u32,
        labels: BTreeMap<String, String>,
        inner: Option<Inner>,
        items: Vec<Inner>,
        choice: Option<Oneof>,
        none: Option<String>,
    }

    fn sample(id: &str, ratio: f64, raw: Vec<u8>, choice: Option<Oneof>) -> Outer {
        Outer {
            id: id.into(),
            attempt: 2,
            labels: [
                ("app".to_string(), "web".to_string()),
                ("x".into(), String::new()),
            ]
            .into_iter()
            .collect(),
            inner: Some(Inner {
                flag: true,
                ratio,
                raw: raw.clone(),
                ints: vec![0, 0],
            }),
            items: vec![
                Inner {
                    flag: false,
                    ratio: 0.0,
                    raw: Vec::new(),
                    ints: Vec::new(),
                },
                Inner {
                    flag: true,
                    ratio: 1.5,
                    raw,
                    ints: vec![3],
                },
            ],
            choice,
            none: None,
        }
    }

    /// The same counts as the tree walk, on shapes the CRI types have:
    /// maps, nested and repeated messages, bytes, oneofs, NaN, and the
    /// control-character refusal; and on real CRI messages.
    #[test]
    fn counts_as_the_tree_walk_did() {
        let cases = [
            sample("pod-1", 0.5, vec![1, 2], Some(Oneof::Text("t".into()))),
            sample("", 0.0, Vec::new(), Some(Oneof::Number(0))),
            sample("x", f64::NAN, vec![0], None),
            sample("x", f64::INFINITY, vec![0], Some(Oneof::Number(7))),
            sample("bad\u{1}id", 1.0, vec![], None),
            sample("tab\tok\n", 1.0, vec![], Some(Oneof::Text("\u{7f}".into()))),
        ];
        for c in &cases {
            let tree = by_tree(&serde_json::to_value(c).unwrap());
            assert_eq!(leaves(c), tree);
        }
        assert_eq!(leaves(&cases[0]), Some(12));
        assert_eq!(leaves(&cases[4]), None);
        use k8s_cri::v1 as cri;
        let run = cri::RunPodSandboxRequest {
            config: Some(cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: "web".into(),
                    uid: "u1".into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                hostname: "web".into(),
                labels: [("a".to_string(), "b".to_string())].into_iter().collect(),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        };
        let tree = by_tree(&serde_json::to_value(&run).unwrap());
        assert_eq!(leaves(&run), tree);
        assert_eq!(leaves(&run), Some(5));
    }
}
