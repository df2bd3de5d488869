//! The checkpoint's preset speakers (CustomVoice), and OpenAI's voice names
//! mapped onto them so unmodified OpenAI clients work. (The stored voices
//! of the voice library are `tts_actors::VoiceLibrary`'s.)

/// OpenAI's TTS voice names (the eleven of `tts-1`/`gpt-4o-mini-tts` plus
/// the two newer ones), in a fixed order: the mapping depends only on this
/// list and the checkpoint's sorted speaker list.
pub const OPENAI_VOICES: [&str; 13] = [
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
    "marin", "cedar",
];

/// Who each OpenAI voice is, as OpenAI describes them: a female or a male
/// voice (`alloy` is described as neutral; it goes with the female ones).
const OPENAI_FEMALE: [&str; 6] = ["alloy", "coral", "nova", "sage", "shimmer", "marin"];

/// The official CustomVoice speakers OpenAI's names map to, per voice: by
/// gender, and never a dialect speaker (eric: Sichuan, dylan: Beijing),
/// since OpenAI clients mostly send other languages than Chinese. Female:
/// serena and vivian (the two female speakers without a native language
/// other than Chinese); male: ryan and aiden (native English), uncle_fu
/// for `onyx` (deep). Neighbouring names alternate so a client that cycles
/// through voices hears different speakers.
const OFFICIAL_MAP: [(&str, &str); 13] = [
    ("alloy", "serena"),
    ("ash", "ryan"),
    ("ballad", "aiden"),
    ("coral", "vivian"),
    ("echo", "ryan"),
    ("fable", "aiden"),
    ("onyx", "uncle_fu"),
    ("nova", "serena"),
    ("sage", "vivian"),
    ("shimmer", "serena"),
    ("verse", "aiden"),
    ("marin", "vivian"),
    ("cedar", "ryan"),
];

/// The official speakers that speak a Chinese dialect (`spk_is_dialect`).
const OFFICIAL_DIALECT_SPEAKERS: [&str; 2] = ["eric", "dylan"];

/// One checkpoint's preset speakers, and the names a request may give
/// for one (a speaker's own, or an OpenAI voice name mapped onto one).
#[derive(Clone, Debug)]
pub struct Speakers {
    /// Checkpoint speakers, lower-case, sorted (as `Qwen3Tts::speakers`).
    speakers: Vec<String>,
    /// Speakers of a Chinese dialect (never an OpenAI voice's target).
    dialects: Vec<String>,
    /// The deployment's own choices (`--voice-map`, `voice_map` in the
    /// config file): OpenAI voice → speaker, ahead of the official table.
    overrides: Vec<(&'static str, String)>,
}

/// A `--voice-map` entry the checkpoint or OpenAI's names cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoiceMapError {
    #[error("voice map: {voice:?} is not an OpenAI voice name; map one of: {}", OPENAI_VOICES.join(", "))]
    NotOpenAi { voice: String },
    #[error("voice map: {voice} = {speaker:?}: the checkpoint has no speaker {speaker:?}; its speakers: {}", if valid.is_empty() { "none (it speaks no preset speakers)".to_string() } else { valid.join(", ") })]
    UnknownSpeaker {
        voice: String,
        speaker: String,
        valid: Vec<String>,
    },
}

/// Parses `alloy=vivian,ash=ryan` (the `--voice-map` spelling; spaces
/// around names are dropped) into pairs, checking only the OpenAI side: the
/// speakers are checked against the checkpoint when it is loaded.
pub fn parse_voice_map(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((v, sp)) = entry.split_once('=') else {
            return Err(format!(
                "voice map entry {entry:?} is not OPENAI_VOICE=SPEAKER (e.g. alloy=vivian)"
            ));
        };
        let (v, sp) = (v.trim().to_lowercase(), sp.trim().to_lowercase());
        if sp.is_empty() {
            return Err(format!("voice map entry {entry:?} names no speaker"));
        }
        check_openai_voice(&v).map_err(|e| e.to_string())?;
        out.push((v, sp));
    }
    Ok(out)
}

/// `Ok` with the static name when `voice` is one of OpenAI's.
pub fn check_openai_voice(voice: &str) -> Result<&'static str, VoiceMapError> {
    let v = voice.trim().to_lowercase();
    OPENAI_VOICES
        .iter()
        .find(|o| **o == v)
        .copied()
        .ok_or(VoiceMapError::NotOpenAi { voice: v })
}

impl Speakers {
    pub fn new(mut speakers: Vec<String>) -> Self {
        speakers.iter_mut().for_each(|s| *s = s.to_lowercase());
        speakers.sort();
        let dialects = OFFICIAL_DIALECT_SPEAKERS
            .iter()
            .map(|s| s.to_string())
            .filter(|s| speakers.contains(s))
            .collect();
        Speakers {
            speakers,
            dialects,
            overrides: Vec::new(),
        }
    }

    /// These voices with OpenAI names mapped as `map` says (later entries
    /// win), refused when a name is not OpenAI's or a speaker is not the
    /// checkpoint's.
    pub fn with_overrides(mut self, map: &[(String, String)]) -> Result<Self, VoiceMapError> {
        for (voice, speaker) in map {
            let v = check_openai_voice(voice)?;
            let sp = speaker.trim().to_lowercase();
            if !self.speakers.contains(&sp) {
                return Err(VoiceMapError::UnknownSpeaker {
                    voice: v.to_string(),
                    speaker: sp,
                    valid: self.speakers.clone(),
                });
            }
            self.overrides.retain(|(o, _)| *o != v);
            self.overrides.push((v, sp));
        }
        Ok(self)
    }

    /// True when the deployment mapped OpenAI voice `voice` itself.
    pub fn is_overridden(&self, voice: &str) -> bool {
        self.overrides.iter().any(|(o, _)| *o == voice)
    }

    /// Marks these speakers as dialect speakers (the checkpoint's
    /// `spk_is_dialect`), in addition to the official ones.
    pub fn with_dialects(mut self, dialects: impl IntoIterator<Item = String>) -> Self {
        for d in dialects {
            let d = d.to_lowercase();
            if !self.dialects.contains(&d) {
                self.dialects.push(d);
            }
        }
        self
    }

    /// The speakers' names, lower-case, sorted.
    pub fn names(&self) -> &[String] {
        &self.speakers
    }

    /// Each OpenAI voice's speaker: the deployment's override if any; then
    /// the official table where the checkpoint has that speaker; otherwise, deterministically, one of
    /// the checkpoint's non-dialect speakers (all of them only if every
    /// speaker is a dialect one), spread over them in name order.
    pub fn openai_mapping(&self) -> Vec<(&'static str, &str)> {
        let plain: Vec<&str> = self
            .speakers
            .iter()
            .filter(|s| !self.dialects.contains(s))
            .map(String::as_str)
            .collect();
        let pool: Vec<&str> = if plain.is_empty() {
            self.speakers.iter().map(String::as_str).collect()
        } else {
            plain
        };
        if pool.is_empty() {
            return Vec::new();
        }
        OPENAI_VOICES
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if let Some((_, s)) = self.overrides.iter().find(|(o, _)| o == v) {
                    return (*v, s.as_str());
                }
                let official = OFFICIAL_MAP
                    .iter()
                    .find(|(o, _)| o == v)
                    .and_then(|(_, s)| pool.iter().find(|p| *p == s).copied());
                (*v, official.unwrap_or(pool[i % pool.len()]))
            })
            .collect()
    }

    /// True for the OpenAI voices OpenAI describes as female (or neutral).
    pub fn openai_is_female(voice: &str) -> bool {
        OPENAI_FEMALE.contains(&voice)
    }

    /// A checkpoint speaker or an OpenAI voice (case-insensitive) → the
    /// speaker; `None` when it is neither.
    pub fn resolve(&self, name: &str) -> Option<String> {
        let name = name.trim().to_lowercase();
        if self.speakers.contains(&name) {
            return Some(name);
        }
        self.openai_mapping()
            .into_iter()
            .find(|(v, _)| *v == name)
            .map(|(_, s)| s.to_string())
    }

    /// Every accepted name: speakers first, then OpenAI names.
    pub fn valid(&self) -> Vec<String> {
        let mut v = self.speakers.clone();
        v.extend(OPENAI_VOICES.iter().map(|s| s.to_string()));
        v
    }

    pub fn default_speaker(&self) -> Option<&str> {
        self.speakers.first().map(|s| s.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFICIAL: [&str; 9] = [
        "serena", "vivian", "uncle_fu", "ryan", "aiden", "ono_anna", "sohee", "eric", "dylan",
    ];

    #[test]
    fn openai_voices_map_by_gender_and_never_to_a_dialect_speaker() {
        let v = Speakers::new(OFFICIAL.iter().map(|s| s.to_string()).collect());
        let map = v.openai_mapping();
        assert_eq!(map.len(), OPENAI_VOICES.len());
        for (voice, speaker) in &map {
            assert!(!["eric", "dylan"].contains(speaker), "{voice} → {speaker}");
            let female = ["serena", "vivian", "ono_anna", "sohee"].contains(speaker);
            assert_eq!(
                female,
                Speakers::openai_is_female(voice),
                "{voice} → {speaker}"
            );
        }
        assert_eq!(v.resolve("ash").as_deref(), Some("ryan"));
        assert_eq!(v.resolve("Nova").as_deref(), Some("serena"));
        assert_eq!(v.resolve("onyx").as_deref(), Some("uncle_fu"));
        // Different neighbouring voices, different speakers.
        assert_ne!(v.resolve("alloy"), v.resolve("coral"));
        assert_ne!(v.resolve("ash"), v.resolve("ballad"));
    }

    #[test]
    fn voice_map_overrides_the_official_table_and_names_what_it_refuses() {
        let map = parse_voice_map("alloy=Vivian, ash = aiden").unwrap();
        assert_eq!(
            map,
            [
                ("alloy".into(), "vivian".into()),
                ("ash".into(), "aiden".into())
            ]
        );
        let v = Speakers::new(OFFICIAL.iter().map(|s| s.to_string()).collect())
            .with_overrides(&map)
            .unwrap();
        assert_eq!(v.resolve("alloy").as_deref(), Some("vivian"));
        assert_eq!(v.resolve("ash").as_deref(), Some("aiden"));
        assert_eq!(v.resolve("nova").as_deref(), Some("serena"), "not mapped");
        assert!(v.is_overridden("alloy") && !v.is_overridden("nova"));
        let e = parse_voice_map("bob=ryan").unwrap_err();
        assert!(e.contains("\"bob\" is not an OpenAI voice"), "{e}");
        assert!(parse_voice_map("alloy")
            .unwrap_err()
            .contains("OPENAI_VOICE=SPEAKER"));
        let e = Speakers::new(vec!["ryan".into()])
            .with_overrides(&[("alloy".into(), "nobody".into())])
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("no speaker \"nobody\"; its speakers: ryan"),
            "{e}"
        );
    }

    #[test]
    fn other_checkpoints_spread_openai_names_over_their_plain_speakers() {
        let v = Speakers::new(vec!["Ryan".into(), "zed".into(), "eric".into()])
            .with_dialects(["zed".to_string()]);
        assert_eq!(v.names(), ["eric", "ryan", "zed"]);
        for (voice, speaker) in v.openai_mapping() {
            assert_eq!(speaker, "ryan", "{voice}: the only plain speaker");
        }
        assert_eq!(v.resolve("RYAN").as_deref(), Some("ryan"));
        assert_eq!(v.resolve("bob"), None);
        assert!(v.valid().contains(&"shimmer".to_string()));
        // All dialect speakers: use them rather than refuse.
        let d = Speakers::new(vec!["eric".into(), "dylan".into()]);
        assert!(d.resolve("alloy").is_some());
    }
}
