//! The values the store exchanges with either database: parameters going in ([`Arg`]) and
//! column values coming out ([`Value`], read through [`Row::get`]). The set is SQLite's
//! (integer, real, text, blob, null), which both backends hold the same way: the schema
//! keeps flags as 0/1 integers and timestamps as RFC 3339 text on both.

use crate::db::DbError;

/// One statement parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// What can be passed as a statement parameter (see [`args!`](crate::args)).
pub(crate) trait ToArg {
    fn to_arg(&self) -> Arg<'_>;
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Arg<'_> {
                Arg::Int(i64::from(*self))
            }
        }
    )*};
}
int_arg!(i64, i32, u32, u16, u8);

/// Sizes and counts past `i64::MAX` do not occur; one would be stored as `i64::MAX`
/// rather than wrap to a negative number.
impl ToArg for u64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToArg for usize {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToArg for bool {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}

impl ToArg for f64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Real(*self)
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Arg<'_> {
        match self {
            Some(value) => value.to_arg(),
            None => Arg::Null,
        }
    }
}

/// A statement's parameters: `args![a, b]` is `&[&dyn ToArg]`, numbered `?1`, `?2` in the SQL.
#[macro_export]
#[doc(hidden)]
macro_rules! args {
    () => {
        &[] as &[&dyn $crate::db::ToArg]
    };
    ($($arg:expr),+ $(,)?) => {
        &[$(&$arg as &dyn $crate::db::ToArg),+] as &[&dyn $crate::db::ToArg]
    };
}

/// One column value of a result row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Int(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }
}

/// One result row, read whole (every statement the store runs returns few, small rows).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub(crate) Vec<Value>);

impl Row {
    /// Column `index` as a `T`; a null, a missing column, or another type is an error.
    pub(crate) fn get<T: FromValue>(&self, index: usize) -> Result<T, DbError> {
        let value = self.0.get(index).ok_or(DbError::NoColumn { index })?;
        T::from_value(value).ok_or_else(|| DbError::ColumnType {
            index,
            expected: T::EXPECTED,
            found: value.kind(),
        })
    }
}

/// A Rust type a column converts to.
pub(crate) trait FromValue: Sized {
    const EXPECTED: &'static str;
    fn from_value(value: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    const EXPECTED: &'static str = "integer";
    fn from_value(value: &Value) -> Option<i64> {
        match value {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
}

macro_rules! int_from {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            const EXPECTED: &'static str = concat!("integer in the range of ", stringify!($t));
            fn from_value(value: &Value) -> Option<$t> {
                i64::from_value(value).and_then(|v| <$t>::try_from(v).ok())
            }
        }
    )*};
}
int_from!(i32, u32, u64, u16, u8, usize);

impl FromValue for bool {
    const EXPECTED: &'static str = "integer 0 or 1";
    fn from_value(value: &Value) -> Option<bool> {
        match value {
            Value::Int(0) => Some(false),
            Value::Int(1) => Some(true),
            _ => None,
        }
    }
}

impl FromValue for f64 {
    const EXPECTED: &'static str = "real";
    fn from_value(value: &Value) -> Option<f64> {
        match value {
            Value::Real(v) => Some(*v),
            // SQLite hands back a REAL column's integral value as an integer.
            Value::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
}

impl FromValue for String {
    const EXPECTED: &'static str = "text";
    fn from_value(value: &Value) -> Option<String> {
        match value {
            Value::Text(v) => Some(v.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    const EXPECTED: &'static str = "blob";
    fn from_value(value: &Value) -> Option<Vec<u8>> {
        match value {
            Value::Blob(v) => Some(v.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    fn from_value(value: &Value) -> Option<Option<T>> {
        match value {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_converts_only_to_a_type_that_holds_it() {
        let row = Row(vec![
            Value::Int(-1),
            Value::Null,
            Value::Int(7),
            Value::Int(2),
        ]);
        assert_eq!(row.get::<i64>(0).unwrap(), -1);
        assert!(row.get::<u64>(0).is_err(), "a negative count is not a u64");
        assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
        assert!(row.get::<String>(1).is_err(), "a null is not a string");
        assert_eq!(row.get::<u32>(2).unwrap(), 7);
        assert!(row.get::<bool>(3).is_err(), "a flag is 0 or 1");
        assert!(matches!(
            row.get::<i64>(9),
            Err(DbError::NoColumn { index: 9 })
        ));
    }
}
