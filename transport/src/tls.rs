//! TLS on the main port (`--tls-cert FILE --tls-key FILE`): the PEM files
//! read and checked at startup, and the acceptor the accept loop wraps each
//! accepted socket in (`listener.rs`). Every route, HTTP and WebSocket
//! (`/v1/realtime` and the dialect sockets, upgraded by hand over the same
//! stream), is then served over TLS on that one port: `https://` and
//! `wss://`.
//!
//! rustls with its `ring` provider: TLS 1.3 and 1.2, ALPN `http/1.1` (the
//! only protocol served). The certificate file holds the chain, leaf first;
//! the key file one private key (PKCS#8, PKCS#1 RSA or SEC1 EC). Each
//! problem is refused at startup naming the file and what is wrong with it:
//! unreadable, not PEM, no certificate, no private key, a key rustls cannot
//! use, or a key that is not the certificate's.
//!
//! A connection's handshake runs on its own task (a slow client holds no
//! other accept) and must finish within the header read timeout
//! (`--header-timeout-s`), or the connection is closed and its slot freed.
//! A plain-HTTP request sent to the TLS port is answered `400` in plain
//! HTTP, saying the port speaks HTTPS, and closed. No TLS 1.3 session
//! tickets are sent (no resumption): see [`load`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::error::TransportError;

/// The certificate chain and private key files (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Which of the two files a problem is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFile {
    Cert,
    Key,
}

impl TlsFile {
    /// How the file is named in messages (its flag).
    pub fn flag(self) -> &'static str {
        match self {
            TlsFile::Cert => "--tls-cert",
            TlsFile::Key => "--tls-key",
        }
    }
}

fn refuse(which: TlsFile, path: &Path, message: impl Into<String>) -> TransportError {
    TransportError::Tls {
        flag: which.flag(),
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Reads `path`, refusing a file that cannot be read or holds no PEM
/// section at all.
fn read_pem(which: TlsFile, path: &Path) -> Result<Vec<u8>, TransportError> {
    let bytes =
        std::fs::read(path).map_err(|e| refuse(which, path, format!("cannot be read: {e}")))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(refuse(
            which,
            path,
            "is not PEM (no `-----BEGIN ...-----` line); give a PEM file (DER files convert \
             with `openssl x509 -inform der` / `openssl pkey -inform der`)",
        ));
    }
    Ok(bytes)
}

/// The certificate chain in `path`, leaf first.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let bytes = read_pem(TlsFile::Cert, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refuse(TlsFile::Cert, path, format!("is not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(refuse(
            TlsFile::Cert,
            path,
            "holds no certificate (no `-----BEGIN CERTIFICATE-----` section)",
        ));
    }
    Ok(certs)
}

/// The private key in `path` (the first one, PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TransportError> {
    let bytes = read_pem(TlsFile::Key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => refuse(
            TlsFile::Key,
            path,
            "holds no private key (no `-----BEGIN PRIVATE KEY-----`, `RSA PRIVATE KEY` or \
             `EC PRIVATE KEY` section)",
        ),
        e => refuse(TlsFile::Key, path, format!("is not valid PEM: {e}")),
    })
}

/// Reads and checks both files; the server's TLS configuration.
pub fn load(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TransportError> {
    let certs = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signing = provider.key_provider.load_private_key(key).map_err(|e| {
        refuse(
            TlsFile::Key,
            &files.key,
            format!("holds a private key that cannot be used: {e}"),
        )
    })?;
    let certified = rustls::sign::CertifiedKey::new(certs, signing);
    match certified.keys_match() {
        // ring's keys all know their public half; a provider's that does
        // not cannot be compared here (rustls accepts it too).
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(refuse(
                TlsFile::Key,
                &files.key,
                format!(
                    "is not the private key of the certificate in {} (their public keys differ)",
                    files.cert.display()
                ),
            ))
        }
        Err(e) => {
            return Err(refuse(
                TlsFile::Cert,
                &files.cert,
                format!("holds a certificate that cannot be parsed: {e}"),
            ))
        }
    }
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| refuse(TlsFile::Cert, &files.cert, format!("TLS setup: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
    // HTTP/1.1 is all the server speaks; a client offering h2 as well
    // settles on it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No TLS 1.3 session tickets: nothing reaches the client after its
    // handshake until the answer to its first request. Tickets arrive
    // just as a client writes that request; `websockets`' sync client
    // (which the ElevenLabs SDK's realtime socket uses) reads its socket
    // on a thread of its own from the moment it connects, so its SSL_read
    // of the tickets and the caller's SSL_write of the upgrade ran at once
    // on one OpenSSL connection, and about once in 500 connections the
    // request was lost: no 101, a timeout 10 s later. Resumption would save
    // a round trip per reconnect; the server's sockets are long-lived.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// The acceptor for `files` (see [`load`]).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TransportError> {
    load(files).map(TlsAcceptor::from)
}

/// True when the first bytes a client sent look like a plain HTTP request
/// (a method's capital letters) rather than a TLS record (which starts
/// with a byte below 0x20).
pub(crate) fn looks_like_plain_http(first: &[u8]) -> bool {
    first.first().is_some_and(u8::is_ascii_uppercase)
}

/// What a plain-HTTP request on the TLS port is answered.
pub(crate) const PLAIN_HTTP_ANSWER: &str = concat!(
    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n",
    "content-length: 108\r\n\r\n",
    "{\"error\":{\"message\":\"this port serves HTTPS (TLS); use https:// or wss://\",",
    "\"type\":\"invalid_request_error\"}}\n"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_answer_states_its_body_length() {
        let (head, body) = PLAIN_HTTP_ANSWER.split_once("\r\n\r\n").unwrap();
        assert!(
            head.ends_with(&format!("\r\ncontent-length: {}", body.len())),
            "{}",
            body.len()
        );
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
        assert!(looks_like_plain_http(b"GET / HTTP/1.1"));
        assert!(!looks_like_plain_http(&[0x16, 0x03, 0x01]));
        assert!(!looks_like_plain_http(b""));
    }
}
