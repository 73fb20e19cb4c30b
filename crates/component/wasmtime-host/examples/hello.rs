//! The README's wasmtime example. From crates/component/wasmtime-host, after build.sh:
//! `cargo run --release --example hello`
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};

wasmtime::component::bindgen!({ world: "limiter", path: "../../../wit" });

fn main() -> wasmtime::Result<()> {
    let engine = Engine::new(&Config::new())?;
    let component = Component::from_file(&engine, "../build/tollgate.component.wasm")?;
    let linker = Linker::new(&engine); // empty: the world imports nothing
    let mut store = Store::new(&engine, ());
    let limiter = Limiter::instantiate(&mut store, &component, &linker)?;
    let api = limiter.tollgate_limiter_keyed().keyed_limiter();

    // 2 requests per second per key; at most 1000 limited keys kept.
    let l = api
        .call_create(&mut store, "2/s", 1000)?
        .expect("valid policy");
    for t in [0, 0, 0, 500] {
        let d = api
            .call_check(&mut store, l, "alice", t, 1)?
            .expect("cost within capacity");
        println!(
            "t={t}ms alice: allowed={} remaining={} retry-after={}ms",
            d.allowed, d.remaining, d.retry_after_ms
        );
    }
    let err = api
        .call_create(&mut store, "10/fortnight", 1000)?
        .unwrap_err();
    println!(
        "bad policy: {:?} {:?}: {}",
        err.field, err.rule, err.message
    );
    l.resource_drop(&mut store)?;
    Ok(())
}
