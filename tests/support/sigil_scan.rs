//! Feeding a turn to the streaming sigil scanner the way the runner does: each message in
//! chunks, then the end of the message.

use ralph::engine::sigils::{SigilScanner, Sigils};

/// The sigils of a turn whose messages are each pushed as the given chunks.
pub fn scan(messages: &[Vec<&str>]) -> Sigils {
    let mut scanner = SigilScanner::new();
    for chunks in messages {
        for chunk in chunks {
            scanner.push(chunk);
        }
        scanner.end_message();
    }
    scanner.finish()
}
