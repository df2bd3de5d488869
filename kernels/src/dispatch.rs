//! Which instruction-set path the kernels take: detected once per process,
//! unless the installed [`crate::KernelSettings::isa`] forces one.

use std::sync::OnceLock;

use crate::instruction_set::Isa;

/// The choice `isa()` makes for a forced path
/// ([`crate::KernelSettings::isa`], `TTS_RT_ISA`): a supported forced path
/// wins; a path the CPU lacks falls back to detection (silently: kernels do
/// not log, the caller can compare `isa()` with what it asked for).
pub(crate) fn select(forced: Option<Isa>) -> Isa {
    match forced {
        Some(i) if i.is_supported() => i,
        _ => Isa::detect(),
    }
}

/// The path in use: detected at first call, unless the installed
/// [`crate::KernelSettings::isa`] forces another.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| select(crate::settings::get().isa))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_path_is_used_only_when_supported() {
        assert_eq!(select(Some(Isa::Scalar)), Isa::Scalar);
        assert_eq!(select(None), Isa::detect());
        for i in Isa::ALL {
            let forced = select(Some(i));
            if i.is_supported() {
                assert_eq!(forced, i);
            } else {
                assert_eq!(forced, Isa::detect());
            }
        }
    }
}
