//! Voice names: checkpoint speakers, and OpenAI's voice names mapped onto
//! them so unmodified OpenAI clients work.

/// OpenAI's TTS voice names (the eleven of `tts-1`/`gpt-4o-mini-tts` plus
/// the two newer ones), in a fixed order: the mapping depends only on this
/// list and the checkpoint's sorted speaker list.
pub const OPENAI_VOICES: [&str; 13] = [
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
    "marin", "cedar",
];

/// Resolves voice names for one checkpoint.
#[derive(Clone, Debug)]
pub struct Voices {
    /// Checkpoint speakers, lower-case, sorted (as `Qwen3Tts::speakers`).
    speakers: Vec<String>,
}

impl Voices {
    pub fn new(mut speakers: Vec<String>) -> Self {
        speakers.iter_mut().for_each(|s| *s = s.to_lowercase());
        speakers.sort();
        Voices { speakers }
    }

    pub fn speakers(&self) -> &[String] {
        &self.speakers
    }

    /// OpenAI voice `i` → speaker `i mod n`: deterministic, spreads the
    /// names over every speaker, and stable as long as the checkpoint is.
    pub fn openai_mapping(&self) -> Vec<(&'static str, &str)> {
        if self.speakers.is_empty() {
            return Vec::new();
        }
        OPENAI_VOICES
            .iter()
            .enumerate()
            .map(|(i, v)| (*v, self.speakers[i % self.speakers.len()].as_str()))
            .collect()
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

    #[test]
    fn openai_names_map_deterministically_and_speakers_pass_through() {
        let v = Voices::new(vec!["Ryan".into(), "serena".into(), "eric".into()]);
        assert_eq!(v.speakers(), ["eric", "ryan", "serena"]);
        assert_eq!(v.resolve("alloy").as_deref(), Some("eric"));
        assert_eq!(v.resolve("ash").as_deref(), Some("ryan"));
        assert_eq!(v.resolve("ballad").as_deref(), Some("serena"));
        assert_eq!(v.resolve("coral").as_deref(), Some("eric"));
        assert_eq!(v.resolve("RYAN").as_deref(), Some("ryan"));
        assert_eq!(v.resolve("bob"), None);
        assert_eq!(v.openai_mapping().len(), OPENAI_VOICES.len());
        assert!(v.valid().contains(&"shimmer".to_string()));
    }
}
