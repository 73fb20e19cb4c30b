//! Shared by the client examples that serve lines (storm.rs, settler.rs).

/// The lines of stdin, read on a thread of their own (stdin blocks), as they come.
pub fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use std::io::BufRead;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
