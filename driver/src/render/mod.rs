//! The report in other formats than its text: one self-contained HTML page ([`html`]), JUnit XML
//! ([`junit`]) and the webhook's summary ([`webhook`]).

pub mod html;
pub mod junit;
pub mod webhook;
