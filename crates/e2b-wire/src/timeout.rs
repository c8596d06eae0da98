//! `Connect-Timeout-Ms`: the client's deadline for the whole call, in milliseconds.
//!
//! The protocol allows at most 10 ASCII digits (up to about 115 days). Signs, spaces and other
//! characters are refused, where connect-go's `strconv.ParseInt` would let a `+` or `-` through.
//! `0` parses as a zero duration: a deadline already past, which the handler answers with
//! `deadline_exceeded`. (The SDKs never send it: a timeout of 0 means "none" to them and leaves
//! the header out.)

use std::time::Duration;

use crate::error::WireError;

/// The most digits the protocol allows.
const MAX_DIGITS: usize = 10;

/// The deadline a `Connect-Timeout-Ms` value gives.
pub fn parse_timeout(value: &str) -> Result<Duration, WireError> {
    let invalid = || WireError::InvalidTimeout {
        value: value.to_owned(),
    };
    let well_formed =
        (1..=MAX_DIGITS).contains(&value.len()) && value.bytes().all(|byte| byte.is_ascii_digit());
    if !well_formed {
        return Err(invalid());
    }
    // Ten digits always fit a u64; the error arm is never taken.
    let millis: u64 = value.parse().map_err(|_| invalid())?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::Code;

    #[test]
    fn digits_are_milliseconds() {
        assert_eq!(parse_timeout("1").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_timeout("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_timeout("000250").unwrap(), Duration::from_millis(250));
        assert_eq!(
            parse_timeout("9999999999").unwrap(),
            Duration::from_millis(9_999_999_999)
        );
    }

    #[test]
    fn anything_else_is_invalid_argument() {
        for bad in [
            "",
            "10000000000",
            "00000000001",
            "+5",
            "-5",
            " 5",
            "5 ",
            "5ms",
            "1.5",
            "1e3",
            "٣",
            "0x10",
        ] {
            let error = parse_timeout(bad).unwrap_err();
            assert_eq!(error.code(), Code::InvalidArgument, "{bad:?}");
            assert!(matches!(error, WireError::InvalidTimeout { .. }), "{bad:?}");
        }
    }
}
