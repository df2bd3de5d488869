//! Voice names: checkpoint speakers, and OpenAI's voice names mapped onto
//! them so unmodified OpenAI clients work.

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

/// Resolves voice names for one checkpoint.
#[derive(Clone, Debug)]
pub struct Voices {
    /// Checkpoint speakers, lower-case, sorted (as `Qwen3Tts::speakers`).
    speakers: Vec<String>,
    /// Speakers of a Chinese dialect (never an OpenAI voice's target).
    dialects: Vec<String>,
}

impl Voices {
    pub fn new(mut speakers: Vec<String>) -> Self {
        speakers.iter_mut().for_each(|s| *s = s.to_lowercase());
        speakers.sort();
        let dialects = OFFICIAL_DIALECT_SPEAKERS
            .iter()
            .map(|s| s.to_string())
            .filter(|s| speakers.contains(s))
            .collect();
        Voices { speakers, dialects }
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

    pub fn speakers(&self) -> &[String] {
        &self.speakers
    }

    /// Each OpenAI voice's speaker: the official table where the
    /// checkpoint has that speaker; otherwise, deterministically, one of
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
        let v = Voices::new(OFFICIAL.iter().map(|s| s.to_string()).collect());
        let map = v.openai_mapping();
        assert_eq!(map.len(), OPENAI_VOICES.len());
        for (voice, speaker) in &map {
            assert!(!["eric", "dylan"].contains(speaker), "{voice} → {speaker}");
            let female = ["serena", "vivian", "ono_anna", "sohee"].contains(speaker);
            assert_eq!(
                female,
                Voices::openai_is_female(voice),
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
    fn other_checkpoints_spread_openai_names_over_their_plain_speakers() {
        let v = Voices::new(vec!["Ryan".into(), "zed".into(), "eric".into()])
            .with_dialects(["zed".to_string()]);
        assert_eq!(v.speakers(), ["eric", "ryan", "zed"]);
        for (voice, speaker) in v.openai_mapping() {
            assert_eq!(speaker, "ryan", "{voice}: the only plain speaker");
        }
        assert_eq!(v.resolve("RYAN").as_deref(), Some("ryan"));
        assert_eq!(v.resolve("bob"), None);
        assert!(v.valid().contains(&"shimmer".to_string()));
        // All dialect speakers: use them rather than refuse.
        let d = Voices::new(vec!["eric".into(), "dylan".into()]);
        assert!(d.resolve("alloy").is_some());
    }
}
