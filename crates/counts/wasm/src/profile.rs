//! `--profile`: where one call's wasm operators go, function by function, in the shipped
//! `.wasm` (wasmi has no per-function profile, so this makes one).
//!
//! The module is rewritten ([`instrument`]): every defined function's body moves to a new
//! function, and the function keeps its index (so every call, export and table entry still
//! reaches it) with a wrapper for a body: `enter(i)`, the moved body called with the same
//! arguments, `leave(i)`, where `i` is the function's index in the file as shipped and
//! `enter`/`leave` are host imports that read the fuel left. The moved bodies are the
//! shipped operators unchanged, so what a function's body costs is what it costs shipped.
//!
//! wasmi charges a control frame's fuel when the frame starts (a function's body, a loop's
//! round, an `if`'s branch: each 1 for the frame itself, plus 1 a Wasm operator but `nop`,
//! `drop`, `block`, `loop`, `else`, `end`, `return` and `unreachable`), so a wrapper's own
//! cost (its frame, its `n` argument `local.get`s, two `i32.const`s and three `call`s:
//! `n + 6`) is charged before its `enter` reads the fuel, inside its caller's window. A
//! function's *exclusive* count is then its window (the fuel between its `enter` and `leave`)
//! less its direct callees' windows and their wrappers' `n + 6`: its own body's operators and
//! frames, its `call` operators included. The exclusive counts of all calls add up to the
//! uninstrumented count
//! (the report checks it), which is what makes the table exact rather than an estimate.

use std::cell::RefCell;
use std::collections::HashMap;

use wasm_encoder::reencode::{utils, Error as ReencodeError, Reencode};
use wasm_encoder::{
    CodeSection, EntityType, Function, FunctionSection, ImportSection, Instruction,
};
use wasm_encoder::{TypeSection, ValType};
use wasmparser::{Parser, Payload};

/// The import module of the two probes.
pub const MODULE: &str = "tollgate_profile";

/// The rewrite: the function imports (the two probes after them), then one wrapper per
/// defined function at the function's own index, then the moved bodies. Every function index
/// in the module (calls, exports, table entries, `ref.func`) is moved past the two probes, so
/// it names the wrapper; only the wrappers call the moved bodies.
struct Probes {
    /// Function imports in the original module.
    imports: u32,
    /// The defined functions' type indices, in order.
    defined: Vec<u32>,
    /// Parameter counts by type index.
    params: Vec<u32>,
    /// Globals (imported and defined) in the original module: the operator counter's index.
    globals: u32,
    /// Whether the moved bodies bump the operator counter (which costs fuel: the fuel is
    /// counted on a module without the bumps, the operators run on one with them).
    count: bool,
}

/// The export of the operator counter (an `i64` global, see [`Probes::count_operators`]).
pub const COUNTER: &str = "tollgate_profile_operators";

/// What wasmi's default fuel charges an operator (besides its frame): 0 for `nop`, `drop`,
/// `block`, `loop`, `else`, `end`, `return` and `unreachable`, 1 for any other.
fn operator_cost(op: &wasmparser::Operator<'_>) -> i64 {
    use wasmparser::Operator as O;
    match op {
        O::Nop | O::Drop | O::Block { .. } | O::Loop { .. } | O::Else | O::End | O::Return => 0,
        O::Unreachable => 0,
        _ => 1,
    }
}

/// Whether straight-line code ends after `op` (the next operator may not run when `op` does).
fn ends_segment(op: &wasmparser::Operator<'_>) -> bool {
    use wasmparser::Operator as O;
    matches!(
        op,
        O::Block { .. }
            | O::Loop { .. }
            | O::If { .. }
            | O::Else
            | O::End
            | O::Br { .. }
            | O::BrIf { .. }
            | O::BrTable { .. }
            | O::Return
            | O::Unreachable
    )
}

impl Probes {
    /// One moved body, with the operator counter bumped at the start of each straight-line
    /// segment by the segment's operators (what wasmi's default fuel charges for them): the
    /// operators that run, and only those (a branch past a segment skips its bump), without
    /// wasmi's charges for the frames and for the operators a branch skips in a frame it has
    /// entered (see the module docs).
    fn count_operators(&mut self, body: wasmparser::FunctionBody<'_>) -> Rewrite<Function> {
        let mut f = self.new_function_with_parsed_locals(&body)?;
        let mut segment = Vec::new();
        let mut cost = 0;
        let counter = self.globals;
        let flush = |f: &mut Function, segment: &mut Vec<Instruction<'_>>, cost: &mut i64| {
            if *cost > 0 {
                f.instruction(&Instruction::GlobalGet(counter));
                f.instruction(&Instruction::I64Const(*cost));
                f.instruction(&Instruction::I64Add);
                f.instruction(&Instruction::GlobalSet(counter));
            }
            for i in segment.drain(..) {
                f.instruction(&i);
            }
            *cost = 0;
        };
        let mut reader = body.get_operators_reader()?;
        while !reader.eof() {
            let op = reader.read()?;
            let ends = ends_segment(&op);
            cost += operator_cost(&op);
            match op {
                // `else` and `end` close the segment before them (the `then` branch's, the
                // frame's) and run nothing themselves.
                wasmparser::Operator::Else | wasmparser::Operator::End => {
                    flush(&mut f, &mut segment, &mut cost);
                    f.instruction(&self.instruction(op)?);
                }
                _ => {
                    segment.push(self.instruction(op)?);
                    if ends {
                        flush(&mut f, &mut segment, &mut cost);
                    }
                }
            }
        }
        flush(&mut f, &mut segment, &mut cost);
        Ok(f)
    }

    /// The probes' type, added after the module's types.
    fn probe_type(&self) -> u32 {
        self.params.len() as u32
    }
}

type Rewrite<T> = std::result::Result<T, ReencodeError>;

impl Reencode for Probes {
    type Error = std::convert::Infallible;

    fn function_index(&mut self, func: u32) -> Rewrite<u32> {
        Ok(if func < self.imports { func } else { func + 2 })
    }

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Rewrite<()> {
        utils::parse_type_section(self, types, section)?;
        types.ty().function([ValType::I32], []);
        Ok(())
    }

    fn parse_import_section(
        &mut self,
        imports: &mut ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Rewrite<()> {
        utils::parse_import_section(self, imports, section)?;
        let probe = EntityType::Function(self.probe_type());
        imports.import(MODULE, "enter", probe);
        imports.import(MODULE, "leave", probe);
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        _: wasmparser::FunctionSectionReader<'_>,
    ) -> Rewrite<()> {
        // The wrappers, then the moved bodies: the same types twice.
        for _ in 0..2 {
            for ty in &self.defined {
                functions.function(*ty);
            }
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Rewrite<()> {
        let (enter, leave) = (self.imports, self.imports + 1);
        let n = self.defined.len() as u32;
        for (k, ty) in self.defined.iter().enumerate() {
            let k = k as u32;
            let index = (self.imports + k) as i32;
            let mut f = Function::new([]);
            f.instruction(&Instruction::I32Const(index));
            f.instruction(&Instruction::Call(enter));
            for a in 0..self.params[*ty as usize] {
                f.instruction(&Instruction::LocalGet(a));
            }
            f.instruction(&Instruction::Call(self.imports + 2 + n + k));
            f.instruction(&Instruction::I32Const(index));
            f.instruction(&Instruction::Call(leave));
            f.instruction(&Instruction::End);
            code.function(&f);
        }
        if !self.count {
            return utils::parse_code_section(self, code, section);
        }
        for body in section {
            let f = self.count_operators(body?)?;
            code.function(&f);
        }
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut wasm_encoder::GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Rewrite<()> {
        utils::parse_global_section(self, globals, section)?;
        let ty = wasm_encoder::GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        globals.global(ty, &wasm_encoder::ConstExpr::i64_const(0));
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut wasm_encoder::ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Rewrite<()> {
        utils::parse_export_section(self, exports, section)?;
        exports.export(COUNTER, wasm_encoder::ExportKind::Global, self.globals);
        Ok(())
    }
}

/// `wasm` with every defined function wrapped as the module docs say; also each function's
/// wrapper cost (`n + 6`), by its index.
pub fn instrument(wasm: &[u8], count: bool) -> Result<(Vec<u8>, HashMap<u32, u64>), crate::Error> {
    let mut probes = Probes {
        imports: 0,
        defined: Vec::new(),
        params: Vec::new(),
        globals: 0,
        count,
    };
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::TypeSection(types) => {
                for ty in types.into_iter_err_on_gc_types() {
                    probes.params.push(ty?.params().len() as u32);
                }
            }
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    match import?.ty {
                        wasmparser::TypeRef::Func(_) => probes.imports += 1,
                        wasmparser::TypeRef::Global(_) => probes.globals += 1,
                        _ => {}
                    }
                }
            }
            Payload::GlobalSection(globals) => probes.globals += globals.count(),
            Payload::FunctionSection(funcs) => {
                for ty in funcs {
                    probes.defined.push(ty?);
                }
            }
            _ => {}
        }
    }
    let costs = probes
        .defined
        .iter()
        .enumerate()
        .map(|(k, ty)| {
            (
                probes.imports + k as u32,
                probes.params[*ty as usize] as u64 + 6,
            )
        })
        .collect();
    let mut module = wasm_encoder::Module::new();
    probes
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| format!("rewriting the module: {e:?}"))?;
    Ok((module.finish(), costs))
}

/// One function's totals over the recorded calls.
#[derive(Default, Clone, Copy)]
struct Totals {
    calls: u64,
    exclusive: u64,
    inclusive: u64,
    /// The same, in operators run (the counter; no wrapper costs: wrappers do not count).
    exclusive_run: u64,
    inclusive_run: u64,
}

/// A call being run: its function, the fuel left at its `enter`, and what its direct callees
/// took (their windows and wrappers).
struct Open {
    index: u32,
    fuel_at_enter: u64,
    callees: u64,
    run_at_enter: u64,
    callees_run: u64,
    /// The wrappers of every call made inside this one (not in the uninstrumented count).
    wrappers: u64,
}

#[derive(Default)]
struct Profile {
    recording: bool,
    /// What the recorded calls measure: the fuel (a module without the counter's bumps) or
    /// the operators run (one with them).
    fuel: bool,
    wrapper_cost: HashMap<u32, u64>,
    stack: Vec<Open>,
    totals: HashMap<u32, Totals>,
    /// Calls and inclusive counts by (caller, callee).
    edges: HashMap<(u32, u32), (u64, u64, u64)>,
}

thread_local! {
    static PROFILE: RefCell<Profile> = RefCell::new(Profile::default());
}

/// The wrapper costs [`instrument`] returned, for the probes.
pub fn set_wrapper_costs(costs: HashMap<u32, u64>) {
    PROFILE.with(|p| p.borrow_mut().wrapper_cost = costs);
}

/// Starts recording the fuel (`Some(true)`) or the operators run (`Some(false)`), or stops
/// (`None`).
pub fn record(what: Option<bool>) {
    PROFILE.with(|p| {
        let mut p = p.borrow_mut();
        p.recording = what.is_some();
        p.fuel = what.unwrap_or(false);
    });
}

/// The probe `enter(index)`, with the fuel left and the operators run so far.
pub fn enter(index: u32, fuel: u64, run: u64) {
    PROFILE.with(|p| {
        p.borrow_mut().stack.push(Open {
            index,
            fuel_at_enter: fuel,
            callees: 0,
            run_at_enter: run,
            callees_run: 0,
            wrappers: 0,
        })
    });
}

/// The probe `leave(index)`, with the fuel left and the operators run so far.
pub fn leave(index: u32, fuel: u64, run: u64) -> Result<(), String> {
    PROFILE.with(|p| {
        let mut p = p.borrow_mut();
        let open = p.stack.pop().ok_or("leave without enter")?;
        if open.index != index {
            return Err(format!("leave {index} inside {}", open.index));
        }
        let window = open.fuel_at_enter - fuel;
        let exclusive = window - open.callees;
        // The window less the probes' wrappers inside it: the uninstrumented inclusive count.
        let inclusive = window - open.wrappers;
        let window_run = run - open.run_at_enter;
        let exclusive_run = window_run - open.callees_run;
        let wrapper = p.wrapper_cost.get(&index).copied().unwrap_or(0);
        let recursive = p.stack.iter().any(|o| o.index == index);
        let mut caller = None;
        if let Some(parent) = p.stack.last_mut() {
            parent.callees += window + wrapper;
            parent.callees_run += window_run;
            parent.wrappers += open.wrappers + wrapper;
            caller = Some(parent.index);
        }
        if let (Some(caller), true) = (caller, p.recording) {
            let fuel = p.fuel;
            let e = p.edges.entry((caller, index)).or_default();
            if fuel {
                e.0 += 1;
                e.1 += inclusive;
            } else {
                e.2 += window_run;
            }
        }
        if p.recording {
            let fuel = p.fuel;
            let t = p.totals.entry(index).or_default();
            if fuel {
                t.calls += 1;
                t.exclusive += exclusive;
                t.inclusive += if recursive { 0 } else { inclusive };
            } else {
                t.exclusive_run += exclusive_run;
                t.inclusive_run += if recursive { 0 } else { window_run };
            }
        }
        Ok(())
    })
}

/// Prints the recorded totals per call of the path (`calls` of them), with each function's
/// name from `names` (wasm-opt's `--symbolmap`: `index:name` lines), the largest first: wasmi's
/// fuel (what `scripts/counts.sh --npm` counts) and the operators run. Returns the sums of
/// the exclusive counts per call (fuel, operators run).
pub fn report(calls: u64, names: &HashMap<u32, String>) -> (f64, f64) {
    PROFILE.with(|p| {
        let p = p.borrow();
        let mut rows: Vec<(u32, Totals)> = p.totals.iter().map(|(i, t)| (*i, *t)).collect();
        rows.sort_by(|a, b| b.1.exclusive.cmp(&a.1.exclusive).then(a.0.cmp(&b.0)));
        let per = |x: u64| x as f64 / calls as f64;
        let short = |i: &u32| {
            let name = names.get(i).map(String::as_str).unwrap_or("?");
            // Without the symbol's hash suffix and the crate's disambiguator.
            let name = match name.rsplit_once("::h") {
                Some((stem, hash)) if hash.len() == 16 => stem,
                _ => name,
            };
            name.replace("core[c5930c85a12de822]", "core")
        };
        println!(
            "per call: fuel (exclusive, inclusive), operators run (exclusive, inclusive), calls"
        );
        println!(
            "{:>6} {:>8} {:>8} {:>8} {:>8} {:>6}  function",
            "index", "fuel", "incl", "run", "incl", "calls"
        );
        for (i, t) in &rows {
            println!(
                "{:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>6.2}  {}",
                i,
                per(t.exclusive),
                per(t.inclusive),
                per(t.exclusive_run),
                per(t.inclusive_run),
                per(t.calls),
                short(i)
            );
        }
        let fuel: u64 = rows.iter().map(|(_, t)| t.exclusive).sum();
        let run: u64 = rows.iter().map(|(_, t)| t.exclusive_run).sum();
        println!(
            "{:>6} {:>8.1} {:>8} {:>8.1}  (sums)",
            "",
            per(fuel),
            "",
            per(run)
        );
        let mut edges: Vec<_> = p.edges.iter().collect();
        edges.sort_by_key(|(k, _)| **k);
        println!("\ncalls (caller -> callee: calls, inclusive fuel, inclusive operators run)");
        for ((from, to), (n, incl, run)) in edges {
            println!(
                "  {} -> {}: {:.2}, {:.1}, {:.1}",
                short(from),
                short(to),
                per(*n),
                per(*incl),
                per(*run)
            );
        }
        (per(fuel), per(run))
    })
}

/// `index:name` lines (wasm-opt's `--symbolmap`) as a map.
pub fn names(map: &str) -> HashMap<u32, String> {
    map.lines()
        .filter_map(|l| {
            let (i, name) = l.split_once(':')?;
            Some((i.parse().ok()?, name.to_string()))
        })
        .collect()
}
