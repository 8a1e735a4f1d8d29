//! The report rendered: as text ([`text`]), one self-contained HTML page ([`html`]), JUnit XML
//! ([`junit`]) and the webhook's summary ([`webhook`]).

pub mod dashboard;
pub mod html;
pub mod junit;
pub mod text;
pub mod webhook;
