//! Voice names: what a user may call a voice, and the key it is stored under.
//!
//! A name ends up in a file name (`<key>.safetensors`), a URL path segment
//! (`/v1/audio/voices/{name}`) and a CLI argument, so it is restricted to a
//! portable, shell- and URL-safe alphabet and refused before it touches the
//! file system. Names are unique without regard to case (macOS and Windows
//! file systems fold case, and "Alice" and "alice" are one voice to a person):
//! the store keys on the lower-case form and keeps the name as typed for
//! display.

use std::fmt;

/// Longest accepted name, in characters (all ASCII, so also bytes).
pub const MAX_NAME_LEN: usize = 64;

/// File-name stems Windows reserves for devices (`con`, `nul.txt`, `com1`,
/// ...): refused so a voice library copied to Windows still opens.
const RESERVED: &[&str] = &[
    "con", "prn", "aux", "nul", "com0", "com1", "com2", "com3", "com4", "com5", "com6", "com7",
    "com8", "com9", "lpt0", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

/// Why a voice name was refused; each variant names the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    #[error("a voice name must not be empty")]
    Empty,
    #[error("voice name is {len} characters; at most {MAX_NAME_LEN} are allowed")]
    TooLong { len: usize },
    #[error("voice name {name:?} contains {ch:?}; use only letters A-Z a-z, digits, '_', '.' and '-' (no path separators)")]
    BadChar { name: String, ch: char },
    #[error("voice name {name:?} must start with a letter or digit")]
    BadStart { name: String },
    #[error("voice name {name:?} must not end with '.'")]
    TrailingDot { name: String },
    #[error("voice name {name:?} must not contain \"..\"")]
    DotDot { name: String },
    #[error("voice name {name:?} is reserved (a device name on Windows); choose another")]
    Reserved { name: String },
}

/// A validated voice name: the display form as the user typed it, plus its
/// case-folded key (what uniqueness, lookups and file names use).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VoiceName {
    display: String,
    key: String,
}

impl VoiceName {
    /// Checks `name` against every rule and returns it with its key.
    pub fn new(name: &str) -> Result<VoiceName, NameError> {
        validate(name)?;
        Ok(VoiceName {
            display: name.to_owned(),
            key: name.to_ascii_lowercase(),
        })
    }

    /// The name as given (what `list` shows).
    pub fn as_str(&self) -> &str {
        &self.display
    }

    /// The lower-case key: unique within a store, and the file stem.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for VoiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Debug for VoiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display)
    }
}

impl std::str::FromStr for VoiceName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        VoiceName::new(s)
    }
}

/// The rules, in the order a user is best told about them.
fn validate(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    let len = name.chars().count();
    if len > MAX_NAME_LEN {
        return Err(NameError::TooLong { len });
    }
    if let Some(ch) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(NameError::BadChar {
            name: name.to_owned(),
            ch,
        });
    }
    let owned = || name.to_owned();
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(NameError::BadStart { name: owned() });
    }
    if name.contains("..") {
        return Err(NameError::DotDot { name: owned() });
    }
    if name.ends_with('.') {
        return Err(NameError::TrailingDot { name: owned() });
    }
    let stem = name.split('.').next().unwrap_or(name).to_ascii_lowercase();
    if RESERVED.contains(&stem.as_str()) {
        return Err(NameError::Reserved { name: owned() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names_and_folds_case() {
        for ok in [
            "a",
            "Alice",
            "bob_2",
            "v1.2-final",
            "9lives",
            &"x".repeat(64),
        ] {
            let n = VoiceName::new(ok).unwrap();
            assert_eq!(n.as_str(), ok);
            assert_eq!(n.key(), ok.to_ascii_lowercase());
        }
        assert_eq!(
            VoiceName::new("ALICE").unwrap().key(),
            VoiceName::new("alice").unwrap().key()
        );
    }

    #[test]
    fn refuses_path_tricks_and_names_the_rule() {
        assert_eq!(VoiceName::new(""), Err(NameError::Empty));
        assert_eq!(
            VoiceName::new(&"x".repeat(65)),
            Err(NameError::TooLong { len: 65 })
        );
        assert!(matches!(
            VoiceName::new("../x"),
            Err(NameError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            VoiceName::new("a/b"),
            Err(NameError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            VoiceName::new("a\\b"),
            Err(NameError::BadChar { ch: '\\', .. })
        ));
        assert!(matches!(
            VoiceName::new("a\0b"),
            Err(NameError::BadChar { ch: '\0', .. })
        ));
        assert!(matches!(
            VoiceName::new("a b"),
            Err(NameError::BadChar { ch: ' ', .. })
        ));
        assert!(matches!(
            VoiceName::new("é"),
            Err(NameError::BadChar { ch: 'é', .. })
        ));
        assert!(matches!(
            VoiceName::new(".hidden"),
            Err(NameError::BadStart { .. })
        ));
        assert!(matches!(
            VoiceName::new("-rf"),
            Err(NameError::BadStart { .. })
        ));
        assert!(matches!(
            VoiceName::new("a..b"),
            Err(NameError::DotDot { .. })
        ));
        assert!(matches!(
            VoiceName::new("a."),
            Err(NameError::TrailingDot { .. })
        ));
        for reserved in ["con", "NUL", "com1", "Lpt9.voice"] {
            assert!(
                matches!(VoiceName::new(reserved), Err(NameError::Reserved { .. })),
                "{reserved}"
            );
        }
        let msg = VoiceName::new("../x").unwrap_err().to_string();
        assert!(msg.contains("path separators"), "{msg}");
    }
}
