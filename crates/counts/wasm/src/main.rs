//! The npm package's `Limiter.check` and `Limiter.allow`, counted: the package's `.wasm`
//! (`crates/wasm/pkg/web/tollgate_wasm_bg.wasm`, as `crates/wasm/build.sh` ships it) run
//! under the wasmi interpreter with fuel metering, which by default charges one unit per Wasm
//! operator (`nop`, `drop`, `block`, `loop`, `else`, `end`, `return` and `unreachable` free)
//! and one per control frame entered. It charges a frame (a function's body, an `if`'s branch,
//! a loop's round) whole when the frame starts, so the operators that a branch out of a
//! `block` skips are charged too: a `match` compiled to a `br_table` over blocks pays for
//! every arm (`--profile` counts the operators actually run as well; PERF.md). The fuel of a
//! call is exact and the same on any machine and under any load, so CI can hold it to a
//! margin as it holds the core's valgrind counts (`scripts/counts.sh --npm`,
//! `benches/counts-npm.tsv`; PERF.md). Wasm operators are not machine instructions (a stack
//! machine's `local.get`s and `local.set`s are most of them): compare these counts with each
//! other, not with the core's.
//!
//! `tollgate-counts-wasm WASM PATH ROUNDS` sets the path up (a limiter made as
//! `new Limiter("gcra 1000/s", { maxKeys })` makes it, every key checked once), then makes
//! `ROUNDS` calls, then `ROUNDS` more, and prints the fuel of the second `ROUNDS` calls over
//! `ROUNDS`: one call's count, the set-up and the first calls (which may still move the
//! table) left out. With `--profile MAP` (MAP: wasm-opt's `--symbolmap` of WASM) it prints
//! where that count goes, function by function (profile.rs).
//!
//! What is counted is the wasm side of a call: the export the JS API calls per check
//! (`Core.checkBuf` or `Core.allowBuf`, the key already in the key buffer), the key's UTF-8
//! check, its hash, the keyed store, the decision, the counts and the answer written to the
//! output buffer. Not counted (JavaScript, not wasm): `Date.now()`, the key's copy into wasm
//! memory (`putAscii`), and reading the answer into the decision object.
//!
//! The host provides what the `.wasm` imports from its wasm-bindgen glue: the few calls the
//! set-up makes (the policy and `maxKeys` as JS values: strings and numbers, held here as
//! `externref`s) and the externref table's start; any other import traps with its name, so
//! a change that makes the hot path call out to JS fails here rather than counting wrong.

use std::process::ExitCode;

mod profile;

use wasmi::{
    CompilationMode, Config, Engine, ExternRef, ExternType, Func, Instance, Linker, Memory, Module,
    Nullable, Store, Val, ValType,
};

/// The paths, by the name the baseline file (`benches/counts-npm.tsv`) gives them.
const PATHS: &str = "npm-check-1 npm-allow-1 npm-check-10k npm-allow-10k";

/// The JS values the set-up passes into the module (as `externref`s).
#[derive(Debug, Clone)]
enum Js {
    Undefined,
    Null,
    True,
    False,
    Num(f64),
    Str(String),
}

/// The scrambled key sequence over `0..n` of `benches/check.rs` and `crates/counts` (the same
/// order as the core's keyed counts).
fn key(i: u64, n: u64) -> u64 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) % n
}

/// Key `k` as `bench/check.js` makes its keys: an IPv4-style string.
fn key_text(k: u64) -> String {
    format!("10.{}.{}.{}", (k >> 16) & 255, (k >> 8) & 255, k & 255)
}

type Error = Box<dyn std::error::Error>;

/// The store's data: the instance, for the imports to reach its exports (memory, table,
/// allocator) once it is made.
type Data = Option<Instance>;

/// Export `name` of the instance, for an import's body.
fn export(caller: &wasmi::Caller<'_, Data>, name: &str) -> Result<wasmi::Extern, wasmi::Error> {
    caller
        .data()
        .and_then(|i| i.get_export(caller, name))
        .ok_or_else(|| wasmi::Error::new(format!("no export {name}")))
}

/// The module instantiated, with the exports the JS API's `check` and `allow` call.
struct Host {
    store: Store<Data>,
    instance: Instance,
    memory: Memory,
}

impl Host {
    /// Instantiates `wasm` with the glue's imports ([`glue`]) and starts it as the glue does.
    fn new(wasm: &[u8]) -> Result<Host, Error> {
        let mut config = Config::default();
        config.consume_fuel(true);
        // Every function translated before the first call: lazy translation would charge
        // fuel for translating inside the counted calls.
        config.compilation_mode(CompilationMode::Eager);
        let engine = Engine::new(&config);
        let module = Module::new(&engine, wasm)?;
        let mut store = Store::new(&engine, None);
        store.set_fuel(u64::MAX)?;
        let mut linker = <Linker<Data>>::new(&engine);
        for import in module.imports() {
            let ExternType::Func(ty) = import.ty() else {
                return Err(format!("unexpected import {}", import.name()).into());
            };
            if import.module() == profile::MODULE {
                // The probes of `--profile` (profile.rs): the fuel left, at a function's
                // entry and exit.
                let enter = import.name() == "enter";
                linker.func_new(
                    import.module(),
                    import.name(),
                    ty.clone(),
                    move |caller, params, _| {
                        let index = i32_of(&params[0]) as u32;
                        let fuel = caller.get_fuel()?;
                        let run = match export(&caller, profile::COUNTER)?.into_global() {
                            Some(g) => match g.get(&caller) {
                                Val::I64(n) => n as u64,
                                other => {
                                    return Err(wasmi::Error::new(format!("counter {other:?}")))
                                }
                            },
                            None => return Err(wasmi::Error::new("no operator counter")),
                        };
                        if enter {
                            profile::enter(index, fuel, run);
                            Ok(())
                        } else {
                            profile::leave(index, fuel, run).map_err(wasmi::Error::new)
                        }
                    },
                )?;
                continue;
            }
            let name = import.name().to_string();
            linker.func_new(import.module(), import.name(), ty.clone(), {
                let ty = ty.clone();
                move |caller, params, results| glue(&name, &ty, caller, params, results)
            })?;
        }
        let instance = linker.instantiate_and_start(&mut store, &module)?;
        *store.data_mut() = Some(instance);
        let memory = instance
            .get_memory(&store, "memory")
            .ok_or("no exported memory")?;
        let mut host = Host {
            store,
            instance,
            memory,
        };
        // What the glue does after instantiating (`__wbindgen_start`, when exported).
        if host
            .instance
            .get_func(&host.store, "__wbindgen_start")
            .is_some()
        {
            host.call("__wbindgen_start", &[])?;
        }
        Ok(host)
    }

    /// Export `name` (or `name_<hash>`, as the module is before wasm-bindgen renames it).
    fn func(&self, name: &str) -> Result<Func, Error> {
        let prefix = format!("{name}_");
        self.instance
            .exports(&self.store)
            .find(|e| e.name() == name || e.name().starts_with(&prefix))
            .and_then(|e| e.into_func())
            .ok_or_else(|| format!("no export {name}").into())
    }

    /// Calls export `name`, returning its `n` results.
    fn call(&mut self, name: &str, args: &[Val]) -> Result<Vec<Val>, Error> {
        let f = self.func(name)?;
        let mut out: Vec<Val> = f
            .ty(&self.store)
            .results()
            .iter()
            .map(|t| Val::default_for_ty(*t))
            .collect();
        f.call(&mut self.store, args, &mut out)?;
        Ok(out)
    }

    /// `value` as an `externref` argument.
    fn externref(&mut self, value: Js) -> Val {
        Val::ExternRef(Nullable::Val(ExternRef::new(&mut self.store, value)))
    }

    /// The fuel left (it started at `u64::MAX`).
    fn fuel(&self) -> u64 {
        self.store.get_fuel().expect("fuel metering is on")
    }
}

/// The value of an `i32` argument or result.
fn i32_of(v: &Val) -> i32 {
    match v {
        Val::I32(x) => *x,
        other => panic!("expected an i32, got {other:?}"),
    }
}

/// The JS value behind an `externref` argument.
fn js_of(caller: &wasmi::Caller<'_, Data>, v: &Val) -> Js {
    match v {
        Val::ExternRef(Nullable::Val(r)) => r
            .data(caller)
            .downcast_ref::<Js>()
            .cloned()
            .unwrap_or(Js::Undefined),
        Val::ExternRef(Nullable::Null) => Js::Undefined,
        other => panic!("expected an externref, got {other:?}"),
    }
}

/// One import of the wasm-bindgen glue, by its name (the glue names them
/// `__wbg_<what>_<hash>` or `__wbindgen_<what>`): what the JS glue does, for the values the
/// set-up passes; anything else traps.
fn glue(
    name: &str,
    ty: &wasmi::FuncType,
    mut caller: wasmi::Caller<'_, Data>,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), wasmi::Error> {
    let what = |w: &str| name.contains(w);
    let memory = |caller: &wasmi::Caller<'_, Data>| {
        export(caller, "memory")?
            .into_memory()
            .ok_or_else(|| wasmi::Error::new("memory is not a memory"))
    };
    if what("__wbindgen_init_externref_table") {
        // The glue's: undefined at 0, and undefined, null, true and false at 1024-1027 (the
        // table is made with room for them).
        let table = export(&caller, "__wbindgen_externrefs")?
            .into_table()
            .ok_or_else(|| wasmi::Error::new("no externref table"))?;
        for (at, v) in [
            (0, Js::Undefined),
            (1024, Js::Undefined),
            (1025, Js::Null),
            (1026, Js::True),
            (1027, Js::False),
        ] {
            let r = ExternRef::new(&mut caller, v);
            table.set(&mut caller, at, wasmi::Ref::from(Nullable::Val(r)))?;
        }
        return Ok(());
    }
    if what("__wbindgen_string_get") {
        // (retptr, value): a string is copied into memory the module allocates, its address
        // and length written at retptr; anything else writes 0, 0.
        let at = i32_of(&params[0]) as usize;
        let (ptr, len) = match js_of(&caller, &params[1]) {
            Js::Str(text) => {
                let malloc = export(&caller, "__wbindgen_malloc")?
                    .into_func()
                    .ok_or_else(|| wasmi::Error::new("no __wbindgen_malloc"))?;
                let mut out = [Val::I32(0)];
                malloc.call(
                    &mut caller,
                    &[Val::I32(text.len() as i32), Val::I32(1)],
                    &mut out,
                )?;
                let ptr = i32_of(&out[0]);
                memory(&caller)?.write(&mut caller, ptr as usize, text.as_bytes())?;
                (ptr, text.len() as i32)
            }
            _ => (0, 0),
        };
        let mut words = [0u8; 8];
        words[..4].copy_from_slice(&ptr.to_le_bytes());
        words[4..].copy_from_slice(&len.to_le_bytes());
        memory(&caller)?.write(&mut caller, at, &words)?;
        return Ok(());
    }
    if what("__wbindgen_number_get") {
        // (retptr, value): Option<f64> as the glue writes it: is-some at retptr, the number
        // at retptr + 8.
        let at = i32_of(&params[0]) as usize;
        let (some, n) = match js_of(&caller, &params[1]) {
            Js::Num(n) => (1i32, n),
            _ => (0, 0.0),
        };
        let mem = memory(&caller)?;
        mem.write(&mut caller, at, &some.to_le_bytes())?;
        mem.write(&mut caller, at + 8, &n.to_le_bytes())?;
        return Ok(());
    }
    let test: Option<fn(&Js) -> bool> = if what("__wbindgen_is_null") {
        Some(|v| matches!(v, Js::Null))
    } else if what("__wbindgen_is_undefined") {
        Some(|v| matches!(v, Js::Undefined))
    } else if what("__wbindgen_is_object") {
        Some(|_| false)
    } else {
        None
    };
    if let Some(test) = test {
        results[0] = Val::I32(test(&js_of(&caller, &params[0])) as i32);
        return Ok(());
    }
    // The glue's cast intrinsics (`__wbindgen_generic_<n>`), told apart by their types.
    if what("__wbindgen_generic") && ty.results() == [ValType::ExternRef] {
        let value = match (ty.params(), params) {
            // A number made a JS value (`JsValue::from_f64`).
            ([ValType::F64], [Val::F64(n)]) => Js::Num((*n).into()),
            // A `&str` made a JS string (`JsValue::from(&str)`).
            ([ValType::I32, ValType::I32], [Val::I32(ptr), Val::I32(len)]) => {
                let mut bytes = vec![0; *len as usize];
                memory(&caller)?.read(&caller, *ptr as usize, &mut bytes)?;
                Js::Str(String::from_utf8_lossy(&bytes).into_owned())
            }
            _ => return Err(wasmi::Error::new(format!("cast {name} {ty:?}"))),
        };
        let r = ExternRef::new(&mut caller, value);
        results[0] = Val::ExternRef(Nullable::Val(r));
        return Ok(());
    }
    Err(wasmi::Error::new(format!(
        "import {name} {ty:?} called: the host does not provide it"
    )))
}

/// What `Limiter.check` answers when the request is admitted (the binding's `ALLOWED`).
const ALLOWED: i32 = 1;

/// A time as `Date.now()` gives it (whole ms), where the counted calls start.
const START_MS: f64 = 1_764_000_000_000.0;

/// The counted calls of `path` (the second `rounds`), one call's fuel; with `profiled`, the
/// profile's probes record those calls only (their fuel, or the operators run: profile.rs).
fn run(wasm: &[u8], path: &str, rounds: u64, profiled: Option<bool>) -> Result<Option<f64>, Error> {
    let (export, n) = match path {
        "npm-check-1" => ("core_checkBuf", 1),
        "npm-allow-1" => ("core_allowBuf", 1),
        "npm-check-10k" => ("core_checkBuf", 10_000),
        "npm-allow-10k" => ("core_allowBuf", 10_000),
        _ => return Ok(None),
    };
    let mut host = Host::new(wasm)?;
    // `new Limiter("gcra 1000/s", { maxKeys })`, as `bench/check.js` sizes it: twice the keys.
    let policy = host.externref(Js::Str("gcra 1000/s".into()));
    let out = host.call("core_single", &[policy, Val::F64((2.0 * n as f64).into())])?;
    let core = match out[..] {
        [Val::I32(core), _, Val::I32(0)] => core,
        _ => return Err(format!("core_single failed: {out:?}").into()),
    };
    let key_ptr = i32_of(&host.call("core_keyPtr", &[Val::I32(core)])?[0]) as usize;
    let keys: Vec<String> = (0..n).map(key_text).collect();
    let decide = host.func(export)?;
    let mut now = START_MS;
    // One call as the JS API makes it: the key written into the key buffer, then the export.
    let call = |host: &mut Host, k: u64, now: f64| -> Result<i32, Error> {
        let text = keys[k as usize].as_bytes();
        host.memory.write(&mut host.store, key_ptr, text)?;
        let mut status = [Val::I32(0)];
        decide.call(
            &mut host.store,
            &[
                Val::I32(core),
                Val::I32(text.len() as i32),
                Val::F64(now.into()),
                Val::F64(1.0.into()),
            ],
            &mut status,
        )?;
        Ok(i32_of(&status[0]))
    };
    // Every key stored first (the steady state: no insertion among the counted calls).
    for k in 0..n {
        call(&mut host, k, now)?;
    }
    // 1 ms between calls, as `Date.now()` moves: at 1000/s every call is admitted.
    let mut counted = |host: &mut Host, from: u64| -> Result<u64, Error> {
        let before = host.fuel();
        for i in from..from + rounds {
            now += 1.0;
            let status = call(host, key(i, n), now)?;
            if status != ALLOWED {
                return Err(format!("call {i} answered {status}, not allowed").into());
            }
        }
        Ok(before - host.fuel())
    };
    counted(&mut host, 0)?;
    profile::record(profiled);
    let fuel = counted(&mut host, rounds)?;
    profile::record(None);
    Ok(Some(fuel as f64 / rounds as f64))
}

/// `tollgate-counts-wasm WASM PATH ROUNDS --profile MAP`: the path's count, then where it
/// goes by function (profile.rs), with the names of MAP (wasm-opt's `--symbolmap` for WASM);
/// fails unless the functions' exclusive counts add up to the uninstrumented count.
fn profiled(wasm: &[u8], path: &str, rounds: u64, map: &str) -> ExitCode {
    let result = (|| -> Result<(), Error> {
        let names = profile::names(&std::fs::read_to_string(map)?);
        let plain = run(wasm, path, rounds, None)?.ok_or("unknown path")?;
        let (instrumented, costs) = profile::instrument(wasm, false)?;
        profile::set_wrapper_costs(costs);
        run(&instrumented, path, rounds, Some(true))?;
        let (counting, _) = profile::instrument(wasm, true)?;
        run(&counting, path, rounds, Some(false))?;
        let (fuel, run) = profile::report(rounds, &names);
        println!("\n{path}: {plain:.1} fuel a call uninstrumented (the profile's sum: {fuel:.1}); {run:.1} operators run");
        if (fuel - plain).abs() > 0.05 {
            return Err(format!("the profile adds up to {fuel:.1}, not {plain:.1}").into());
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `tollgate-counts-wasm WASM --list`: the module's imports and exports with their types.
fn list(file: &str) -> ExitCode {
    let Ok(wasm) = std::fs::read(file) else {
        return ExitCode::FAILURE;
    };
    let engine = Engine::default();
    let module = match Module::new(&engine, wasm) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for i in module.imports() {
        println!("import {} {} {:?}", i.module(), i.name(), i.ty());
    }
    for e in module.exports() {
        println!("export {} {:?}", e.name(), e.ty());
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 2 && args[1] == "--list" {
        return list(&args[0]);
    }
    let rounds = args.get(2).and_then(|r| r.parse::<u64>().ok());
    let (Some(file), Some(path), Some(rounds)) = (args.first(), args.get(1), rounds) else {
        eprintln!(
            "usage: tollgate-counts-wasm WASM PATH ROUNDS [--profile MAP]; PATH is one of: {PATHS}"
        );
        return ExitCode::from(2);
    };
    let wasm = match std::fs::read(file) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let [_, _, _, flag, map] = &args[..] {
        if flag == "--profile" {
            return profiled(&wasm, path, rounds, map);
        }
    }
    match run(&wasm, path, rounds, None) {
        Ok(Some(per_call)) => {
            println!("{per_call:.1}");
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!("unknown path {path}; PATH is one of: {PATHS}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}
