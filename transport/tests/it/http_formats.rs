//! `response_format: "aac"` over loopback (127.0.0.1:0, the tiny-a
//! fixture): ADTS frames, streamed as encoded and complete, decoded by
//! symphonia (which shares no code with the FDK encoder) to the PCM of the
//! same greedy request, delayed by the encoder's delay.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::common;

use common::audio::{best_lag, correlation, pcm16, symphonia_decode};
use common::http::{post_json, HttpResponse};
use common::{config, start, stop};

/// AAC-LC frame length.
const FRAME: usize = 1024;
/// Most delay an AAC-LC encoder adds (FDK's is 2048 at 24 kHz, found by
/// correlation in audio/tests/it/encode_formats.rs).
const MAX_DELAY: usize = 2 * FRAME;

async fn speech(addr: SocketAddr, extra: Value) -> Result<HttpResponse> {
    let mut body =
        json!({"input": "The quick brown fox.", "voice": "ryan", "greedy": true, "max_frames": 12});
    for (k, v) in extra.as_object().context("object")? {
        body[k] = v.clone();
    }
    post_json(addr, "/v1/audio/speech", &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aac_is_adts_streamed_and_complete_and_decodes_to_the_pcm() -> Result<()> {
    let s = start(config(Duration::from_secs(5))).await?;
    let addr = s.local_addr();
    let pcm = speech(addr, json!({"response_format": "pcm"})).await?;
    assert_eq!(pcm.status, 200);
    let reference = pcm16(&pcm.body);
    assert!(reference.len() > 4 * FRAME, "{} samples", reference.len());

    let streamed = speech(addr, json!({"response_format": "aac"})).await?;
    assert_eq!(streamed.status, 200, "{}", streamed.body_str());
    assert_eq!(streamed.header("content-type"), Some("audio/aac"));
    assert!(streamed.header("content-length").is_none(), "streamed");
    assert!(!streamed.cut);
    assert_eq!(
        &streamed.body[..2],
        &[0xFF, 0xF1],
        "ADTS sync, MPEG-4, no CRC"
    );

    let complete = speech(addr, json!({"response_format": "aac", "stream": false})).await?;
    assert_eq!(complete.status, 200);
    assert_eq!(
        complete.header("content-length"),
        Some(complete.body.len().to_string().as_str())
    );
    assert_eq!(
        complete.body, streamed.body,
        "ADTS has no header to rewrite"
    );

    let (decoded, rate) = symphonia_decode(&streamed.body, "aac")?;
    assert_eq!(rate, 24_000);
    // Length: the input, the encoder's delay before it, and less than one
    // frame of the end's silence after it.
    assert!(
        decoded.len() >= reference.len(),
        "{} < {}",
        decoded.len(),
        reference.len()
    );
    assert!(
        decoded.len() < reference.len() + MAX_DELAY + FRAME,
        "{} samples for {}",
        decoded.len(),
        reference.len()
    );
    let lag = best_lag(&reference, &decoded, MAX_DELAY);
    assert!(
        decoded.len() >= lag + reference.len(),
        "lag {lag} past the end"
    );
    let r = correlation(&reference, &decoded[lag..]);
    eprintln!(
        "aac: {} bytes, lag {lag}, correlation {r:.3}",
        streamed.body.len()
    );
    assert!(r > 0.9, "aac correlates {r:.3} with the pcm");
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aac_takes_the_aac_lc_rates_and_refuses_others_naming_them() -> Result<()> {
    let s = start(config(Duration::from_secs(5))).await?;
    let addr = s.local_addr();
    let r = speech(
        addr,
        json!({"response_format": "aac", "sample_rate": 16000}),
    )
    .await?;
    assert_eq!(r.status, 200);
    let (decoded, rate) = symphonia_decode(&r.body, "aac")?;
    assert_eq!(rate, 16_000);
    assert!(!decoded.is_empty());

    let r = speech(
        addr,
        json!({"response_format": "aac", "sample_rate": 20000}),
    )
    .await?;
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["param"], "sample_rate");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("aac") && msg.contains("22050") && msg.contains("48000"),
        "{msg}"
    );
    stop(s).await
}
