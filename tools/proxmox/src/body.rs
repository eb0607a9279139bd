//! Reading an answer's body under a cap. The cluster decides how much it
//! sends; Airlock decides how much it reads: a `Content-Length` above the
//! cap is refused before a byte of the body is read, and a body without
//! one (chunked, or lying) is read in chunks and dropped as soon as it
//! passes the cap, which closes the connection.

/// At most this much of an API answer is read (`proxmox.max_response_bytes`).
/// A whole-cluster resource list of a few thousand guests is a few MB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 16 << 20;

/// At most this much of the API schema is read at start-up
/// (`proxmox.max_schema_bytes`). PVE 9.1's is about 1.3 MB as JSON and a
/// few MB as the viewer's script.
pub const DEFAULT_MAX_SCHEMA_BYTES: u64 = 32 << 20;

/// A cap and the setting that sets it, so the error can name both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyCap {
    pub bytes: u64,
    /// The configuration key under `[proxmox]`.
    pub setting: &'static str,
}

impl BodyCap {
    pub fn response(bytes: u64) -> Self {
        Self {
            bytes,
            setting: "max_response_bytes",
        }
    }

    pub fn schema(bytes: u64) -> Self {
        Self {
            bytes,
            setting: "max_schema_bytes",
        }
    }
}

/// Why a body was not read whole.
#[derive(Debug)]
pub enum BodyError {
    /// The body is (or declared itself) larger than the cap.
    TooLarge(BodyCap),
    /// The connection failed while reading.
    Transport(reqwest::Error),
}

/// Reads `response`'s body, never holding more than `cap.bytes` plus one
/// chunk. Nothing is allocated up front from what the server declares.
pub async fn read_capped(
    response: &mut reqwest::Response,
    cap: BodyCap,
) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > cap.bytes) {
        return Err(BodyError::TooLarge(cap));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if (body.len() + chunk.len()) as u64 > cap.bytes {
            return Err(BodyError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
