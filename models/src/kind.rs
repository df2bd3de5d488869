//! The model family a checkpoint belongs to (`tts_model_type`), in a file
//! of its own: the error type names it in its refusals, and the config
//! parser makes it, so neither may be where the other is defined.

/// The model family variants (`tts_model_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    CustomVoice,
    VoiceDesign,
    Base,
}

impl ModelKind {
    /// The family's name as the model cards spell it.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::CustomVoice => "CustomVoice",
            ModelKind::VoiceDesign => "VoiceDesign",
            ModelKind::Base => "Base",
        }
    }

    /// What a checkpoint of this family does, for refusals: "which ...".
    pub fn capability(self) -> &'static str {
        match self {
            ModelKind::CustomVoice => {
                "speaks its preset speakers (name one); cloning a voice needs a Base checkpoint, describing one a VoiceDesign checkpoint"
            }
            ModelKind::Base => {
                "clones a voice from a reference clip (give reference audio with its transcript, or x-vector only, or a stored voice); preset speakers need a CustomVoice checkpoint, described voices a VoiceDesign checkpoint"
            }
            ModelKind::VoiceDesign => {
                "speaks a voice described in words (give an instruct such as \"a warm, low female voice\"); preset speakers need a CustomVoice checkpoint, cloning a Base checkpoint"
            }
        }
    }

    /// The family's official text mode: Base feeds the text alongside the
    /// frames (`generate_voice_clone(non_streaming_mode=False)`), the
    /// others put it all up front.
    pub fn default_text_streaming(self) -> bool {
        self == ModelKind::Base
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
