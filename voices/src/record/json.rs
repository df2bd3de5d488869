//! A record as JSON, for `voice show --json` and the server's voice routes.
//!
//! [`VoiceRecord::summary_json`] is what a listing shows; [`VoiceRecord::to_json`]
//! adds the vectors (`x_vector` as `[E]` numbers, `ref_codes` as `[T][G]`),
//! so a user can compare them with another implementation's.

use serde_json::{json, Value};

use super::VoiceRecord;

impl VoiceRecord {
    /// Everything but the vectors.
    pub fn summary_json(&self) -> Value {
        let p = &self.provenance;
        json!({
            "name": self.name.as_str(),
            "key": self.name.key(),
            "mode": self.mode.as_str(),
            "talker_size": self.talker_size,
            "hidden_size": self.hidden_size,
            "ref_text": self.ref_text,
            "ref_frames": self.ref_frames(),
            "description": self.description,
            "created": p.created.to_string(),
            "source": {
                "name": p.source.name,
                "duration_s": p.source.duration_s,
                "sample_rate": p.source.sample_rate,
                "channels": p.source.channels,
                "sha256": p.source.sha256,
            },
            "model": {
                "checkpoint": p.model.checkpoint,
                "fingerprint": p.model.fingerprint,
            },
            "format_version": p.format_version,
        })
    }

    /// The summary plus `x_vector` and `ref_codes` (null for x-vector-only).
    pub fn to_json(&self) -> Value {
        let mut v = self.summary_json();
        v["x_vector"] = json!(self.x_vector);
        v["ref_codes"] = match &self.ref_codes {
            Some(c) => Value::Array(
                (0..c.frames())
                    .map(|t| json!(c.frame(t).unwrap_or_default()))
                    .collect(),
            ),
            None => Value::Null,
        };
        v
    }
}
