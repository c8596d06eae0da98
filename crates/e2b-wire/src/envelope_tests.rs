use super::*;
use crate::code::Code;
use crate::process::{process_input::Input, ProcessInput};

fn raw_envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![flags];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Two messages (one empty) and an end-stream, as one body.
fn sample_body() -> (Vec<u8>, Vec<Frame>) {
    let frames = vec![
        Frame::Message(br#"{"stdin":"aGk="}"#.to_vec()),
        Frame::Message(Vec::new()),
        Frame::EndStream(b"{}".to_vec()),
    ];
    let mut body = Vec::new();
    for frame in &frames {
        body.extend(match frame {
            Frame::Message(payload) => raw_envelope(0, payload),
            Frame::EndStream(payload) => raw_envelope(FLAG_END_STREAM, payload),
        });
    }
    (body, frames)
}

fn drain(decoder: &mut EnvelopeDecoder) -> Vec<Frame> {
    std::iter::from_fn(|| decoder.next_frame()).collect()
}

#[test]
fn frames_split_at_every_byte_boundary() {
    let (body, frames) = sample_body();
    for split in 0..=body.len() {
        let mut decoder = EnvelopeDecoder::new();
        let mut seen = Vec::new();
        for chunk in [&body[..split], &body[split..]] {
            decoder.push(chunk).unwrap();
            seen.extend(drain(&mut decoder));
        }
        decoder.finish().unwrap();
        assert_eq!(seen, frames, "split at {split}");
    }
}

#[test]
fn frames_fed_one_byte_at_a_time() {
    let (body, frames) = sample_body();
    let mut decoder = EnvelopeDecoder::new();
    let mut seen = Vec::new();
    for byte in &body {
        decoder.push(std::slice::from_ref(byte)).unwrap();
        seen.extend(drain(&mut decoder));
    }
    decoder.finish().unwrap();
    assert_eq!(seen, frames);
}

#[test]
fn several_frames_in_one_chunk() {
    let (body, frames) = sample_body();
    let mut decoder = EnvelopeDecoder::new();
    decoder.push(&body).unwrap();
    assert_eq!(drain(&mut decoder), frames);
    decoder.finish().unwrap();
}

#[test]
fn a_body_cut_inside_an_envelope_is_truncated() {
    let (body, _) = sample_body();
    for cut in [1, 4, 5, 6, body.len() - 1] {
        let mut decoder = EnvelopeDecoder::new();
        decoder.push(&body[..cut]).unwrap();
        let error = decoder.finish().unwrap_err();
        assert!(
            matches!(error, WireError::TruncatedEnvelope { .. }),
            "cut at {cut}: {error}"
        );
        assert_eq!(error.code(), Code::InvalidArgument);
    }
}

#[test]
fn an_oversized_message_is_refused_from_its_header() {
    // Only the header is pushed: the refusal cannot depend on buffering the payload.
    for len in [MAX_MESSAGE_BYTES as u32 + 1, u32::MAX] {
        let mut decoder = EnvelopeDecoder::new();
        let error = decoder.push(&raw_envelope(0, &[])[..1]).and_then(|()| {
            let mut header = [0u8; 4];
            header.copy_from_slice(&len.to_be_bytes());
            decoder.push(&header)
        });
        let error = error.unwrap_err();
        assert!(
            matches!(error, WireError::MessageTooLarge { len_bytes, .. } if len_bytes == u64::from(len)),
            "{error}"
        );
        assert_eq!(error.code(), Code::ResourceExhausted);
        assert_eq!(decoder.payload.capacity(), 0);
        // The decoder stays failed: more bytes do not resynchronise it.
        assert!(decoder.push(b"{}").is_err());
    }
    let mut at_limit = EnvelopeDecoder::new();
    at_limit
        .push(&[0, 0, 0x40, 0, 0])
        .expect("exactly MAX_MESSAGE_BYTES is allowed");
}

#[test]
fn compressed_flag_without_negotiated_compression_is_refused() {
    let mut decoder = EnvelopeDecoder::new();
    let error = decoder
        .push(&raw_envelope(FLAG_COMPRESSED, b"\x1f\x8b"))
        .unwrap_err();
    assert!(
        matches!(error, WireError::CompressedWithoutEncoding),
        "{error}"
    );
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(decoder.next_frame().is_none());
}

#[test]
fn unknown_flags_are_refused() {
    for flags in [0x04, 0x80, 0xff] {
        let mut decoder = EnvelopeDecoder::new();
        let error = decoder.push(&raw_envelope(flags, b"{}")).unwrap_err();
        assert!(
            matches!(error, WireError::UnknownEnvelopeFlags { .. }),
            "{error}"
        );
    }
}

#[test]
fn encoded_messages_decode_back() {
    let input = ProcessInput {
        input: Some(Input::Pty(vec![0, 1, 2, 255])),
    };
    for codec in [Codec::Json, Codec::Proto] {
        let frame = encode_message(codec, &input).unwrap();
        let mut decoder = EnvelopeDecoder::new();
        decoder.push(&frame).unwrap();
        let Some(Frame::Message(payload)) = decoder.next_frame() else {
            panic!("{codec:?}: no message frame");
        };
        assert_eq!(codec.decode::<ProcessInput>(&payload).unwrap(), input);
        assert_eq!(&frame[1..5], &(payload.len() as u32).to_be_bytes());
    }
}

#[test]
fn end_stream_carries_the_error_or_nothing() {
    let error = ConnectError::new(Code::NotFound, "process with pid 7 not found");
    let frame = encode_end_stream(Some(&error));
    assert_eq!(frame[0], FLAG_END_STREAM);
    let mut decoder = EnvelopeDecoder::new();
    decoder.push(&frame).unwrap();
    decoder.push(&encode_end_stream(None)).unwrap();

    let Some(Frame::EndStream(payload)) = decoder.next_frame() else {
        panic!("no end-stream frame");
    };
    let end: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(
        end,
        serde_json::json!({
            "error": {"code": "not_found", "message": "process with pid 7 not found"},
            "metadata": {}
        })
    );
    assert_eq!(decoder.next_frame(), Some(Frame::EndStream(b"{}".to_vec())));
}
