//! Every vendor message shape: parse ↔ serialize round trips, the shapes
//! the real clients send (taken from Pipecat's and the SDKs' code), and
//! the parsers fuzzed like the native protocol's (never a panic, always a
//! typed error).

use proptest::prelude::*;
use serde_json::json;

use super::cartesia::{CartesiaIn, CartesiaOut, CartesiaVoice, OutputFormatSpec};
use super::elevenlabs::{output_format, ElevenLabsIn, ElevenLabsOut};
use super::format::{Encoding, OutputFormat};
use super::VendorError;

fn el_round_trip(m: ElevenLabsIn) {
    let json = serde_json::to_string(&m).expect("serializes");
    assert_eq!(ElevenLabsIn::parse(&json).expect("parses"), m, "{json}");
}

fn el_out_round_trip(m: ElevenLabsOut) {
    let json = m.to_json();
    let back: ElevenLabsOut = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, m, "{json}");
}

fn ca_round_trip(m: CartesiaIn) {
    let json = serde_json::to_string(&m).expect("serializes");
    assert_eq!(CartesiaIn::parse(&json).expect("parses"), m, "{json}");
}

fn ca_out_round_trip(m: CartesiaOut) {
    let json = m.to_json();
    let back: CartesiaOut = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, m, "{json}");
}

#[test]
fn elevenlabs_client_messages_round_trip() {
    // Context init (voice settings accepted and ignored), text, flush,
    // close_context, close_socket, keepalive, EOS.
    el_round_trip(ElevenLabsIn {
        text: Some(" ".into()),
        context_id: Some("c1".into()),
        voice_settings: Some(json!({"stability": 0.5, "similarity_boost": 0.8})),
        generation_config: Some(json!({"chunk_length_schedule": [50]})),
        ..Default::default()
    });
    el_round_trip(ElevenLabsIn {
        text: Some("Hello there. ".into()),
        context_id: Some("c1".into()),
        try_trigger_generation: Some(true),
        ..Default::default()
    });
    el_round_trip(ElevenLabsIn {
        context_id: Some("c1".into()),
        flush: true,
        ..Default::default()
    });
    el_round_trip(ElevenLabsIn {
        context_id: Some("c1".into()),
        close_context: true,
        ..Default::default()
    });
    el_round_trip(ElevenLabsIn {
        close_socket: true,
        ..Default::default()
    });
    el_round_trip(ElevenLabsIn {
        text: Some(String::new()),
        ..Default::default()
    });
}

#[test]
fn elevenlabs_parses_what_pipecat_sends() {
    let m = ElevenLabsIn::parse(
        r#"{"text": " ", "context_id": "abc", "voice_settings": {"speed": 1.0},
            "pronunciation_dictionary_locators": []}"#,
    )
    .expect("unknown fields are ignored");
    assert_eq!(m.context_id.as_deref(), Some("abc"));
    let m = ElevenLabsIn::parse(r#"{"context_id": "abc", "close_context": true}"#).unwrap();
    assert!(m.close_context && m.text.is_none());
}

#[test]
fn elevenlabs_server_messages_round_trip() {
    el_out_round_trip(ElevenLabsOut::Audio {
        audio: "AAAA".into(),
        is_final: Some(false),
        normalized_alignment: None,
        alignment: None,
        context_id: Some("c1".into()),
    });
    el_out_round_trip(ElevenLabsOut::Audio {
        audio: "AAAA".into(),
        is_final: None,
        normalized_alignment: None,
        alignment: None,
        context_id: None,
    });
    el_out_round_trip(ElevenLabsOut::Final {
        is_final: true,
        context_id: Some("c1".into()),
    });
    el_out_round_trip(ElevenLabsOut::Error {
        message: "no voice".into(),
        error: "voice_not_found".into(),
        code: 1008,
        context_id: None,
    });
}

#[test]
fn elevenlabs_audio_has_the_fields_clients_read() {
    let j: serde_json::Value = serde_json::from_str(
        &ElevenLabsOut::Audio {
            audio: "AAAA".into(),
            is_final: Some(false),
            normalized_alignment: None,
            alignment: None,
            context_id: Some("c".into()),
        }
        .to_json(),
    )
    .unwrap();
    assert_eq!(j["contextId"], "c");
    assert_eq!(j["isFinal"], false);
    assert!(j["alignment"].is_null() && j["normalizedAlignment"].is_null());
}

#[test]
fn elevenlabs_output_formats() {
    let f = |e, r| OutputFormat {
        encoding: e,
        sample_rate: r,
    };
    assert_eq!(output_format("pcm_16000"), Ok(f(Encoding::Pcm16, 16000)));
    assert_eq!(output_format("pcm_44100"), Ok(f(Encoding::Pcm16, 44100)));
    assert_eq!(output_format("ulaw_8000"), Ok(f(Encoding::Mulaw, 8000)));
    assert_eq!(output_format("alaw_8000"), Ok(f(Encoding::Alaw, 8000)));
    assert_eq!(output_format("mp3_44100_128"), Ok(f(Encoding::Mp3, 44100)));
    for bad in [
        "opus_48000_64",
        "pcm",
        "pcm_x",
        "mp3_44100",
        "pcm_16000_1",
        "",
    ] {
        let Err(VendorError::Unsupported(m)) = output_format(bad) else {
            panic!("{bad} accepted");
        };
        assert!(m.contains("ulaw_8000"), "{m}");
    }
}

#[test]
fn cartesia_client_messages_round_trip() {
    let fmt = OutputFormatSpec {
        container: "raw".into(),
        encoding: Some("pcm_s16le".into()),
        sample_rate: 24000,
        bit_rate: None,
    };
    ca_round_trip(CartesiaIn {
        context_id: Some("c1".into()),
        transcript: Some("Hello ".into()),
        continues: true,
        model_id: Some("sonic-2".into()),
        voice: Some(CartesiaVoice {
            mode: Some("id".into()),
            id: Some("ryan".into()),
        }),
        output_format: Some(fmt),
        language: Some("en".into()),
        add_timestamps: Some(true),
        ..Default::default()
    });
    ca_round_trip(CartesiaIn {
        context_id: Some("c1".into()),
        transcript: Some(String::new()),
        flush: true,
        continues: true,
        ..Default::default()
    });
    ca_round_trip(CartesiaIn {
        context_id: Some("c1".into()),
        transcript: Some(String::new()),
        ..Default::default()
    });
    ca_round_trip(CartesiaIn {
        context_id: Some("c1".into()),
        cancel: true,
        ..Default::default()
    });
}

#[test]
fn cartesia_parses_what_pipecat_sends() {
    let m = CartesiaIn::parse(
        r#"{"transcript": "Hi. ", "continue": true, "context_id": "x", "model_id": "sonic-3",
            "voice": {"mode": "id", "id": "aiden"},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
            "add_timestamps": true, "use_normalized_timestamps": false}"#,
    )
    .expect("parses");
    assert!(m.continues);
    let f = m.output_format.unwrap().resolve().unwrap();
    assert_eq!((f.encoding, f.sample_rate), (Encoding::Pcm16, 16000));
}

#[test]
fn cartesia_output_formats() {
    let spec = |c: &str, e: Option<&str>| OutputFormatSpec {
        container: c.into(),
        encoding: e.map(str::to_string),
        sample_rate: 8000,
        bit_rate: None,
    };
    assert_eq!(
        spec("raw", Some("pcm_f32le")).resolve().unwrap().encoding,
        Encoding::F32
    );
    assert_eq!(
        spec("raw", Some("pcm_mulaw")).resolve().unwrap().encoding,
        Encoding::Mulaw
    );
    assert_eq!(
        spec("raw", Some("pcm_alaw")).resolve().unwrap().encoding,
        Encoding::Alaw
    );
    assert_eq!(spec("mp3", None).resolve().unwrap().encoding, Encoding::Mp3);
    let e = spec("wav", Some("pcm_s16le")).resolve().unwrap_err();
    assert!(e.to_string().contains("container \"wav\""), "{e}");
    let e = spec("raw", Some("pcm_s24le")).resolve().unwrap_err();
    assert!(e.to_string().contains("pcm_s24le"), "{e}");
}

#[test]
fn cartesia_server_messages_round_trip() {
    ca_out_round_trip(CartesiaOut::Chunk {
        context_id: "c".into(),
        data: "AAAA".into(),
        done: false,
        status_code: 206,
        step_time: 0.0,
    });
    ca_out_round_trip(CartesiaOut::FlushDone {
        context_id: "c".into(),
        done: false,
        flush_done: true,
        flush_id: 1,
        status_code: 206,
    });
    ca_out_round_trip(CartesiaOut::Done {
        context_id: "c".into(),
        done: true,
        status_code: 200,
    });
    ca_out_round_trip(CartesiaOut::Error {
        context_id: None,
        done: true,
        status_code: 400,
        title: "invalid voice".into(),
        message: "m".into(),
        error: "m".into(),
        error_code: "invalid_voice".into(),
    });
}

#[test]
fn cartesia_error_without_a_context_still_has_the_key() {
    // Pipecat reads msg["context_id"] from every message.
    let j: serde_json::Value = serde_json::from_str(
        &CartesiaOut::Error {
            context_id: None,
            done: true,
            status_code: 400,
            title: "t".into(),
            message: "m".into(),
            error: "m".into(),
            error_code: "e".into(),
        }
        .to_json(),
    )
    .unwrap();
    assert!(j.as_object().unwrap().contains_key("context_id"));
    assert_eq!(j["type"], "error");
}

#[test]
fn malformed_messages_are_typed_errors() {
    for bad in ["", "{", "[]", "3", "null", "\"text\""] {
        assert!(ElevenLabsIn::parse(bad).is_err(), "{bad}");
        assert!(CartesiaIn::parse(bad).is_err(), "{bad}");
    }
    assert!(matches!(
        ElevenLabsIn::parse(r#"{"text": 3}"#),
        Err(VendorError::Invalid(_))
    ));
    assert!(matches!(
        CartesiaIn::parse(r#"{"continue": "yes"}"#),
        Err(VendorError::Invalid(_))
    ));
    let big = format!(
        "{{\"text\": \"{}\"}}",
        "a".repeat(crate::protocol::MAX_TEXT_MESSAGE_BYTES)
    );
    assert!(matches!(
        ElevenLabsIn::parse(&big),
        Err(VendorError::Invalid(m)) if m.contains("limit")
    ));
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("text".to_string()),
                    Just("context_id".to_string()),
                    Just("flush".to_string()),
                    Just("close_context".to_string()),
                    Just("transcript".to_string()),
                    Just("continue".to_string()),
                    Just("cancel".to_string()),
                    Just("voice".to_string()),
                    Just("output_format".to_string()),
                    ".{0,8}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic_on_arbitrary_text(s in ".{0,200}") {
        let _ = ElevenLabsIn::parse(&s);
        let _ = CartesiaIn::parse(&s);
        let _ = output_format(&s);
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_json(v in json_value()) {
        let s = v.to_string();
        if let Ok(m) = ElevenLabsIn::parse(&s) {
            // Whatever parses serializes and parses back the same.
            let again = serde_json::to_string(&m).unwrap();
            prop_assert_eq!(ElevenLabsIn::parse(&again).unwrap(), m);
        }
        if let Ok(m) = CartesiaIn::parse(&s) {
            if let Some(f) = &m.output_format {
                let _ = f.resolve().map(|f| f.check().is_ok());
            }
            let again = serde_json::to_string(&m).unwrap();
            prop_assert_eq!(CartesiaIn::parse(&again).unwrap(), m);
        }
    }
}

#[test]
fn a_failed_stream_input_close_reason_names_the_error_and_fits_a_close_frame() {
    use super::elevenlabs::close_reason;
    assert_eq!(
        close_reason("at_capacity", "at capacity: full"),
        "at_capacity: at capacity: full"
    );
    // At most 123 bytes (RFC 6455 §5.5.1), cut between characters.
    let long = close_reason("max_character_limit_exceeded", &"é".repeat(200));
    assert!(long.len() <= 123 && long.len() >= 121, "{}", long.len());
    assert!(long.starts_with("max_character_limit_exceeded: é"));
}
