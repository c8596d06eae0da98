//! A certificate's validity, read from its DER by hand: the one field renewal needs, not
//! worth an X.509 parser dependency.

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

/// One DER element: its tag, its contents, and what follows it.
fn element(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const EXPLICIT_VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// `(notBefore, notAfter)` of an X.509 certificate.
pub(crate) fn validity(der: &[u8]) -> Option<(OffsetDateTime, OffsetDateTime)> {
    let (SEQUENCE, cert, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(cert)? else {
        return None;
    };
    if tbs.first() == Some(&EXPLICIT_VERSION) {
        tbs = element(tbs)?.2;
    }
    // serialNumber, signature, issuer
    for _ in 0..3 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, validity, _) = element(tbs)? else {
        return None;
    };
    let (tag, not_before, rest) = element(validity)?;
    let not_before = asn1_time(tag, not_before)?;
    let (tag, not_after, _) = element(rest)?;
    Some((not_before, asn1_time(tag, not_after)?))
}

fn asn1_time(tag: u8, text: &[u8]) -> Option<OffsetDateTime> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        UTC_TIME => {
            let yy: i32 = text.get(..2)?.parse().ok()?;
            // RFC 5280: two-digit years 50-99 are 19xx.
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        GENERALIZED_TIME => (text.get(..4)?.parse().ok()?, &text[4..]),
        _ => return None,
    };
    let field = |i: usize| -> Option<u8> { rest.get(i..i + 2)?.parse().ok() };
    let date = Date::from_calendar_date(year, Month::try_from(field(0)?).ok()?, field(2)?).ok()?;
    let time = Time::from_hms(field(4)?, field(6)?, field(8)?).ok()?;
    Some(PrimitiveDateTime::new(date, time).assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_rcgen_wrote() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2031, 2, 3);
        params.not_after = rcgen::date_time_ymd(2061, 4, 5);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (from, to) = validity(cert.der()).unwrap();
        assert_eq!((from.year(), from.month() as u8, from.day()), (2031, 2, 3));
        assert_eq!((to.year(), to.month() as u8, to.day()), (2061, 4, 5));
        assert!(validity(b"\x30\x03\x02\x01").is_none());
    }
}
