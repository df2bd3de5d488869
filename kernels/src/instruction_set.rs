//! The instruction-set paths the kernels have ([`Isa`]), what this CPU
//! supports, and their names. Chosen once per process by `dispatch`.

/// Instruction-set path, chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512,
}

impl Isa {
    /// Every path, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2+fma",
            Isa::Avx512 => "avx512f",
        }
    }

    /// Parses the `TTS_RT_ISA` spelling (`scalar`, `avx2`, `avx512`; the
    /// [`Isa::name`] spellings are accepted too).
    pub fn from_name(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "avx2" | "avx2+fma" => Some(Isa::Avx2),
            "avx512" | "avx512f" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => crate::simd::avx2::Avx2::new().is_some(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => crate::simd::avx512::Avx512::new().is_some(),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }

    /// The fastest path this CPU supports.
    pub fn detect() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|i| i.is_supported())
            .unwrap_or(Isa::Scalar)
    }

    /// Every path this CPU supports, slowest first (what differential tests
    /// iterate over).
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }
}
