//! Enumerated string fields that keep unknown values.
//!
//! A value outside the enum must not make the whole object unreadable: validation names it
//! with its field path and the supported values, and every other problem is still reported.

/// An enumerated string field: its wire form and whether the value is one the API knows.
pub trait StringEnum {
    /// Every value the API accepts, in documentation order.
    const VALUES: &'static [&'static str];
    /// The wire form.
    fn as_str(&self) -> &str;
    /// False for a value outside [`Self::VALUES`].
    fn is_known(&self) -> bool;
}

/// Defines a string enum with an `Unknown(String)` catch-all, its serde form (a plain string),
/// and a JSON schema that lists the known values (so the CRD enforces them too).
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
            /// A value this version does not know; validation reports it.
            Unknown(String),
        }

        impl $crate::string_enum::StringEnum for $name {
            const VALUES: &'static [&'static str] = &[$($text),+];

            fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Unknown(text) => text,
                }
            }

            fn is_known(&self) -> bool {
                !matches!(self, Self::Unknown(_))
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $( $text => Self::$variant, )+
                    other => Self::Unknown(other.to_owned()),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::string_enum::StringEnum::as_str(self))
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str($crate::string_enum::StringEnum::as_str(self))
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(deserializer)?;
                Ok(Self::from(text.as_ref()))
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({
                    "type": "string",
                    "enum": <Self as $crate::string_enum::StringEnum>::VALUES,
                })
            }
        }
    };
}

pub(crate) use string_enum;

#[cfg(test)]
mod tests {
    use super::StringEnum;

    string_enum! {
        /// A test enum.
        pub enum Colour {
            Red = "Red",
            DarkBlue = "DarkBlue",
        }
    }

    #[test]
    fn known_and_unknown_values_round_trip() {
        let parsed: Vec<Colour> = serde_json::from_str(r#"["Red","DarkBlue","Mauve"]"#).unwrap();
        assert_eq!(parsed, [Colour::Red, Colour::DarkBlue, Colour::Unknown("Mauve".into())]);
        assert!(!parsed[2].is_known());
        assert_eq!(serde_json::to_string(&parsed).unwrap(), r#"["Red","DarkBlue","Mauve"]"#);
    }

    #[test]
    fn schema_lists_the_known_values() {
        let schema = schemars::schema_for!(Colour);
        let enumerated = schema.get("enum").unwrap();
        assert_eq!(enumerated, &serde_json::json!(["Red", "DarkBlue"]));
    }
}
