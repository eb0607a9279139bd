//! `serve --http` as an OAuth 2.1 resource server, as the MCP
//! authorization spec asks: it accepts JWT access tokens from the issuers
//! `[oauth]` names, checked against the keys their OpenID discovery
//! documents publish, and tells clients where to get one (Protected
//! Resource Metadata, RFC 9728, and the `WWW-Authenticate` challenge).
//!
//! It is never an authorization server: it issues no token. It is a
//! client only to sign people in to the operator console (`login.rs`:
//! the authorization code grant with PKCE). Bearer keys from `airlock enroll` keep working beside tokens.
//!
//! A token is accepted only when all of these hold: its `iss` is a
//! configured issuer; its header's `alg` is on that issuer's list (never
//! an HMAC, never `none`) and, unless turned off, its `typ` is `at+jwt`;
//! the key its `kid` names is published by that issuer and fits the
//! algorithm; the signature verifies; `aud` names this server's resource;
//! `exp` and `nbf` hold within the leeway; every configured scope is
//! granted; the identity claim is a plain name.

mod config;
mod jwks;
pub mod login;
mod metadata;
mod token;

pub use config::{ConfigError, IssuerConfig, OAuthConfig};
pub use jsonwebtoken::Algorithm;
pub use jwks::outbound_tls;
pub use login::{Pending, Person, SignIn, SignInError, SignInSettings};
pub use metadata::ResourceServer;
pub use token::{TokenError, Tokens};
