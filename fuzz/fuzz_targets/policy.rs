//! Policy parsing: never panics; every accepted policy round-trips through its canonical
//! text and through JSON; every rejection names a field and a rule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::Policy;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match text.parse::<Policy>() {
        Ok(p) => {
            let again: Policy = p.to_string().parse().expect("canonical text parses");
            assert_eq!(p, again);
            let json = serde_json::to_string(&p).unwrap();
            let back: Policy = serde_json::from_str(&json).expect("JSON round trip");
            assert_eq!(p, back);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    // The JSON table form must never panic either.
    let _ = serde_json::from_str::<Policy>(text);
});
