//! Round trips for every message type, the parser's refusals, the audio
//! header, and a fuzzer: parsing never panics on any input.

use super::*;

fn settings() -> SessionSettings {
    SessionSettings {
        voice: "ryan".into(),
        language: "auto".into(),
        instruct: Some("calm".into()),
        sample_rate: 16000,
        native_sample_rate: 24000,
        format: AudioFormat::F32,
        audio_transport: AudioTransport::Base64,
        chunking: Chunking::default(),
        vad: Vad::default(),
        audio_acks: true,
        timings: true,
        greedy: false,
        seed: 7,
        max_frames: 100,
        text_mode: TextMode::Streaming,
        prebuffer_ms: 350.0,
        prebuffer_declared: false,
    }
}

fn metrics() -> ContextMetrics {
    ContextMetrics {
        ttfp_ms: Some(81.25),
        e2el_ms: Some(900.5),
        audio_s: 1.6,
        rtf: Some(0.42),
        stream_rtf: None,
        required_prebuffer_ms: Some(0.0),
        underruns: Some(0),
        continuity_ok: Some(true),
        chunks: 3,
        frames: Some(20),
        samples: 38400,
        samples_per_frame: 1920,
        complete: Some(true),
        finite: true,
        segments: 2,
        ..ContextMetrics::default()
    }
}

/// One value of every client message type.
pub(crate) fn client_samples() -> Vec<ClientMessage> {
    vec![
        ClientMessage::SessionUpdate {
            session: Box::new(SessionUpdate {
                voice: Some("alloy".into()),
                sample_rate: Some(8000),
                format: Some(AudioFormat::Pcm16),
                audio_transport: Some(AudioTransport::Binary),
                chunking: Some(ChunkingUpdate {
                    mode: Some(ChunkingMode::Sentence),
                    max_delay_ms: Some(250),
                    ..Default::default()
                }),
                vad: Some(VadUpdate {
                    threshold_db: Some(-35.0),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        },
        ClientMessage::ContextAppend {
            context_id: "c1".into(),
            text: "Hello, wor".into(),
        },
        ClientMessage::ContextFlush {
            context_id: "c1".into(),
        },
        ClientMessage::ContextEnd {
            context_id: "c1".into(),
        },
        ClientMessage::ContextCancel {
            context_id: "c1".into(),
        },
        ClientMessage::AudioAck {
            context_id: "c1".into(),
            seq: 4,
        },
        ClientMessage::InputAudioAppend {
            audio: base64_encode(&[0, 1, 2, 3]),
            sample_rate: 16000,
            format: AudioFormat::Pcm16,
        },
        ClientMessage::Ping {
            id: Some("p".into()),
        },
    ]
}

fn server_samples() -> Vec<ServerMessage> {
    vec![
        ServerMessage::SessionCreated {
            protocol_version: PROTOCOL_VERSION,
            session_id: 3,
            model: "tiny-a".into(),
            voices: vec!["ryan".into()],
            openai_voices: vec!["alloy".into()],
            languages: vec!["auto".into()],
            limits: Limits {
                max_text_message_bytes: MAX_TEXT_MESSAGE_BYTES,
                max_binary_message_bytes: MAX_BINARY_MESSAGE_BYTES,
                max_contexts: 8,
                max_pending_chars: 4096,
                max_frames: 1000,
            },
            session: settings(),
        },
        ServerMessage::SessionUpdated {
            session: settings(),
        },
        ServerMessage::ContextStarted {
            context_id: "c1".into(),
            stream_id: 1,
            sample_rate: 24000,
            format: AudioFormat::Pcm16,
        },
        ServerMessage::Audio {
            context_id: "c1".into(),
            stream_id: 1,
            seq: 0,
            terminal: false,
            sample_rate: 24000,
            format: AudioFormat::F32,
            audio: base64_encode(&[1, 2, 3, 4]),
        },
        ServerMessage::ContextDone {
            context_id: "c1".into(),
            stream_id: Some(1),
            metrics: metrics(),
        },
        ServerMessage::ContextCancelled {
            context_id: "c1".into(),
            stream_id: None,
            reason: CancelReason::BargeIn,
            cancel_ack_ms: 3.5,
            late_audio_samples: 0,
            interruption_ms: Some(12.0),
            played_text: Some("One two".into()),
            played_ms: Some(480.0),
            metrics: metrics(),
        },
        ServerMessage::Timings {
            context_id: "c1".into(),
            stream_id: Some(1),
            seq: 3,
            words: vec![WordTimingMsg {
                text: "Hi,".into(),
                char_start: 0,
                char_end: 3,
                start_ms: 10.0,
                end_ms: 250.5,
            }],
            chars: CharTimings {
                index: 0,
                chars: vec!["H".into(), "i".into(), ",".into()],
                start_ms: vec![10.0, 130.0, 250.5],
                end_ms: vec![130.0, 250.5, 250.5],
            },
        },
        ServerMessage::ContextFailed {
            context_id: "c1".into(),
            stream_id: Some(1),
            code: ErrorCode::AtCapacity,
            message: "full".into(),
            metrics: ContextMetrics::default(),
        },
        ServerMessage::SpeechStarted {
            audio_start_ms: 120.0,
            detection_ms: 60.0,
        },
        ServerMessage::SpeechStopped {
            audio_end_ms: 900.0,
        },
        ServerMessage::Error {
            code: ErrorCode::InvalidVoice,
            message: "unknown voice".into(),
            context_id: None,
            valid: Some(vec!["ryan".into()]),
        },
        ServerMessage::Pong { id: None },
    ]
}

#[test]
fn every_client_message_round_trips() {
    let samples = client_samples();
    let mut seen = std::collections::BTreeSet::new();
    for m in samples {
        let json = serde_json::to_string(&m).unwrap();
        let ty = serde_json::from_str::<serde_json::Value>(&json).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        seen.insert(ty);
        assert_eq!(parse_client_text(&json).unwrap(), m, "{json}");
    }
    assert_eq!(
        seen.len(),
        CLIENT_TYPES.len(),
        "a client type lacks a sample"
    );
}

#[test]
fn every_server_message_round_trips() {
    for m in server_samples() {
        let json = m.to_json();
        assert_eq!(parse_server_text(&json).unwrap(), m, "{json}");
    }
    assert_eq!(server_samples().len(), 12);
}

#[test]
fn binary_audio_frames_round_trip() {
    for format in [AudioFormat::Pcm16, AudioFormat::F32] {
        let h = AudioHeader {
            stream_id: 7,
            seq: 300,
            sample_rate: 44100,
            format,
            terminal: true,
        };
        let x = [0.0f32, 0.5, -0.25, 1.0];
        let frame = audio_frame(&h, &x);
        assert_eq!(
            frame.len(),
            AUDIO_HEADER_LEN + x.len() * format.bytes_per_sample().unwrap()
        );
        let (back, payload) = AudioHeader::parse(&frame).unwrap();
        assert_eq!(back, h);
        let y = decode_samples(payload, format);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 1.0 / 32767.0, "{a} vs {b}");
        }
    }
    // The documented byte layout, literally.
    let h = AudioHeader {
        stream_id: 0x0403_0201,
        seq: 5,
        sample_rate: 24000,
        format: AudioFormat::Pcm16,
        terminal: true,
    };
    let mut b = Vec::new();
    h.write(&mut b);
    assert_eq!(b, [1, 1, 16, 0, 1, 2, 3, 4, 5, 0, 0, 0, 0xc0, 0x5d, 0, 0]);
}

#[test]
fn encoded_audio_frames_round_trip_with_their_encoding_byte() {
    for format in AudioFormat::ALL.into_iter().filter(|f| f.is_encoded()) {
        let h = AudioHeader {
            stream_id: 3,
            seq: 9,
            sample_rate: 8000,
            format,
            terminal: false,
        };
        let frame = audio_frame_bytes(&h, &[1, 2, 3]);
        assert_eq!(frame.len(), ENCODED_HEADER_LEN + 3);
        assert_eq!(frame[1], FLAG_ENCODED);
        assert_eq!(&frame[2..4], &[20, 0]);
        assert_eq!(frame[16], format.wire_code());
        let (back, payload) = AudioHeader::parse(&frame).unwrap();
        assert_eq!((back, payload), (h, &[1u8, 2, 3][..]), "{format}");
        // Names round-trip through serde as the docs spell them.
        let json = serde_json::to_string(&format).unwrap();
        assert_eq!(json, format!("\"{}\"", format.name()));
    }
    // Unknown encoding byte; f32 with encoded; a short encoded header.
    let mut f = audio_frame_bytes(
        &AudioHeader {
            stream_id: 0,
            seq: 0,
            sample_rate: 8000,
            format: AudioFormat::Mp3,
            terminal: false,
        },
        &[],
    );
    f[16] = 99;
    assert!(AudioHeader::parse(&f).is_err());
    f[16] = 1;
    f[1] |= FLAG_F32;
    assert!(AudioHeader::parse(&f).is_err());
    f[1] = FLAG_ENCODED;
    f[2] = 16;
    assert!(AudioHeader::parse(&f).is_err());
    // Microphone input is raw samples only.
    f[2] = 20;
    let e = parse_client_binary(&f).unwrap_err();
    assert!(e.message.contains("pcm16 or f32"), "{}", e.message);
    assert!(decode_input_audio("", 16000, AudioFormat::Aac).is_err());
}

#[test]
fn an_unknown_format_is_refused_naming_the_valid_ones() {
    let e =
        parse_client_text(r#"{"type":"session.update","session":{"format":"ogg"}}"#).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidMessage);
    assert!(e.message.contains("opus_packets"), "{}", e.message);
    let valid = e.valid.expect("valid formats");
    assert_eq!(valid.len(), AudioFormat::ALL.len());
    assert!(valid.contains(&"aac".to_string()));
}

#[test]
fn errors_name_the_problem() {
    let code = |s: &str| parse_client_text(s).unwrap_err().code;
    assert_eq!(code("{nope"), ErrorCode::MalformedJson);
    assert_eq!(code("[1]"), ErrorCode::InvalidMessage);
    assert_eq!(code(r#"{"text":"x"}"#), ErrorCode::InvalidMessage);
    let e = parse_client_text(r#"{"type":"context.apend"}"#).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownType);
    assert!(e.message.contains("context.apend"));
    assert!(e.valid.unwrap().contains(&"context.append".to_string()));
    let e = parse_client_text(r#"{"type":"context.append","context_id":"a"}"#).unwrap_err();
    assert!(e.message.contains("text"), "{}", e.message);
    let e = parse_client_text(r#"{"type":"session.update","session":{"sample_rte":8000}}"#)
        .unwrap_err();
    assert!(e.message.contains("sample_rte"), "{}", e.message);
    // A value of the wrong type: the setting is named, nested ones by path.
    for (json, path) in [
        (r#"{"prebuffer_ms":"lots"}"#, "session.prebuffer_ms: "),
        (
            r#"{"chunking":{"max_chars":-3}}"#,
            "session.chunking.max_chars: ",
        ),
        (r#"{"vad":{"enabled":"yes"}}"#, "session.vad.enabled: "),
    ] {
        let m = format!(r#"{{"type":"session.update","session":{json}}}"#);
        let e = parse_client_text(&m).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidMessage);
        assert!(
            e.message
                .starts_with(&format!("invalid session.update: {path}")),
            "{}",
            e.message
        );
    }
    assert_eq!(
        code(r#"{"type":"ping","v":2}"#),
        ErrorCode::UnsupportedVersion
    );
    assert!(parse_client_text(r#"{"type":"ping","v":1}"#).is_ok());
    let big = format!(
        r#"{{"type":"context.append","context_id":"a","text":"{}"}}"#,
        "x".repeat(MAX_TEXT_MESSAGE_BYTES)
    );
    assert_eq!(code(&big), ErrorCode::MessageTooLarge);
    // `speaker` is an alias of `voice`.
    match parse_client_text(r#"{"type":"session.update","session":{"speaker":"ryan"}}"#) {
        Ok(ClientMessage::SessionUpdate { session }) => {
            assert_eq!(session.voice.as_deref(), Some("ryan"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn binary_input_is_checked() {
    let h = AudioHeader {
        stream_id: 0,
        seq: 0,
        sample_rate: 16000,
        format: AudioFormat::Pcm16,
        terminal: false,
    };
    let ok = audio_frame(&h, &[0.1, 0.2]);
    assert_eq!(parse_client_binary(&ok).unwrap().samples.len(), 2);
    assert_eq!(
        parse_client_binary(&ok[..5]).unwrap_err().code,
        ErrorCode::InvalidAudio
    );
    let mut odd = ok.clone();
    odd.push(0);
    assert_eq!(
        parse_client_binary(&odd).unwrap_err().code,
        ErrorCode::InvalidAudio
    );
    let slow = audio_frame(
        &AudioHeader {
            sample_rate: 100,
            ..h
        },
        &[0.0],
    );
    assert!(parse_client_binary(&slow)
        .unwrap_err()
        .message
        .contains("100 Hz"));
    let big = vec![0u8; MAX_BINARY_MESSAGE_BYTES + 2];
    assert_eq!(
        parse_client_binary(&big).unwrap_err().code,
        ErrorCode::MessageTooLarge
    );
    assert!(decode_input_audio("!!", 16000, AudioFormat::Pcm16).is_err());
    assert_eq!(
        decode_input_audio(&base64_encode(&[0, 0, 0, 0]), 16000, AudioFormat::F32)
            .unwrap()
            .samples,
        [0.0]
    );
}

mod fuzz {
    use super::super::*;
    use proptest::prelude::*;

    fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
        prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
        ]
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        json_leaf().prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("type".to_string()),
                        Just("context_id".to_string()),
                        Just("text".to_string()),
                        Just("session".to_string()),
                        Just("sample_rate".to_string()),
                        Just("voice".to_string()),
                        "[a-z_]{1,8}"
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Objects that look like real messages: a known type plus random
    /// fields, so the typed deserializer (not just the JSON parser) runs.
    fn message_like() -> impl Strategy<Value = String> {
        (
            prop::sample::select(CLIENT_TYPES.to_vec()),
            prop::collection::btree_map(
                prop_oneof![
                    Just("context_id".to_string()),
                    Just("text".to_string()),
                    Just("session".to_string()),
                    Just("seq".to_string()),
                    Just("audio".to_string()),
                    Just("sample_rate".to_string()),
                    Just("format".to_string()),
                    Just("v".to_string()),
                    "[a-z_]{1,8}"
                ],
                json_value(),
                0..5,
            ),
        )
            .prop_map(|(t, mut m)| {
                m.insert("type".into(), t.into());
                serde_json::Value::Object(m.into_iter().collect()).to_string()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_client_text(&String::from_utf8_lossy(&bytes));
            let _ = parse_client_binary(&bytes);
            let _ = AudioHeader::parse(&bytes);
            let _ = parse_server_text(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn arbitrary_json_never_panics(v in json_value()) {
            let _ = parse_client_text(&v.to_string());
        }

        #[test]
        fn message_like_json_never_panics(s in message_like()) {
            if let Ok(ClientMessage::InputAudioAppend { audio, sample_rate, format }) = parse_client_text(&s) {
                let _ = decode_input_audio(&audio, sample_rate, format);
            }
        }

        #[test]
        fn headers_with_any_fields_round_trip(stream_id in any::<u32>(), seq in any::<u32>(),
                sample_rate in any::<u32>(), f32_payload in any::<bool>(), terminal in any::<bool>(),
                n in 0usize..8) {
            let h = AudioHeader { stream_id, seq, sample_rate, terminal,
                format: if f32_payload { AudioFormat::F32 } else { AudioFormat::Pcm16 } };
            let frame = audio_frame(&h, &vec![0.25; n]);
            let (back, payload) = AudioHeader::parse(&frame).unwrap();
            prop_assert_eq!(back, h);
            prop_assert_eq!(payload.len(), n * h.format.bytes_per_sample().unwrap());
        }
    }
}
