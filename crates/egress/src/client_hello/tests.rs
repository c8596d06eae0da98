//! ClientHello parser tests. The hellos are built byte by byte here (no TLS library), laid
//! out like a modern browser's: TLS 1.2 legacy version, 32-byte session id, GREASE.

use super::*;

/// One extension: type and data.
type Ext = (u16, Vec<u8>);

fn u16b(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap().to_be_bytes()
}

fn sni_ext(names: &[&[u8]]) -> Ext {
    let mut list = Vec::new();
    for name in names {
        list.push(0);
        list.extend_from_slice(&u16b(name.len()));
        list.extend_from_slice(name);
    }
    let mut data = u16b(list.len()).to_vec();
    data.extend_from_slice(&list);
    (EXT_SERVER_NAME, data)
}

fn alpn_ext(protocols: &[&[u8]]) -> Ext {
    let mut list = Vec::new();
    for p in protocols {
        list.push(u8::try_from(p.len()).unwrap());
        list.extend_from_slice(p);
    }
    let mut data = u16b(list.len()).to_vec();
    data.extend_from_slice(&list);
    (EXT_ALPN, data)
}

/// Extensions a real client sends besides SNI/ALPN: GREASE, supported_versions,
/// supported_groups, key_share (x25519, 32 bytes).
fn common_exts() -> Vec<Ext> {
    let mut key_share = u16b(2 + 2 + 32).to_vec();
    key_share.extend_from_slice(&[0x00, 0x1d, 0x00, 0x20]);
    key_share.extend_from_slice(&[0x42; 32]);
    vec![
        (0x0a0a, Vec::new()),
        (43, vec![4, 0x03, 0x04, 0x03, 0x03]),
        (10, vec![0, 4, 0x00, 0x1d, 0x00, 0x17]),
        (51, key_share),
    ]
}

/// A ClientHello body with these extensions (`None` = no extensions block at all).
fn body(exts: Option<&[Ext]>) -> Vec<u8> {
    let mut b = vec![0x03, 0x03];
    b.extend_from_slice(&[0x11; 32]);
    b.push(32);
    b.extend_from_slice(&[0x22; 32]);
    b.extend_from_slice(&[0x00, 0x06, 0x13, 0x01, 0x13, 0x02, 0x13, 0x03]);
    b.extend_from_slice(&[0x01, 0x00]);
    if let Some(exts) = exts {
        let mut all = Vec::new();
        for (t, d) in exts {
            all.extend_from_slice(&t.to_be_bytes());
            all.extend_from_slice(&u16b(d.len()));
            all.extend_from_slice(d);
        }
        b.extend_from_slice(&u16b(all.len()));
        b.extend_from_slice(&all);
    }
    b
}

/// The handshake message: type 1 and a 24-bit length.
fn handshake(body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap().to_be_bytes();
    let mut h = vec![HANDSHAKE_CLIENT_HELLO, len[1], len[2], len[3]];
    h.extend_from_slice(body);
    h
}

/// The handshake message cut into records of at most `fragment` payload bytes.
fn records(handshake: &[u8], fragment: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in handshake.chunks(fragment) {
        out.extend_from_slice(&[CONTENT_HANDSHAKE, 0x03, 0x01]);
        out.extend_from_slice(&u16b(chunk.len()));
        out.extend_from_slice(chunk);
    }
    out
}

fn hello_with(exts: &[Ext]) -> Vec<u8> {
    records(&handshake(&body(Some(exts))), MAX_RECORD_PAYLOAD)
}

fn normal_exts(sni: &[u8]) -> Vec<Ext> {
    let mut exts = common_exts();
    exts.insert(1, sni_ext(&[sni]));
    exts.push(alpn_ext(&[b"h2", b"http/1.1"]));
    exts
}

fn normal_hello(sni: &str) -> Vec<u8> {
    hello_with(&normal_exts(sni.as_bytes()))
}

#[test]
fn parses_a_normal_hello() {
    let info = parse_client_hello(&normal_hello("api.anthropic.com")).unwrap();
    assert_eq!(info.sni, "api.anthropic.com");
    assert!(!info.offers_ech);
    assert_eq!(info.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
}

#[test]
fn trailing_dot_and_upper_case_are_canonicalised() {
    let info = parse_client_hello(&normal_hello("API.Anthropic.COM.")).unwrap();
    assert_eq!(info.sni, "api.anthropic.com");
}

#[test]
fn bytes_after_the_hello_records_are_ignored() {
    // E.g. a TLS 1.3 middlebox-compat ChangeCipherSpec or early data already buffered.
    let mut buf = normal_hello("example.com");
    buf.extend_from_slice(&[20, 3, 3, 0, 1, 1, 23, 3, 3, 0, 2, 0xaa, 0xbb]);
    assert_eq!(parse_client_hello(&buf).unwrap().sni, "example.com");
}

#[test]
fn every_prefix_is_incomplete_with_an_honest_lower_bound() {
    for fragment in [MAX_RECORD_PAYLOAD, 100, 7, 1] {
        let full = records(
            &handshake(&body(Some(&normal_exts(b"example.com")))),
            fragment,
        );
        for cut in 0..full.len() {
            match parse_client_hello(&full[..cut]) {
                Err(HelloError::Incomplete { needed }) => {
                    assert!(
                        needed > cut,
                        "fragment {fragment} cut {cut}: needed {needed}"
                    );
                    assert!(
                        needed <= full.len(),
                        "fragment {fragment} cut {cut}: needed {needed} > {}",
                        full.len()
                    );
                }
                other => panic!("fragment {fragment} cut {cut}: {other:?}"),
            }
        }
        assert_eq!(parse_client_hello(&full).unwrap().sni, "example.com");
    }
}

#[test]
fn growing_by_needed_reaches_the_hello() {
    // The gateway's loop: read until `needed`, parse again. It must terminate in few steps
    // for one-byte records too.
    let full = records(&handshake(&body(Some(&normal_exts(b"example.com")))), 1);
    let mut have = 0;
    let mut steps = 0;
    loop {
        steps += 1;
        match parse_client_hello(&full[..have]) {
            Ok(info) => {
                assert_eq!(info.sni, "example.com");
                break;
            }
            Err(HelloError::Incomplete { needed }) => have = needed,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(steps <= full.len() / 5 + 2, "{steps} steps");
}

#[test]
fn fragmented_across_records_at_every_split() {
    let hs = handshake(&body(Some(&normal_exts(b"frag.example.org"))));
    for split in 1..hs.len() {
        let mut buf = records(&hs[..split], MAX_RECORD_PAYLOAD);
        buf.extend_from_slice(&records(&hs[split..], MAX_RECORD_PAYLOAD));
        assert_eq!(
            parse_client_hello(&buf).unwrap().sni,
            "frag.example.org",
            "split {split}"
        );
    }
}

#[test]
fn no_sni() {
    assert!(matches!(
        parse_client_hello(&hello_with(&common_exts())),
        Err(HelloError::NoSni)
    ));
    let no_ext = records(&handshake(&body(None)), MAX_RECORD_PAYLOAD);
    assert!(matches!(
        parse_client_hello(&no_ext),
        Err(HelloError::NoSni)
    ));
    // An empty server_name list.
    let mut exts = common_exts();
    exts.push(sni_ext(&[]));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::NoSni)
    ));
}

#[test]
fn two_server_name_extensions() {
    let mut exts = normal_exts(b"example.com");
    exts.push(sni_ext(&[b"evil.example.net"]));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::DuplicateSni)
    ));
    // Same name twice is still refused.
    let mut exts = normal_exts(b"example.com");
    exts.push(sni_ext(&[b"example.com"]));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::DuplicateSni)
    ));
}

#[test]
fn two_host_name_entries() {
    let mut exts = common_exts();
    exts.push(sni_ext(&[b"example.com", b"evil.example.net"]));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::DuplicateSni)
    ));
}

#[test]
fn ip_literal_sni() {
    for lit in [
        "127.0.0.1",
        "10.0.0.1.",
        "169.254.169.254",
        "::1",
        "::ffff:127.0.0.1",
        "[::1]",
    ] {
        assert!(
            matches!(
                parse_client_hello(&normal_hello(lit)),
                Err(HelloError::IpLiteralSni)
            ),
            "{lit}"
        );
    }
}

#[test]
fn invalid_dns_names() {
    for bad in [
        "localhost",
        "exa_mple.com",
        "a..com",
        "",
        "-x.com",
        "a.com:443",
        "127.1",
    ] {
        assert!(
            matches!(
                parse_client_hello(&normal_hello(bad)),
                Err(HelloError::BadSni { .. })
            ),
            "{bad:?}"
        );
    }
    let non_utf8 = hello_with(&[sni_ext(&[b"ex\xffample.com"])]);
    assert!(matches!(
        parse_client_hello(&non_utf8),
        Err(HelloError::BadSni { .. })
    ));
    let nul = hello_with(&[sni_ext(&[b"example.com\0.evil.net"])]);
    assert!(matches!(
        parse_client_hello(&nul),
        Err(HelloError::BadSni { .. })
    ));
}

#[test]
fn ech_is_refused_even_with_a_valid_outer_sni() {
    for ext_type in [EXT_ECH, EXT_ECH_OUTER_EXTENSIONS, 0xfe08, 0xfe0c, EXT_ESNI] {
        let mut exts = normal_exts(b"public.example.com");
        // An outer ECH extension: type 0 (outer), cipher suite, config id, enc, payload.
        exts.push((ext_type, vec![0, 0, 1, 0, 1, 7, 0, 2, 9, 9, 0, 3, 1, 2, 3]));
        assert!(
            matches!(
                parse_client_hello(&hello_with(&exts)),
                Err(HelloError::EchOffered)
            ),
            "{ext_type:#x}"
        );
    }
    // ECH without SNI is still reported as ECH.
    let mut exts = common_exts();
    exts.push((EXT_ECH, vec![0]));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::EchOffered)
    ));
}

#[test]
fn garbage_is_not_tls() {
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
        b"SSH-2.0-OpenSSH_9.2\r\n",
        b"\x00",
        b"\xff\xff\xff\xff\xff",
        b"\x80\x2e\x01\x03\x01",
    ] {
        assert!(
            matches!(parse_client_hello(garbage), Err(HelloError::NotTls)),
            "{garbage:?}"
        );
    }
    // Handshake type but a record version that is not 3.x.
    assert!(matches!(
        parse_client_hello(&[22, 2, 0, 0, 5]),
        Err(HelloError::NotTls)
    ));
    assert!(matches!(
        parse_client_hello(&[22, 3, 9]),
        Err(HelloError::NotTls)
    ));
}

#[test]
fn tls_alert_and_other_records_are_not_a_client_hello() {
    let alert = [21, 3, 3, 0, 2, 2, 40];
    assert!(matches!(
        parse_client_hello(&alert),
        Err(HelloError::NotClientHello)
    ));
    assert!(matches!(
        parse_client_hello(&alert[..1]),
        Err(HelloError::NotClientHello)
    ));
    let app_data = [23, 3, 3, 0, 3, 1, 2, 3];
    assert!(matches!(
        parse_client_hello(&app_data),
        Err(HelloError::NotClientHello)
    ));
    // A ServerHello (handshake type 2).
    let mut server_hello = handshake(&body(Some(&normal_exts(b"example.com"))));
    server_hello[0] = 2;
    let buf = records(&server_hello, MAX_RECORD_PAYLOAD);
    assert!(matches!(
        parse_client_hello(&buf),
        Err(HelloError::NotClientHello)
    ));
    // Refused on the first payload byte, without waiting for the rest.
    assert!(matches!(
        parse_client_hello(&buf[..6]),
        Err(HelloError::NotClientHello)
    ));
}

#[test]
fn huge_lengths_are_too_large() {
    // Record length over 2^14.
    assert!(matches!(
        parse_client_hello(&[22, 3, 1, 0x40, 0x01]),
        Err(HelloError::TooLarge)
    ));
    assert!(matches!(
        parse_client_hello(&[22, 3, 1, 0xff, 0xff]),
        Err(HelloError::TooLarge)
    ));
    // Handshake length of 16 MiB in a small record.
    assert!(matches!(
        parse_client_hello(&[22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff]),
        Err(HelloError::TooLarge)
    ));
    // Exactly at the cap: a handshake whose total needs more than MAX bytes of records.
    let body_len = MAX_CLIENT_HELLO_BYTES; // + 4 header > cap
    let len = u32::try_from(body_len).unwrap().to_be_bytes();
    assert!(matches!(
        parse_client_hello(&[22, 3, 1, 0, 4, 1, len[1], len[2], len[3]]),
        Err(HelloError::TooLarge)
    ));
    // Many one-byte records whose headers push the total over the cap: refused, not read
    // forever. A 4 KiB hello in 1-byte records is 20 KiB on the wire.
    let mut exts = normal_exts(b"example.com");
    exts.push((0x0015, vec![0; 4000])); // padding
    let buf = records(&handshake(&body(Some(&exts))), 1);
    let mut have = 0;
    let outcome = loop {
        match parse_client_hello(&buf[..have.min(buf.len())]) {
            Err(HelloError::Incomplete { needed }) => {
                assert!(needed <= MAX_CLIENT_HELLO_BYTES);
                have = needed;
            }
            other => break other,
        }
    };
    assert!(matches!(outcome, Err(HelloError::TooLarge)), "{outcome:?}");
}

#[test]
fn the_same_large_hello_in_normal_records_is_fine() {
    let mut exts = normal_exts(b"example.com");
    exts.push((0x0015, vec![0; 4000]));
    let buf = records(&handshake(&body(Some(&exts))), MAX_RECORD_PAYLOAD);
    assert_eq!(parse_client_hello(&buf).unwrap().sni, "example.com");
}

#[test]
fn malformed_structures() {
    let good = body(Some(&normal_exts(b"example.com")));
    // Truncated body (the handshake length says so, the body is short): every cut refused.
    for cut in 0..good.len() {
        let buf = records(&handshake(&good[..cut]), MAX_RECORD_PAYLOAD);
        assert!(
            matches!(
                parse_client_hello(&buf),
                Err(HelloError::Malformed { .. } | HelloError::NoSni)
            ),
            "cut {cut}"
        );
    }
    // Extra bytes after the extensions.
    let mut long = good.clone();
    long.push(0);
    assert!(matches!(
        parse_client_hello(&records(&handshake(&long), 1000)),
        Err(HelloError::Malformed { .. })
    ));
    // A second handshake message in the same record as the ClientHello.
    let mut two = handshake(&good);
    two.extend_from_slice(&handshake(&good));
    assert!(matches!(
        parse_client_hello(&records(&two, MAX_RECORD_PAYLOAD)),
        Err(HelloError::Malformed { .. })
    ));
    // An alert interleaved between two fragments.
    let hs = handshake(&good);
    let mut buf = records(&hs[..10], 100);
    buf.extend_from_slice(&[21, 3, 3, 0, 2, 1, 0]);
    buf.extend_from_slice(&records(&hs[10..], 1000));
    assert!(matches!(
        parse_client_hello(&buf),
        Err(HelloError::Malformed { .. })
    ));
    // A zero-length handshake record.
    assert!(matches!(
        parse_client_hello(&[22, 3, 1, 0, 0]),
        Err(HelloError::Malformed { .. })
    ));
    // Duplicate non-SNI extension.
    let mut exts = normal_exts(b"example.com");
    exts.push(alpn_ext(&[b"h2"]));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::Malformed { .. })
    ));
    // Empty ALPN list / empty protocol name.
    for bad_alpn in [vec![0, 0], vec![0, 1, 0], vec![0, 5, 2, b'h']] {
        let mut exts = common_exts();
        exts.push(sni_ext(&[b"example.com"]));
        exts.push((EXT_ALPN, bad_alpn));
        assert!(matches!(
            parse_client_hello(&hello_with(&exts)),
            Err(HelloError::Malformed { .. })
        ));
    }
    // Unknown server name type.
    let mut exts = common_exts();
    exts.push((EXT_SERVER_NAME, vec![0, 4, 1, 0, 1, b'x']));
    assert!(matches!(
        parse_client_hello(&hello_with(&exts)),
        Err(HelloError::Malformed { .. })
    ));
}

/// What any input may produce: anything but a panic, and an `Incomplete` that asks for more
/// than it was given and no more than the cap.
fn check_contract(input: &[u8]) {
    if let Err(HelloError::Incomplete { needed }) = parse_client_hello(input) {
        assert!(
            needed > input.len(),
            "needed {needed} for {} bytes",
            input.len()
        );
        assert!(needed <= MAX_CLIENT_HELLO_BYTES);
    }
}

#[test]
fn no_panic_on_arbitrary_mutations() {
    // A cheap stand-in for the fuzz target on stable: set each byte of a real hello to a
    // few values and parse it and its prefix.
    let full = records(&handshake(&body(Some(&normal_exts(b"example.com")))), 50);
    for i in 0..full.len() {
        for v in [0u8, 1, 0x7f, 0xff] {
            let mut m = full.clone();
            m[i] = v;
            check_contract(&m);
            check_contract(&m[..i]);
        }
    }
}

#[test]
fn no_panic_on_random_mutations() {
    // Deterministic xorshift so a failure reproduces; `BERTH_SOAK_ITERS` runs it longer.
    let iterations: u64 = std::env::var("BERTH_SOAK_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let seeds = [
        records(
            &handshake(&body(Some(&normal_exts(b"example.com")))),
            MAX_RECORD_PAYLOAD,
        ),
        records(&handshake(&body(Some(&normal_exts(b"example.com")))), 3),
        records(&handshake(&body(None)), 40),
    ];
    for _ in 0..iterations {
        let mut m = seeds[(next() % 3) as usize].clone();
        for _ in 0..(next() % 4 + 1) {
            let i = (next() as usize) % m.len();
            match next() % 3 {
                0 => m[i] = next() as u8,
                1 => m.truncate(i.max(1)),
                _ => m.insert(i, next() as u8),
            }
        }
        check_contract(&m);
    }
}
