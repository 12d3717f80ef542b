//! LEB89: non-negative integers as self-delimiting runs of printable ASCII that JSON never
//! escapes.
//!
//! The alphabet is `0x21..=0x7E` without `"`, `&`, `<`, `>`, `\` (89 symbols). Indices 0..64 are
//! *terminal* symbols (`!` … `e`), 64..89 *continuation* symbols (`f` … `~`). A value below 64 is
//! its terminal; a larger value `v` is `q = (v − 64) / 64` in base 25, most significant digit
//! first and at least one digit, as continuations, then the terminal of `(v − 64) mod 64`.
//!
//! The decoder here is strict where upstream's is not: a truncated value, a byte outside the
//! alphabet or an overflow is an [`Error`] (upstream yields −1, a garbage offset, or panics on
//! bytes ≥ 0x80). It accepts what upstream accepts, including non-canonical leading zero
//! continuations (`ff!` is 64, like `f!`).

/// The 89 symbols in index order.
pub(crate) const ALPHABET: &[u8; 89] =
    b"!#$%'()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_`abcdefghijklmnopqrstuvwxyz{|}~";

/// Number of terminal symbols (indices `0..TERMINALS`).
const TERMINALS: u32 = 64;
/// Base of the continuation digits.
const CONTINUATIONS: u32 = 25;

/// Byte → alphabet index, `NONE` for bytes outside the alphabet.
const NONE: u8 = u8::MAX;
const INDEX: [u8; 256] = {
    let mut table = [NONE; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Why a byte string is not LEB89.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input ends after continuation symbols, before the terminal.
    #[error("LEB89 value truncated at byte {at}")]
    Truncated {
        /// Where the input ended.
        at: usize,
    },
    /// A byte outside the alphabet.
    #[error("byte 0x{byte:02x} at {at} is not LEB89")]
    InvalidByte {
        /// The byte.
        byte: u8,
        /// Its position.
        at: usize,
    },
    /// A value (or a running sum of deltas) beyond `u32`.
    #[error("LEB89 value ending at byte {at} overflows")]
    Overflow {
        /// Where the value ends.
        at: usize,
    },
    /// Offsets to encode that are not strictly increasing.
    #[error("offsets must be strictly increasing, {previous} is followed by {next}")]
    NotAscending {
        /// The earlier offset.
        previous: u32,
        /// The offset that is not above it.
        next: u32,
    },
}

/// Appends the encoding of `value` to `out`.
pub(crate) fn encode_value(value: u32, out: &mut String) {
    if value < TERMINALS {
        out.push(char::from(ALPHABET[value as usize]));
        return;
    }
    let w = value - TERMINALS;
    let (mut q, t) = (w / TERMINALS, w % TERMINALS);
    // u32::MAX needs 6 base-25 digits; collect them least significant first.
    let mut digits = [0u8; 8];
    let mut n = 0;
    loop {
        digits[n] = ALPHABET[(TERMINALS + q % CONTINUATIONS) as usize];
        n += 1;
        q /= CONTINUATIONS;
        if q == 0 {
            break;
        }
    }
    out.extend(digits[..n].iter().rev().map(|&b| char::from(b)));
    out.push(char::from(ALPHABET[t as usize]));
}

/// The encoding of one value.
pub fn encode(value: u32) -> String {
    let mut out = String::with_capacity(2);
    encode_value(value, &mut out);
    out
}

/// A vector: strictly increasing offsets as the first one, then each difference from the one
/// before, concatenated.
pub fn encode_offsets(offsets: &[u32]) -> Result<String, Error> {
    let mut out = String::with_capacity(offsets.len() + offsets.len() / 8);
    let mut previous: Option<u32> = None;
    for &offset in offsets {
        let delta = match previous {
            None => offset,
            Some(previous) if offset > previous => offset - previous,
            Some(previous) => return Err(Error::NotAscending { previous, next: offset }),
        };
        encode_value(delta, &mut out);
        previous = Some(offset);
    }
    Ok(out)
}

/// Decodes the value starting at `pos`; returns it and the position after its terminal.
pub(crate) fn decode_value(input: &[u8], pos: usize) -> Result<(u32, usize), Error> {
    let mut c: u32 = 0;
    let mut continuations = 0usize;
    let mut at = pos;
    loop {
        let Some(&byte) = input.get(at) else {
            return Err(Error::Truncated { at });
        };
        let index = u32::from(INDEX[usize::from(byte)]);
        if index == u32::from(NONE) {
            return Err(Error::InvalidByte { byte, at });
        }
        at += 1;
        if index >= TERMINALS {
            c = c
                .checked_mul(CONTINUATIONS)
                .and_then(|c| c.checked_add(index - TERMINALS))
                .ok_or(Error::Overflow { at })?;
            continuations += 1;
            continue;
        }
        if continuations == 0 {
            return Ok((index, at));
        }
        let value =
            c.checked_mul(TERMINALS).and_then(|v| v.checked_add(TERMINALS + index)).ok_or(Error::Overflow { at })?;
        return Ok((value, at));
    }
}

/// Decodes a vector back into offsets (running sums of the deltas). It does not check that they
/// increase: `!!!` is `[0, 0, 0]`, which a decoder then rejects as duplicated.
pub(crate) fn decode_offsets(input: &[u8]) -> Result<Vec<u32>, Error> {
    let mut offsets = Vec::with_capacity(input.len());
    let (mut pos, mut sum) = (0usize, 0u32);
    while pos < input.len() {
        let (delta, next) = decode_value(input, pos)?;
        sum = sum.checked_add(delta).ok_or(Error::Overflow { at: next })?;
        offsets.push(sum);
        pos = next;
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Value, encoding, bytes: single values generated with upstream's Go encoder (each one
    /// round-trips).
    const VALUES: [(u32, &str, &[u8]); 30] = [
        (0, "!", &[0x21]),
        (1, "#", &[0x23]),
        (2, "$", &[0x24]),
        (31, "D", &[0x44]),
        (32, "E", &[0x45]),
        (63, "e", &[0x65]),
        (64, "f!", &[0x66, 0x21]),
        (65, "f#", &[0x66, 0x23]),
        (88, "f;", &[0x66, 0x3b]),
        (89, "f=", &[0x66, 0x3d]),
        (90, "f?", &[0x66, 0x3f]),
        (100, "fI", &[0x66, 0x49]),
        (127, "fe", &[0x66, 0x65]),
        (128, "g!", &[0x67, 0x21]),
        (1000, "tM", &[0x74, 0x4d]),
        (1599, "}e", &[0x7d, 0x65]),
        (1663, "~e", &[0x7e, 0x65]),
        (1664, "gf!", &[0x67, 0x66, 0x21]),
        (1665, "gf#", &[0x67, 0x66, 0x23]),
        (2047, "gke", &[0x67, 0x6b, 0x65]),
        (7920, "j|U", &[0x6a, 0x7c, 0x55]),
        (7921, "j|V", &[0x6a, 0x7c, 0x56]),
        (40063, "~~e", &[0x7e, 0x7e, 0x65]),
        (40064, "gff!", &[0x67, 0x66, 0x66, 0x21]),
        (100_000, "hrqE", &[0x68, 0x72, 0x71, 0x45]),
        (1_000_000, "~~~!", &[0x7e, 0x7e, 0x7e, 0x21]),
        (1_000_063, "~~~e", &[0x7e, 0x7e, 0x7e, 0x65]),
        (1_000_064, "gfff!", &[0x67, 0x66, 0x66, 0x66, 0x21]),
        (16_777_216, "vypx!", &[0x76, 0x79, 0x70, 0x78, 0x21]),
        (2_147_483_647, "ip|rhke", &[0x69, 0x70, 0x7c, 0x72, 0x68, 0x6b, 0x65]),
    ];

    #[test]
    fn the_alphabet_is_printable_ascii_without_what_json_escapes() {
        let expected: Vec<u8> = (0x21..=0x7e).filter(|b| !b"\"&<>\\".contains(b)).collect();
        assert_eq!(ALPHABET.as_slice(), expected.as_slice());
        assert_eq!(&ALPHABET[..TERMINALS as usize].last(), &Some(&b'e'));
        assert_eq!(ALPHABET[TERMINALS as usize], b'f');
    }

    #[test]
    fn single_values_encode_and_decode_as_the_spec_table() {
        for (value, text, bytes) in VALUES {
            assert_eq!(encode(value), text, "{value}");
            assert_eq!(text.as_bytes(), bytes, "{value}");
            assert_eq!(decode_value(bytes, 0), Ok((value, bytes.len())), "{value}");
        }
    }

    #[test]
    fn output_lengths_change_at_the_documented_boundaries() {
        for (value, len) in [
            (63, 1),
            (64, 2),
            (1663, 2),
            (1664, 3),
            (40_063, 3),
            (40_064, 4),
            (1_000_063, 4),
            (1_000_064, 5),
            (25_000_063, 5),
            (25_000_064, 6),
            (625_000_063, 6),
            (625_000_064, 7),
        ] {
            assert_eq!(encode(value).len(), len, "{value}");
        }
    }

    #[test]
    fn offset_vectors_are_delta_encoded_as_the_spec_table() {
        let cases: [(&[u32], &str); 7] = [
            (&[], ""),
            (&[0], "!"),
            (&[1], "#"),
            (&[0, 1, 2, 3], "!###"),
            (&[5, 10, 70, 71, 200], "((b#g#"),
            (&[63, 64, 127, 128], "e#e#"),
            (&[0, 1664, 40064], "!gf!}~!"),
        ];
        for (offsets, text) in cases {
            assert_eq!(encode_offsets(offsets).as_deref(), Ok(text), "{offsets:?}");
            assert_eq!(decode_offsets(text.as_bytes()).as_deref(), Ok(offsets), "{text}");
        }
        assert_eq!(encode_offsets(&[3, 3]), Err(Error::NotAscending { previous: 3, next: 3 }));
    }

    #[test]
    fn odd_input_decodes_where_upstream_agrees_and_fails_where_upstream_yields_minus_one() {
        // Accepted as upstream does, with the same values and positions.
        assert_eq!(decode_value(b"ff!", 0), Ok((64, 3)));
        assert_eq!(decode_value(b"fff!", 0), Ok((64, 4)));
        assert_eq!(decode_value(b"#$%", 0), Ok((1, 1)));
        assert_eq!(decode_offsets(b"#$%"), Ok(vec![1, 3, 6]));
        assert_eq!(decode_offsets(b"!!!"), Ok(vec![0, 0, 0]));
        assert_eq!(decode_offsets(b"ff!"), Ok(vec![64]));
        assert_eq!(decode_offsets(b""), Ok(vec![]));
        // Upstream yields -1 (or, for `f"`, the garbage 63): corrupted for us.
        assert_eq!(decode_value(b"", 0), Err(Error::Truncated { at: 0 }));
        assert_eq!(decode_value(b"f", 0), Err(Error::Truncated { at: 1 }));
        assert_eq!(decode_value(b"ff", 0), Err(Error::Truncated { at: 2 }));
        assert_eq!(decode_value(b"\"", 0), Err(Error::InvalidByte { byte: b'"', at: 0 }));
        assert_eq!(decode_value(b"f\"", 0), Err(Error::InvalidByte { byte: b'"', at: 1 }));
        assert_eq!(decode_value(b" ", 0), Err(Error::InvalidByte { byte: b' ', at: 0 }));
        assert_eq!(decode_offsets(b"f"), Err(Error::Truncated { at: 1 }));
        // Upstream panics on these.
        assert_eq!(decode_value(&[0xc3, 0xa9], 0), Err(Error::InvalidByte { byte: 0xc3, at: 0 }));
        assert!(matches!(decode_value(b"~~~~~~~~!", 0), Err(Error::Overflow { .. })));
    }

    proptest! {
        #[test]
        fn every_value_round_trips(value in any::<u32>()) {
            let text = encode(value);
            prop_assert!(text.bytes().all(|b| INDEX[usize::from(b)] != NONE));
            prop_assert_eq!(decode_value(text.as_bytes(), 0), Ok((value, text.len())));
        }

        #[test]
        fn every_ascending_vector_round_trips(mut offsets in proptest::collection::vec(0u32..5_000_000, 0..50)) {
            offsets.sort_unstable();
            offsets.dedup();
            let text = encode_offsets(&offsets).unwrap();
            prop_assert_eq!(decode_offsets(text.as_bytes()), Ok(offsets));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = decode_offsets(&bytes);
        }
    }
}
