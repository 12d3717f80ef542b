//! `resource.Quantity`, kept as an exact decimal and printed the way Go's apimachinery prints it.
//!
//! Writers may send a quantity as a JSON string or a bare number (upstream YAML uses integers);
//! we always serialize the canonical string, so a Go client that re-reads our output sees the
//! same bytes it would have produced itself (`2000` → `"2k"`, `1536Mi` stays `"1536Mi"`).
//! Equality is by value: `"1Ki" == "1024"`, as apimachinery's `Quantity.Cmp` has it.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The largest value a binary-SI quantity may hold (Go caps them at `math.MaxInt64`).
const MAX_BINARY_SI: i128 = i64::MAX as i128;
/// Values finer than a nano unit are rounded up to it, as Go does.
const MIN_EXPONENT: i32 = -9;

/// How a quantity was written, which decides how it is printed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Powers of 1024: `Ki`, `Mi`, `Gi`, …
    BinarySI,
    /// Powers of 1000 with SI suffixes: `m`, `k`, `M`, `G`, … (also bare numbers).
    DecimalSI,
    /// Scientific notation: `1e3`, `5E-3`.
    DecimalExponent,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the quantity grammar.
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// The number part is fine but the suffix is unknown.
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// The value needs more precision or range than we keep (38 significant digits).
    #[error("quantity is too large")]
    TooLarge,
}

/// A Kubernetes resource quantity: `value = mantissa × 10^exponent`, normalized so that the
/// mantissa has no trailing zeros (zero is `0 × 10^0`).
#[derive(Clone, Copy)]
pub struct Quantity {
    /// The mantissa's low and high 64 bits: two 8-aligned halves rather than one `i128`, whose
    /// 16-byte alignment would pad the struct to 32 bytes. An exporter's object holds two dozen
    /// quantities, and a server holds thousands of objects.
    mantissa_low: u64,
    mantissa_high: i64,
    exponent: i32,
    format: Format,
}

impl Quantity {
    /// A whole number printed in decimal SI form, the form the exporter uses for every resource.
    pub fn from_i64(value: i64) -> Self {
        Self::normalized(i128::from(value), 0, Format::DecimalSI)
    }

    /// Thousandths (what [`Self::ceil_milli_i64`] gives), printed in decimal SI form (`1500m`).
    pub fn from_milli(value: i64) -> Self {
        Self::normalized(i128::from(value), -3, Format::DecimalSI)
    }

    /// A whole number printed in binary SI form (`1Gi`); memory quantities from Go often carry it.
    pub fn from_i64_binary(value: i64) -> Self {
        Self::normalized(i128::from(value), 0, Format::BinarySI)
    }

    /// Parses the Kubernetes quantity grammar.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = rest.bytes().position(|b| !(b.is_ascii_digit() || b == b'.')).unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (mut mantissa, mut exponent) = parse_decimal(number)?;
        let format = match suffix {
            "" => Format::DecimalSI,
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let power = binary_power(suffix);
                let factor = 1024_i128.checked_pow(power).ok_or(QuantityError::TooLarge)?;
                mantissa = mantissa.checked_mul(factor).ok_or(QuantityError::TooLarge)?;
                Format::BinarySI
            }
            "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => {
                exponent = exponent.checked_add(decimal_power(suffix)).ok_or(QuantityError::TooLarge)?;
                Format::DecimalSI
            }
            _ if suffix.starts_with(['e', 'E']) => {
                let power: i32 = parse_exponent(&suffix[1..])?;
                exponent = exponent.checked_add(power).ok_or(QuantityError::TooLarge)?;
                Format::DecimalExponent
            }
            _ => return Err(QuantityError::Suffix),
        };
        if negative {
            mantissa = -mantissa;
        }
        let (mantissa, exponent) = round_up_to_nano(mantissa, exponent)?;
        let mut quantity = Self::normalized(mantissa, exponent, format);
        if format == Format::BinarySI && quantity.exceeds(MAX_BINARY_SI) {
            quantity = Self::normalized(MAX_BINARY_SI, 0, Format::BinarySI);
        }
        Ok(quantity)
    }

    /// The format the quantity was written in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// True when the value is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa() == 0
    }

    /// True when the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa() < 0
    }

    /// The value as a whole number, if it is one and fits.
    pub fn as_i64(&self) -> Option<i64> {
        if self.exponent < 0 {
            return None;
        }
        let factor = 10_i128.checked_pow(self.exponent.unsigned_abs())?;
        i64::try_from(self.mantissa().checked_mul(factor)?).ok()
    }

    /// The value rounded up to a whole number (as `Quantity.Value()` does), if it fits.
    pub fn ceil_i64(&self) -> Option<i64> {
        if self.exponent >= 0 {
            return self.as_i64();
        }
        let divisor = 10_i128.checked_pow(self.exponent.unsigned_abs())?;
        let whole = self.mantissa().div_euclid(divisor) + i128::from(self.mantissa().rem_euclid(divisor) != 0);
        i64::try_from(whole).ok()
    }

    /// The value in thousandths, rounded up (as `Quantity.MilliValue()` does), if it fits.
    pub fn ceil_milli_i64(&self) -> Option<i64> {
        let shifted = Self { exponent: self.exponent.checked_add(3)?, ..*self };
        shifted.ceil_i64()
    }

    fn normalized(mut mantissa: i128, mut exponent: i32, format: Format) -> Self {
        if mantissa == 0 {
            return Self::from_parts(0, 0, format);
        }
        if let Ok(mut small) = i64::try_from(mantissa) {
            // The usual case, in 64-bit arithmetic (128-bit division is a library call).
            while small % 10 == 0 {
                small /= 10;
                exponent += 1;
            }
            return Self::from_parts(i128::from(small), exponent, format);
        }
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        Self::from_parts(mantissa, exponent, format)
    }

    fn from_parts(mantissa: i128, exponent: i32, format: Format) -> Self {
        // Truncations on purpose: the two halves of the 128 bits.
        Self { mantissa_low: mantissa as u64, mantissa_high: (mantissa >> 64) as i64, exponent, format }
    }

    fn mantissa(&self) -> i128 {
        (i128::from(self.mantissa_high) << 64) | i128::from(self.mantissa_low)
    }

    /// Whether the magnitude is larger than `limit` (a non-negative whole number).
    fn exceeds(&self, limit: i128) -> bool {
        if self.exponent < 0 {
            let scaled_limit =
                10_u128.checked_pow(self.exponent.unsigned_abs()).and_then(|f| f.checked_mul(limit.unsigned_abs()));
            return scaled_limit.is_some_and(|l| self.mantissa().unsigned_abs() > l);
        }
        match 10_i128.checked_pow(self.exponent.unsigned_abs()).and_then(|f| self.mantissa().checked_mul(f)) {
            Some(value) => value.unsigned_abs() > limit.unsigned_abs(),
            None => true,
        }
    }

    /// Whether the magnitude is below 1024 (binary quantities that small print in decimal).
    fn below_1024(&self) -> bool {
        !self.exceeds(1023)
    }

    /// Writes the canonical form: Go's `Quantity.String()`, but for one case. Go prints a
    /// binary-SI whole number that takes no binary suffix (1024 or more, no multiple of 1024)
    /// as a bare number, which reads back as decimal SI and then prints differently
    /// (`317449305000`, then `317449305k`); we print the decimal form at once, the text Go
    /// settles on, so printing what we read gives back what we printed.
    fn write_canonical(&self, out: &mut impl fmt::Write) -> fmt::Result {
        if self.mantissa() == 0 {
            return out.write_char('0');
        }
        let binary_multiple = match self.format {
            Format::BinarySI if !self.below_1024() => self.as_i64().filter(|value| value % 1024 == 0),
            _ => None,
        };
        if let Some(value) = binary_multiple {
            let (mut amount, mut power) = (value, 0);
            while amount % 1024 == 0 && power < 6 {
                amount /= 1024;
                power += 1;
            }
            write!(out, "{amount}")?;
            return out.write_str(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power]);
        }
        // Decimal forms: the exponent goes down to a multiple of three by growing the mantissa.
        let shift = self.exponent.rem_euclid(3);
        let exponent = self.exponent - shift;
        match i64::try_from(self.mantissa()) {
            // 128-bit formatting divides in 128 bits; nearly every mantissa fits 64.
            Ok(small) => write!(out, "{small}")?,
            Err(_) => write!(out, "{}", self.mantissa())?,
        }
        for _ in 0..shift {
            out.write_char('0')?;
        }
        let decimal_format =
            if self.format == Format::DecimalExponent { Format::DecimalExponent } else { Format::DecimalSI };
        match (decimal_format, exponent) {
            (_, 0) => Ok(()),
            (Format::DecimalSI, -9) => out.write_char('n'),
            (Format::DecimalSI, -6) => out.write_char('u'),
            (Format::DecimalSI, -3) => out.write_char('m'),
            (Format::DecimalSI, 3) => out.write_char('k'),
            (Format::DecimalSI, 6) => out.write_char('M'),
            (Format::DecimalSI, 9) => out.write_char('G'),
            (Format::DecimalSI, 12) => out.write_char('T'),
            (Format::DecimalSI, 15) => out.write_char('P'),
            (Format::DecimalSI, 18) => out.write_char('E'),
            (_, exponent) => write!(out, "e{exponent}"),
        }
    }
}

/// The digits of `number` as `mantissa × 10^exponent`. Trailing zeros go into the exponent
/// rather than the mantissa, so any text the printer writes (a mantissa of up to 38 digits,
/// then up to two zeros) reads back, and so does a long run of zeros (Go keeps any precision).
fn parse_decimal(number: &str) -> Result<(i128, i32), QuantityError> {
    parse_small_whole(number).map_or_else(|| parse_any_decimal(number), Ok)
}

/// [`parse_decimal`] for any text, in 128-bit arithmetic.
fn parse_any_decimal(number: &str) -> Result<(i128, i32), QuantityError> {
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(QuantityError::Format);
    }
    let mut mantissa: i128 = 0;
    // Zeros read since the last other digit, not yet in the mantissa.
    let mut zeros: u32 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        if digit == b'0' {
            zeros = zeros.checked_add(1).ok_or(QuantityError::TooLarge)?;
            continue;
        }
        let scale = if mantissa == 0 { Some(1) } else { zeros.checked_add(1).and_then(|z| 10_i128.checked_pow(z)) };
        mantissa = scale
            .and_then(|scale| mantissa.checked_mul(scale))
            .and_then(|m| m.checked_add(i128::from(digit - b'0')))
            .ok_or(QuantityError::TooLarge)?;
        zeros = 0;
    }
    let exponent = i64::from(zeros) - i64::try_from(fraction.len()).map_err(|_| QuantityError::TooLarge)?;
    Ok((mantissa, i32::try_from(exponent).map_err(|_| QuantityError::TooLarge)?))
}

/// [`parse_decimal`] for what nearly every quantity is, a whole number of up to 18 digits, in
/// 64-bit arithmetic (128-bit division is a library call); `None` for anything else.
fn parse_small_whole(number: &str) -> Option<(i128, i32)> {
    if number.is_empty() || number.len() > 18 || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut value = number.bytes().fold(0_u64, |value, digit| value * 10 + u64::from(digit - b'0'));
    if value == 0 {
        // As the general path reads it: every digit a zero not yet in the mantissa.
        return Some((0, i32::try_from(number.len()).ok()?));
    }
    let mut zeros = 0;
    while value % 10 == 0 {
        value /= 10;
        zeros += 1;
    }
    Some((i128::from(value), zeros))
}

fn parse_exponent(text: &str) -> Result<i32, QuantityError> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Suffix);
    }
    text.parse().map_err(|_| QuantityError::TooLarge)
}

fn binary_power(suffix: &str) -> u32 {
    match suffix {
        "Ki" => 1,
        "Mi" => 2,
        "Gi" => 3,
        "Ti" => 4,
        "Pi" => 5,
        _ => 6,
    }
}

fn decimal_power(suffix: &str) -> i32 {
    match suffix {
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        _ => 18,
    }
}

/// Go rounds any non-zero amount finer than 1n up (away from zero) to the next nano unit.
fn round_up_to_nano(mantissa: i128, exponent: i32) -> Result<(i128, i32), QuantityError> {
    if exponent >= MIN_EXPONENT || mantissa == 0 {
        return Ok((mantissa, exponent));
    }
    let drop = (MIN_EXPONENT - exponent).unsigned_abs();
    let Some(divisor) = 10_i128.checked_pow(drop) else {
        // Every digit is below a nano unit.
        return Ok((mantissa.signum(), MIN_EXPONENT));
    };
    let magnitude = mantissa.abs();
    let rounded = magnitude / divisor + i128::from(magnitude % divisor != 0);
    Ok((rounded * mantissa.signum(), MIN_EXPONENT))
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.mantissa() == other.mantissa() && self.exponent == other.exponent
    }
}

impl Eq for Quantity {}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.mantissa().hash(state);
        self.exponent.hash(state);
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_canonical(f)
    }
}

impl fmt::Debug for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quantity({self})")
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl Default for Quantity {
    fn default() -> Self {
        Self::from_i64(0)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Printed whole first, so a JSON serializer escapes one string rather than each piece
        // the printer writes (`collect_str`); a canonical form is at most 54 characters.
        let mut text = CanonicalText::default();
        match self.write_canonical(&mut text) {
            Ok(()) => serializer.serialize_str(text.as_str()),
            Err(fmt::Error) => serializer.collect_str(self),
        }
    }
}

/// A quantity's canonical text, on the stack.
struct CanonicalText {
    bytes: [u8; 64],
    len: usize,
}

impl Default for CanonicalText {
    fn default() -> Self {
        Self { bytes: [0; 64], len: 0 }
    }
}

impl CanonicalText {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in, so this is UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl fmt::Write for CanonicalText {
    fn write_str(&mut self, piece: &str) -> fmt::Result {
        let end = self.len.checked_add(piece.len()).filter(|&end| end <= self.bytes.len()).ok_or(fmt::Error)?;
        self.bytes[self.len..end].copy_from_slice(piece.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity (a string such as \"4Gi\" or \"500m\", or a number)")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Quantity, E> {
        Quantity::parse(text).map_err(|err| E::custom(format!("invalid quantity {text:?}: {err}")))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Quantity, E> {
        Ok(Quantity::from_i64(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Quantity, E> {
        Ok(Quantity::normalized(i128::from(value), 0, Format::DecimalSI))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Quantity, E> {
        if !value.is_finite() {
            return Err(E::custom("invalid quantity: not a finite number"));
        }
        self.visit_str(&value.to_string())
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true,
        })
    }
}

/// The regular expression the upstream CRD schema puts on every quantity.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_read_in_64_bits_as_in_128() {
        let mut numbers: Vec<String> =
            ["0", "00", "007", "10", "100", "120300", "999999999999999999"].iter().map(|n| n.to_string()).collect();
        for digits in 1..=18 {
            numbers.push("9".repeat(digits));
            numbers.push(format!("1{}", "0".repeat(digits - 1)));
            numbers.push(format!("{}5", "0".repeat(digits - 1)));
        }
        for number in &numbers {
            assert_eq!(parse_small_whole(number).map(Ok), Some(parse_any_decimal(number)), "{number}");
        }
        // Longer, fractional or signed text goes the general way.
        for other in ["1000000000000000000", "1.5", ".5", "", "-1", "1e3"] {
            assert_eq!(parse_small_whole(other), None, "{other}");
        }
    }

    #[test]
    fn a_quantity_serializes_as_it_prints() {
        for text in
            ["0", "22", "1536Mi", "500m", "4G", "1.5Gi", "-7n", "1e-7", "17179869184", "123456789012345678901234567890"]
        {
            let Ok(quantity) = Quantity::parse(text) else { panic!("{text} does not parse") };
            let json = serde_json::to_string(&quantity).unwrap_or_default();
            assert_eq!(json, format!("\"{quantity}\""), "{text}");
        }
    }

    #[test]
    fn a_quantity_takes_24_bytes_and_keeps_every_mantissa() {
        assert_eq!(std::mem::size_of::<Quantity>(), 24);
        for mantissa in [
            0,
            1,
            -1,
            i128::from(u64::MAX),
            -i128::from(u64::MAX) - 7,
            10_i128.pow(37) + 3,
            -(10_i128.pow(37)),
            i128::MIN,
            i128::MAX,
        ] {
            assert_eq!(Quantity::from_parts(mantissa, 0, Format::DecimalSI).mantissa(), mantissa);
        }
    }

    fn canonical(text: &str) -> String {
        Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}")).to_string()
    }

    #[test]
    fn prints_what_go_prints() {
        // (input, Go's Quantity.String() of ParseQuantity(input))
        let table = [
            ("0", "0"),
            ("30", "30"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("4000000000", "4G"),
            ("17179869184", "17179869184"),
            ("1Ki", "1Ki"),
            ("1024Ki", "1Mi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("100m", "100m"),
            ("0.1", "100m"),
            ("1.5", "1500m"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("5e-3", "5e-3"),
            ("12e2", "1200"),
            ("10e5", "1e6"),
            ("1M", "1M"),
            ("1000k", "1M"),
            ("-2k", "-2k"),
            ("+5", "5"),
            ("1n", "1n"),
            ("0.0000000001", "1n"),
            ("1.2345678901", "1234567891n"),
            ("100Mi", "100Mi"),
            ("1000Ki", "1000Ki"),
            ("0.5Ki", "512"),
            ("1023Ki", "1023Ki"),
            ("1.1Ki", "1126400m"),
            (".5", "500m"),
            ("5.", "5"),
            ("1E", "1E"),
            ("1000E", "1e21"),
            ("8Ei", "9223372036854775807"),
        ];
        for (input, want) in table {
            assert_eq!(canonical(input), want, "input {input}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "-", ".", "1.2.3", "1x", "1Kb", "1e", "1e+", "Ki", "1 ", " 1", "1e2.5", "1..2"] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should not parse");
        }
        assert_eq!(Quantity::parse("1x"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("9".repeat(60).as_str()), Err(QuantityError::TooLarge));
    }

    #[test]
    fn binary_values_off_a_1024_multiple_print_in_the_decimal_form_they_reread_as() {
        let binary = Quantity::from_i64_binary(317_449_305_000);
        assert_eq!(binary.to_string(), "317449305k");
        let reread = Quantity::parse(&binary.to_string()).unwrap();
        assert_eq!((reread, reread.to_string()), (binary, binary.to_string()));
        assert_eq!(canonical("2.9296875Ki"), "3k");
        assert_eq!(Quantity::from_i64_binary(3 << 30).to_string(), "3Gi");
        assert_eq!(Quantity::from_i64_binary(1536).to_string(), "1536");
    }

    #[test]
    fn every_printed_form_reads_back() {
        // 38 digits fit the mantissa; printed with its exponent folded in, the text has 39.
        for text in ["99999999999999999999999999999999999999e1", "99999999999999999999999999999999999999e2", "-1e-1"] {
            let quantity = Quantity::parse(text).unwrap();
            let printed = quantity.to_string();
            assert_eq!(Quantity::parse(&printed), Ok(quantity), "{text} printed as {printed}");
        }
        assert_eq!(canonical(&format!("1{}", "0".repeat(60))), "1e60");
        assert_eq!(canonical(&format!("0.{}1", "0".repeat(40))), "1n");
        assert_eq!(canonical(&format!("{}7", "0".repeat(60))), "7");
    }

    #[test]
    fn equality_is_by_value() {
        assert_eq!(Quantity::parse("1Ki").unwrap(), Quantity::parse("1024").unwrap());
        assert_eq!(Quantity::parse("2k").unwrap(), Quantity::from_i64(2000));
        assert_ne!(Quantity::parse("1k").unwrap(), Quantity::parse("1Ki").unwrap());
    }

    #[test]
    fn integer_views() {
        let q = Quantity::parse("1500m").unwrap();
        assert_eq!(q.as_i64(), None);
        assert_eq!(q.ceil_i64(), Some(2));
        assert_eq!(q.ceil_milli_i64(), Some(1500));
        assert_eq!(Quantity::parse("4Gi").unwrap().as_i64(), Some(4 << 30));
        assert_eq!(Quantity::parse("-1500m").unwrap().ceil_i64(), Some(-1));
    }

    #[test]
    fn json_accepts_numbers_and_strings_and_writes_strings() {
        let q: Quantity = serde_json::from_str("20").unwrap();
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"20\"");
        let q: Quantity = serde_json::from_str("\"4000000000\"").unwrap();
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"4G\"");
        let q: Quantity = serde_json::from_str("1.5").unwrap();
        assert_eq!(q.to_string(), "1500m");
        let err = serde_json::from_str::<Quantity>("\"12 cores\"").unwrap_err();
        assert!(err.to_string().contains("invalid quantity \"12 cores\""), "{err}");
        assert!(serde_json::from_str::<Quantity>("true").is_err());
    }
}
