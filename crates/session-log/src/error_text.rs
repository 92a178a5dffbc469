//! An error in words, with the causes that say what actually went wrong.

/// An error with its causes, which hold what actually went wrong (a server's message, a
/// refused connection): the top error's own text is often only its kind.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
