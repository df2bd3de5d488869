//! Reading a config file: the JSON of one file and a key reader that names
//! the file and the dotted key path in every error.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::checkpoint::read_text;
use crate::error::{ModelError, Result};

/// Reads keys out of a JSON object, naming `file` and the dotted key path in
/// every error.
pub(super) struct Obj<'a> {
    pub(super) file: &'a Path,
    pub(super) prefix: String,
    pub(super) v: &'a Value,
}

impl<'a> Obj<'a> {
    /// The top-level object of `file`, whose `model_type` must be
    /// `expected`.
    pub(super) fn root(file: &'a Path, v: &'a Value, expected: &'static str) -> Result<Self> {
        if !v.is_object() {
            return Err(ModelError::Config {
                path: file.into(),
                message: "must be a JSON object".into(),
            });
        }
        let root = Obj {
            file,
            prefix: String::new(),
            v,
        };
        let model_type = root.str("model_type")?;
        if model_type != expected {
            return Err(ModelError::UnknownModelType {
                path: file.into(),
                found: model_type.into(),
                expected,
            });
        }
        Ok(root)
    }
    pub(super) fn err(&self, key: &str, message: impl std::fmt::Display) -> ModelError {
        ModelError::Config {
            path: self.file.to_path_buf(),
            message: format!("`{}{key}` {message}", self.prefix),
        }
    }
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.v.get(key).filter(|v| !v.is_null())
    }
    pub(super) fn sub(&self, key: &str) -> Result<Obj<'a>> {
        match self.get(key) {
            Some(v) if v.is_object() => Ok(Obj {
                file: self.file,
                prefix: format!("{}{key}.", self.prefix),
                v,
            }),
            Some(_) => Err(self.err(key, "must be an object")),
            None => Err(self.err(key, "is missing")),
        }
    }
    /// `key`'s object, or an empty one when it is absent (every key then
    /// takes its default).
    pub(super) fn sub_or_empty(&self, key: &str) -> Result<Obj<'a>> {
        static EMPTY: std::sync::LazyLock<Value> =
            std::sync::LazyLock::new(|| Value::Object(Default::default()));
        match self.get(key) {
            None => Ok(Obj {
                file: self.file,
                prefix: format!("{}{key}.", self.prefix),
                v: &EMPTY,
            }),
            Some(_) => self.sub(key),
        }
    }

    /// `key` as a positive integer, `default` when absent.
    pub(super) fn positive_or(&self, key: &str, default: usize) -> Result<usize> {
        let x = self.usize_or(key, default)?;
        if x == 0 {
            return Err(self.err(key, "must be positive"));
        }
        Ok(x)
    }

    pub(super) fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key).ok_or_else(|| self.err(key, "is missing"))?;
        v.as_u64()
            .map(|x| x as usize)
            .ok_or_else(|| self.err(key, format!("must be a non-negative integer, found {v}")))
    }
    pub(super) fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        if self.get(key).is_some() {
            self.usize(key)
        } else {
            Ok(default)
        }
    }
    pub(super) fn positive(&self, key: &str) -> Result<usize> {
        let x = self.usize(key)?;
        if x == 0 {
            return Err(self.err(key, "must be positive"));
        }
        Ok(x)
    }
    pub(super) fn u32(&self, key: &str) -> Result<u32> {
        let x = self.usize(key)?;
        u32::try_from(x).map_err(|_| self.err(key, "is too large"))
    }
    pub(super) fn f64(&self, key: &str) -> Result<f64> {
        let v = self.get(key).ok_or_else(|| self.err(key, "is missing"))?;
        v.as_f64()
            .ok_or_else(|| self.err(key, format!("must be a number, found {v}")))
    }
    pub(super) fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        if self.get(key).is_some() {
            self.f64(key)
        } else {
            Ok(default)
        }
    }
    pub(super) fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(key, format!("must be true or false, found {v}"))),
        }
    }
    pub(super) fn str(&self, key: &str) -> Result<&'a str> {
        let v = self.get(key).ok_or_else(|| self.err(key, "is missing"))?;
        v.as_str()
            .ok_or_else(|| self.err(key, format!("must be a string, found {v}")))
    }
    pub(super) fn usize_list(&self, key: &str) -> Result<Vec<usize>> {
        let v = self.get(key).ok_or_else(|| self.err(key, "is missing"))?;
        let arr = v
            .as_array()
            .ok_or_else(|| self.err(key, "must be a list of integers"))?;
        arr.iter()
            .map(|x| {
                x.as_u64()
                    .map(|x| x as usize)
                    .ok_or_else(|| self.err(key, "must be a list of non-negative integers"))
            })
            .collect()
    }
    pub(super) fn id_map(&self, key: &str) -> Result<BTreeMap<String, u32>> {
        let Some(v) = self.get(key) else {
            return Ok(BTreeMap::new());
        };
        let obj = v
            .as_object()
            .ok_or_else(|| self.err(key, "must be an object of name -> id"))?;
        obj.iter()
            .map(|(k, x)| {
                let id = x.as_u64().and_then(|x| u32::try_from(x).ok());
                id.map(|id| (k.to_lowercase(), id))
                    .ok_or_else(|| self.err(&format!("{key}.{k}"), "must be an integer id"))
            })
            .collect()
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = read_text(path)?;
    serde_json::from_str(&text).map_err(|source| ModelError::Json {
        path: path.into(),
        source,
    })
}
