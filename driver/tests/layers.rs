//! The workspace's imports point one way: no module imports, directly or through others, a module
//! that imports it back, in any crate; and the driver's stages import only from the stages below
//! them ([`DRIVER_STAGES`], the order ARCHITECTURE.md explains). A new module of the driver must
//! be given its place in that table.
//!
//! Every path a file names that starts in its own crate (`crate::`, `super::`, `self::`, a child
//! module or a name it imports) is resolved through the crate's module tree, its items and its
//! `use` bindings, re-exports followed to the module that defines the item. A module and its own
//! descendants are one unit to the rest of the crate: a child using its parent's items, or a
//! parent its child's, is containment, not an import. Any other dependency `a -> b` is one between
//! the two siblings that hold them under their nearest common ancestor (`crate::report::timeline`
//! using `crate::judge::slo` is `report -> judge`), and those sibling graphs must be acyclic. A
//! `pub use` is a facade's forwarding, not a dependency of its own (what the module's own code
//! uses through it still is), and declaring a child module (`mod x;`) is no import.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The driver's stages, bottom up: a module of one may import from its own stage and the ones
/// before it, never after.
const DRIVER_STAGES: [&str; 9] = [
    "matrix", "plan", "launcher", "judge", "capacity", "report", "render", "run", "serve",
];

/// Files in the run stage stay short: the poll loop only feeds events to pure decisions and acts.
const RUN_STAGE_MAX_LINES: usize = 600;

type ModId = usize;

#[derive(Debug)]
struct Import {
    segments: Vec<String>,
    public: bool,
}

#[derive(Debug, Default)]
struct Module {
    /// Its path from the crate root (empty for the root).
    path: Vec<String>,
    parent: Option<ModId>,
    /// The file that holds it (an inline module shares its file's node).
    file: usize,
    children: HashMap<String, ModId>,
    items: BTreeSet<String>,
    imports: HashMap<String, Import>,
    globs: Vec<Import>,
    /// Compiled for tests only: it, or a module above it, is `#[cfg(test)]`.
    test_only: bool,
}

/// A path named in a file, to resolve once every module is known.
#[derive(Debug)]
struct Reference {
    scope: ModId,
    segments: Vec<String>,
    /// A path of one segment counts only when it is a `pub use` binding (the module's own code
    /// using what it forwards); a private `use` counted already.
    single: bool,
}

#[derive(Debug, Default)]
struct Crate {
    name: String,
    files: Vec<PathBuf>,
    modules: Vec<Module>,
    references: Vec<Reference>,
}

enum Resolved {
    Module(ModId),
    Item(ModId),
}

const MAX_DEPTH: usize = 32;

impl Crate {
    fn load(name: &str, root: &Path) -> Self {
        let mut c = Crate {
            name: name.into(),
            ..Default::default()
        };
        c.load_file(root, Vec::new(), None, true, false);
        c
    }

    fn new_module(
        &mut self,
        path: Vec<String>,
        parent: Option<ModId>,
        file: usize,
        test_only: bool,
    ) -> ModId {
        let id = self.modules.len();
        if let Some(p) = parent {
            let name = path.last().expect("a child has a name").clone();
            self.modules[p].children.insert(name, id);
        }
        self.modules.push(Module {
            path,
            parent,
            file,
            test_only,
            ..Default::default()
        });
        id
    }

    /// `owns_dir`: the file is lib.rs, main.rs or mod.rs, whose children sit beside it.
    fn load_file(
        &mut self,
        file: &Path,
        path: Vec<String>,
        parent: Option<ModId>,
        owns_dir: bool,
        test_only: bool,
    ) {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let file_id = self.files.len();
        self.files.push(file.to_path_buf());
        let module = self.new_module(path.clone(), parent, file_id, test_only);
        let children_dir = if owns_dir {
            file.parent()
                .expect("a source file has a folder")
                .to_path_buf()
        } else {
            file.with_extension("")
        };
        let mut out_of_line = Vec::new();
        self.scan_items(&ast.items, module, file_id, &mut out_of_line);
        for (name, scope, test_only) in out_of_line {
            let flat = children_dir.join(format!("{name}.rs"));
            let nested = children_dir.join(&name).join("mod.rs");
            let mut child_path = self.modules[scope].path.clone();
            child_path.push(name.clone());
            if flat.exists() {
                self.load_file(&flat, child_path, Some(scope), false, test_only);
            } else if nested.exists() {
                self.load_file(&nested, child_path, Some(scope), true, test_only);
            } else {
                panic!("{}: module {name} has no file", file.display());
            }
        }
    }

    fn scan_items(
        &mut self,
        items: &[syn::Item],
        module: ModId,
        file: usize,
        out_of_line: &mut Vec<(String, ModId, bool)>,
    ) {
        for item in items {
            let name = match item {
                syn::Item::Const(i) => Some(&i.ident),
                syn::Item::Enum(i) => Some(&i.ident),
                syn::Item::Fn(i) => Some(&i.sig.ident),
                syn::Item::Macro(i) => i.ident.as_ref(),
                syn::Item::Static(i) => Some(&i.ident),
                syn::Item::Struct(i) => Some(&i.ident),
                syn::Item::Trait(i) => Some(&i.ident),
                syn::Item::Type(i) => Some(&i.ident),
                syn::Item::Union(i) => Some(&i.ident),
                _ => None,
            };
            if let Some(name) = name {
                self.modules[module].items.insert(name.to_string());
            }
            match item {
                syn::Item::Mod(m) => {
                    let test_only = self.modules[module].test_only || is_test_only(&m.attrs);
                    match &m.content {
                        None => out_of_line.push((m.ident.to_string(), module, test_only)),
                        Some((_, inner)) => {
                            let mut path = self.modules[module].path.clone();
                            path.push(m.ident.to_string());
                            let id = self.new_module(path, Some(module), file, test_only);
                            self.scan_items(inner, id, file, out_of_line);
                        }
                    }
                }
                syn::Item::Use(u) => {
                    let public = !matches!(u.vis, syn::Visibility::Inherited);
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, Vec::new(), &mut leaves);
                    for (binding, segments) in leaves {
                        if !public {
                            self.references.push(Reference {
                                scope: module,
                                segments: segments.clone(),
                                single: false,
                            });
                        }
                        let import = Import { segments, public };
                        match binding {
                            Some(b) => {
                                self.modules[module].imports.insert(b, import);
                            }
                            None => self.modules[module].globs.push(import),
                        }
                    }
                }
                other => {
                    let mut v = Paths {
                        crate_: self,
                        scope: module,
                    };
                    v.visit_item(other);
                }
            }
        }
    }

    fn lookup(&self, m: ModId, name: &str, depth: usize) -> Option<Resolved> {
        if depth > MAX_DEPTH {
            return None;
        }
        let module = &self.modules[m];
        if let Some(&c) = module.children.get(name) {
            return Some(Resolved::Module(c));
        }
        if module.items.contains(name) {
            return Some(Resolved::Item(m));
        }
        if let Some(import) = module.imports.get(name) {
            return self.resolve(m, &import.segments, depth + 1);
        }
        module
            .globs
            .iter()
            .find_map(|g| match self.resolve(m, &g.segments, depth + 1)? {
                Resolved::Module(source) if source != m => self.lookup(source, name, depth + 1),
                _ => None,
            })
    }

    /// Where `segments`, named in module `scope`, is defined; None: outside this crate.
    fn resolve(&self, scope: ModId, segments: &[String], depth: usize) -> Option<Resolved> {
        let (mut current, rest) = match segments.first()?.as_str() {
            "crate" => (0, &segments[1..]),
            "self" => (scope, &segments[1..]),
            "super" => {
                let mut m = scope;
                let mut i = 0;
                while segments.get(i).map(String::as_str) == Some("super") {
                    m = self.modules[m].parent?;
                    i += 1;
                }
                (m, &segments[i..])
            }
            _ => (scope, segments),
        };
        for segment in rest {
            match self.lookup(current, segment, depth)? {
                Resolved::Module(c) => current = c,
                item => return Some(item),
            }
        }
        Some(Resolved::Module(current))
    }

    /// The sibling graph: (from, to) -> the paths that make the edge.
    fn edges(&self) -> BTreeMap<(usize, usize), BTreeSet<String>> {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
        for r in &self.references {
            if r.single {
                let import = self.modules[r.scope].imports.get(&r.segments[0]);
                if !import.is_some_and(|i| i.public) {
                    continue;
                }
            }
            let target = match self.resolve(r.scope, &r.segments, 0) {
                Some(Resolved::Module(m) | Resolved::Item(m)) => m,
                None => continue,
            };
            if let Some(edge) = self.between_siblings(r.scope, target) {
                edges.entry(edge).or_default().insert(format!(
                    "{} uses {}",
                    self.display_module(r.scope),
                    r.segments.join("::")
                ));
            }
        }
        edges
    }

    /// The modules from the root down to `m`, inline modules left out (they are their file's).
    fn file_chain(&self, m: ModId) -> Vec<ModId> {
        let mut chain = Vec::new();
        let mut current = Some(m);
        while let Some(c) = current {
            let parent = self.modules[c].parent;
            if parent.is_none_or(|p| self.modules[p].file != self.modules[c].file) {
                chain.push(c);
            }
            current = parent;
        }
        chain.reverse();
        chain
    }

    /// The dependency of `from` on `to` as one between the siblings that hold them under their
    /// nearest common ancestor; None when one contains the other (or both are one file).
    fn between_siblings(&self, from: ModId, to: ModId) -> Option<(ModId, ModId)> {
        let (a, b) = (self.file_chain(from), self.file_chain(to));
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        Some((*a.get(common)?, *b.get(common)?))
    }

    fn display_module(&self, m: ModId) -> String {
        let path = &self.modules[m].path;
        if path.is_empty() {
            "crate".into()
        } else {
            path.join("::")
        }
    }

    fn display(&self, file: usize) -> String {
        let path = &self.files[file];
        let src = path
            .ancestors()
            .find(|a| a.ends_with("src"))
            .and_then(|s| s.parent())
            .and_then(|c| c.parent())
            .unwrap_or(Path::new(""));
        path.strip_prefix(src).unwrap_or(path).display().to_string()
    }

    /// The module path of a file's module, e.g. `launcher::kube`.
    fn file_module(&self, file: usize) -> &[String] {
        &self
            .modules
            .iter()
            .find(|m| m.file == file)
            .expect("every file has its module")
            .path
    }
}

/// The leaves of a use tree: (the name it binds, or None for a glob; the full path).
fn use_leaves(
    tree: &syn::UseTree,
    prefix: Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>)>,
) {
    let with = |ident: &syn::Ident| {
        let mut p = prefix.clone();
        p.push(ident.to_string());
        p
    };
    match tree {
        syn::UseTree::Path(p) => use_leaves(&p.tree, with(&p.ident), out),
        syn::UseTree::Name(n) if n.ident == "self" => {
            out.push((prefix.last().cloned(), prefix.clone()))
        }
        syn::UseTree::Name(n) => out.push((Some(n.ident.to_string()), with(&n.ident))),
        syn::UseTree::Rename(r) if r.ident == "self" => {
            out.push((Some(r.rename.to_string()), prefix.clone()))
        }
        syn::UseTree::Rename(r) => out.push((Some(r.rename.to_string()), with(&r.ident))),
        syn::UseTree::Glob(_) => out.push((None, prefix)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix.clone(), out);
            }
        }
    }
}

/// Collects the paths an item names: in code, types and macro bodies.
struct Paths<'a> {
    crate_: &'a mut Crate,
    scope: ModId,
}

impl Paths<'_> {
    fn push(&mut self, segments: Vec<String>) {
        if segments.is_empty() {
            return;
        }
        let single = segments.len() == 1;
        self.crate_.references.push(Reference {
            scope: self.scope,
            segments,
            single,
        });
    }

    /// `crate :: a :: b`, `super :: x`, `self :: x` inside a macro's tokens.
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let tokens: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                proc_macro2::TokenTree::Group(g) => self.tokens(g.stream()),
                proc_macro2::TokenTree::Ident(id)
                    if matches!(id.to_string().as_str(), "crate" | "super" | "self")
                        && is_path_sep(&tokens, i + 1) =>
                {
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while is_path_sep(&tokens, j) {
                        match tokens.get(j + 2) {
                            Some(proc_macro2::TokenTree::Ident(next)) => {
                                segments.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.push(segments);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn is_path_sep(tokens: &[proc_macro2::TokenTree], i: usize) -> bool {
    matches!(
        (tokens.get(i), tokens.get(i + 1)),
        (Some(proc_macro2::TokenTree::Punct(a)), Some(proc_macro2::TokenTree::Punct(b)))
            if a.as_char() == ':' && b.as_char() == ':'
    )
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            self.push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }

    // Modules and uses inside functions are rare; their paths still count, in the enclosing scope.
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, Vec::new(), &mut leaves);
        for (_, segments) in leaves {
            self.crate_.references.push(Reference {
                scope: self.scope,
                segments,
                single: false,
            });
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the driver sits in the workspace")
        .to_path_buf()
}

/// The workspace's members (Cargo.toml's `[workspace] members`).
const MEMBERS: [&str; 5] = [
    "common",
    "triton-proto",
    "worker",
    "driver",
    "metrics-client",
];

/// Every crate root of the workspace's members (libraries and binaries).
fn crates() -> Vec<Crate> {
    let root = workspace();
    let mut out = Vec::new();
    for member in MEMBERS {
        for root_file in ["lib.rs", "main.rs"] {
            let file = root.join(member).join("src").join(root_file);
            if file.exists() {
                out.push(Crate::load(&format!("{member} ({root_file})"), &file));
            }
        }
    }
    assert!(out.len() >= 6, "the workspace's crate roots were found");
    out
}

/// The cycles of the sibling graph (strongly connected components of more than one module), each
/// with the edges inside it.
fn cycles(c: &Crate) -> Vec<String> {
    let edges = c.edges();
    let n = c.modules.len();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        next[a].push(b);
    }
    // Tarjan's algorithm (recursive: the graph has a few hundred modules).
    struct Tarjan<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        counter: usize,
        components: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.counter);
            self.low[v] = self.counter;
            self.counter += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.next[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    _ => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().expect("v is on the stack");
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.components.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        next: &next,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        counter: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.components
        .iter()
        .map(|component| {
            let inside: BTreeSet<usize> = component.iter().copied().collect();
            let mut text = format!("{}: a cycle between", c.name);
            for (&(a, b), paths) in &edges {
                if inside.contains(&a) && inside.contains(&b) {
                    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
                    text.push_str(&format!(
                        "\n    {} -> {} ({})",
                        c.display_module(a),
                        c.display_module(b),
                        paths.join(", ")
                    ));
                }
            }
            text
        })
        .collect()
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let problems: Vec<String> = crates().iter().flat_map(cycles).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What breaks the stage order of `c`: a top-level module that is not a stage, and an import of
/// a stage above the importer's.
fn stage_problems(c: &Crate, stages: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for m in c.modules[0].children.keys() {
        if !stages.contains(&m.as_str()) {
            problems.push(format!(
                "{}: module `{m}` has no stage: give it its place in the stage table (and ARCHITECTURE.md)",
                c.name
            ));
        }
    }
    let rank = |m: ModId| {
        let path = &c.modules[m].path;
        (path.len() == 1)
            .then(|| stages.iter().position(|x| *x == path[0]))
            .flatten()
    };
    for ((from, to), paths) in c.edges() {
        if let (Some(ra), Some(rb)) = (rank(from), rank(to))
            && rb > ra
        {
            problems.push(format!(
                "stage {} imports stage {}, above it: {}",
                c.display_module(from),
                c.display_module(to),
                paths.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    problems
}

#[test]
fn the_driver_stages_import_only_from_the_stages_below() {
    let driver = Crate::load("driver", &workspace().join("driver/src/lib.rs"));
    let mut problems = stage_problems(&driver, &DRIVER_STAGES);
    let stage = |file: usize| driver.file_module(file).first().cloned();
    for (i, file) in driver.files.iter().enumerate() {
        if stage(i).as_deref() == Some("run") {
            let lines = std::fs::read_to_string(file).expect("read").lines().count();
            if lines > RUN_STAGE_MAX_LINES {
                problems.push(format!(
                    "{} has {lines} lines: the run stage is a thin loop (at most {RUN_STAGE_MAX_LINES} a file)",
                    driver.display(i)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check finds a cycle and an upward import when there is one (a checker that finds nothing
/// proves nothing).
#[test]
fn the_checks_see_a_cycle_and_an_upward_import() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("plan")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod matrix;\npub mod plan;\n").unwrap();
    std::fs::write(
        src.join("matrix.rs"),
        "use crate::plan::Rules;\npub struct Matrix;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("plan/mod.rs"),
        "mod rules;\npub use rules::Rules;\npub fn f() { let _ = crate::matrix::Matrix; }\n",
    )
    .unwrap();
    std::fs::write(src.join("plan/rules.rs"), "pub struct Rules;\n").unwrap();
    let c = Crate::load("fixture", &src.join("lib.rs"));
    let found = cycles(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("matrix -> plan (matrix uses crate::plan::Rules)")
            && found[0].contains("plan -> matrix (plan uses crate::matrix::Matrix)"),
        "{}",
        found[0]
    );
    assert_eq!(
        stage_problems(&c, &["matrix", "plan"]),
        ["stage matrix imports stage plan, above it: matrix uses crate::plan::Rules"]
    );
    assert!(stage_problems(&c, &["plan"])[0].contains("module `matrix` has no stage"));
    // Without the matrix's import there is no cycle: a facade's `pub use` is no dependency.
    std::fs::write(src.join("matrix.rs"), "pub struct Matrix;\n").unwrap();
    let c = Crate::load("fixture", &src.join("lib.rs"));
    assert!(cycles(&c).is_empty(), "{:?}", cycles(&c));
    assert!(stage_problems(&c, &["matrix", "plan"]).is_empty());
}

/// ARCHITECTURE.md says what the code is: its stage table names every module of each driver
/// stage, and its launcher interface every method of the `Launcher` trait and no other.
#[test]
fn the_architecture_page_matches_the_tree() {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let driver = Crate::load("driver", &root.join("driver/src/lib.rs"));
    let mut problems = Vec::new();
    for stage in DRIVER_STAGES {
        let Some(row) = text
            .lines()
            .find(|l| l.starts_with(&format!("| `{stage}/` |")))
        else {
            problems.push(format!(
                "no row for the stage `{stage}/` in the stage table"
            ));
            continue;
        };
        let id = driver.modules[0].children[stage];
        let file = driver.modules[id].file;
        for (child, &c) in &driver.modules[id].children {
            // Inline modules (tests) live in their parent's file.
            if driver.modules[c].file != file && !row.contains(&format!("`{child}`")) {
                problems.push(format!(
                    "stage `{stage}/`: module `{child}` is not in its row"
                ));
            }
        }
    }
    let source = std::fs::read_to_string(root.join("driver/src/launcher/mod.rs")).unwrap();
    let ast = syn::parse_file(&source).unwrap();
    let methods: BTreeSet<String> = ast
        .items
        .iter()
        .find_map(|i| match i {
            syn::Item::Trait(t) if t.ident == "Launcher" => Some(t),
            _ => None,
        })
        .expect("the Launcher trait")
        .items
        .iter()
        .filter_map(|i| match i {
            syn::TraitItem::Fn(f) => Some(f.sig.ident.to_string()),
            _ => None,
        })
        .collect();
    let block = text
        .split("trait Launcher {")
        .nth(1)
        .and_then(|rest| rest.split("\n}").next())
        .expect("ARCHITECTURE.md shows `trait Launcher { ... }`");
    let listed: BTreeSet<String> = block
        .lines()
        .filter_map(|l| l.split("fn ").nth(1))
        .filter_map(|l| l.split('(').next())
        .map(|name| name.trim().to_string())
        .collect();
    for m in methods.difference(&listed) {
        problems.push(format!(
            "Launcher::{m} is not in ARCHITECTURE.md's launcher interface"
        ));
    }
    for m in listed.difference(&methods) {
        problems.push(format!(
            "ARCHITECTURE.md lists Launcher::{m}, which the trait does not have"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// No function of the workspace's non-test code is longer than this, counted from its first line
/// (`fn`, or the `pub`, `async`, ... before it; attributes and doc comments left out) to its
/// closing brace.
const MAX_FUNCTION_LINES: usize = 100;

/// The functions over [`MAX_FUNCTION_LINES`] for now, each with why: (its file from the
/// workspace's root, its name as the check reports it, the reason). The list only shrinks: an
/// entry whose function is gone, or within the limit, fails the check as well.
#[rustfmt::skip] // One function a line.
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[
];

/// A function's length as the check measures it.
#[derive(Debug)]
struct FnLength {
    /// A method's is `Type::method` (the type of its `impl`, or its trait).
    name: String,
    /// The line of its first token.
    line: usize,
    lines: usize,
}

/// `#[cfg(test)]` (or `#[cfg(all(test, ...))]`): compiled for tests only.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    fn needs_test(meta: &syn::Meta) -> bool {
        match meta {
            syn::Meta::Path(p) => p.is_ident("test"),
            syn::Meta::List(l) if l.path.is_ident("all") => l
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|metas| metas.iter().any(needs_test)),
            _ => false,
        }
    }
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| needs_test(&m))
    })
}

/// The span of a function's first token: its visibility, else its signature's first keyword.
fn first_token(
    vis: &syn::Visibility,
    default: Option<&syn::Token![default]>,
    sig: &syn::Signature,
) -> proc_macro2::Span {
    let vis = match vis {
        syn::Visibility::Public(p) => Some(p.span),
        syn::Visibility::Restricted(r) => Some(r.pub_token.span),
        syn::Visibility::Inherited => None,
    };
    vis.or(default.map(|d| d.span))
        .or(sig.constness.as_ref().map(|t| t.span))
        .or(sig.asyncness.as_ref().map(|t| t.span))
        .or(sig.unsafety.as_ref().map(|t| t.span))
        .or(sig.abi.as_ref().map(|a| a.extern_token.span))
        .unwrap_or(sig.fn_token.span)
}

/// Measures the functions of a file, test code (`#[cfg(test)]` items) left out.
#[derive(Default)]
struct Lengths {
    /// The types and traits of the `impl` and `trait` blocks walked into.
    owners: Vec<String>,
    found: Vec<FnLength>,
}

impl Lengths {
    fn push(&mut self, ident: &syn::Ident, first: proc_macro2::Span, block: &syn::Block) {
        let name = match self.owners.last() {
            Some(owner) => format!("{owner}::{ident}"),
            None => ident.to_string(),
        };
        let line = first.start().line;
        let last = block.brace_token.span.close().end().line;
        self.found.push(FnLength {
            name,
            line,
            lines: last + 1 - line,
        });
    }

    /// Walks a function's body: a function declared in it is measured on its own, by its name.
    fn body(&mut self, walk: impl FnOnce(&mut Self)) {
        let owners = std::mem::take(&mut self.owners);
        walk(self);
        self.owners = owners;
    }

    fn owned(&mut self, owner: String, walk: impl FnOnce(&mut Self)) {
        self.owners.push(owner);
        walk(self);
        self.owners.pop();
    }
}

impl<'ast> Visit<'ast> for Lengths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_only(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test_only(&f.attrs) {
            self.push(&f.sig.ident, first_token(&f.vis, None, &f.sig), &f.block);
            self.body(|v| syn::visit::visit_item_fn(v, f));
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test_only(&i.attrs) {
            let owner = match &*i.self_ty {
                syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                _ => None,
            };
            let owner = owner.unwrap_or_else(|| "impl".into());
            self.owned(owner, |v| syn::visit::visit_item_impl(v, i));
        }
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if !is_test_only(&t.attrs) {
            self.owned(t.ident.to_string(), |v| syn::visit::visit_item_trait(v, t));
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            let first = first_token(&f.vis, f.defaultness.as_ref(), &f.sig);
            self.push(&f.sig.ident, first, &f.block);
            self.body(|v| syn::visit::visit_impl_item_fn(v, f));
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if !is_test_only(&f.attrs) {
            if let Some(block) = &f.default {
                let first = first_token(&syn::Visibility::Inherited, None, &f.sig);
                self.push(&f.sig.ident, first, block);
            }
            self.body(|v| syn::visit::visit_trait_item_fn(v, f));
        }
    }
}

/// The functions of a source file's non-test code, in the file's order.
fn function_lengths(text: &str) -> syn::Result<Vec<FnLength>> {
    let ast = syn::parse_file(text)?;
    let mut lengths = Lengths::default();
    lengths.visit_file(&ast);
    Ok(lengths.found)
}

/// The workspace's non-test source files, from its root: each crate's module tree without its
/// `#[cfg(test)]` modules, and each member's other `.rs` files (build script, examples) outside
/// `tests/` and `benches/`.
fn non_test_sources() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                if !matches!(name, "tests" | "benches" | "target") && !name.starts_with('.') {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let root = workspace();
    let mut in_trees = BTreeSet::new();
    let mut sources = BTreeSet::new();
    for c in crates() {
        for (i, file) in c.files.iter().enumerate() {
            in_trees.insert(file.clone());
            let module = c.modules.iter().find(|m| m.file == i);
            if !module.expect("every file has its module").test_only {
                sources.insert(file.clone());
            }
        }
    }
    let mut others = Vec::new();
    for member in MEMBERS {
        walk(&root.join(member), &mut others);
    }
    sources.extend(others.into_iter().filter(|f| !in_trees.contains(f)));
    sources
        .iter()
        .map(|f| {
            let relative = f.strip_prefix(&root).expect("a file of the workspace");
            relative.display().to_string()
        })
        .collect()
}

/// What breaks the length rule in `measured` (file, its functions): a function over the limit
/// that `allowed` does not list, and an entry of `allowed` that has no reason or whose function
/// is gone or within the limit.
fn length_problems(
    measured: &[(String, Vec<FnLength>)],
    allowed: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (file, lengths) in measured {
        for f in lengths.iter().filter(|f| f.lines > MAX_FUNCTION_LINES) {
            if !allowed
                .iter()
                .any(|&(a, name, _)| a == file && name == f.name)
            {
                problems.push(format!(
                    "{file}:{} fn {}: {} lines (at most {MAX_FUNCTION_LINES}: split it)",
                    f.line, f.name, f.lines
                ));
            }
        }
    }
    for &(file, name, reason) in allowed {
        let longest = measured
            .iter()
            .filter(|(f, _)| f == file)
            .flat_map(|(_, lengths)| lengths)
            .filter(|f| f.name == name)
            .map(|f| f.lines)
            .max();
        match longest {
            None => problems.push(format!(
                "LONG_FUNCTIONS lists {file} fn {name}, which is gone: take it off the list"
            )),
            Some(n) if n <= MAX_FUNCTION_LINES => problems.push(format!(
                "LONG_FUNCTIONS lists {file} fn {name}, now {n} lines: take it off the list"
            )),
            Some(_) => {}
        }
        if reason.trim().is_empty() {
            problems.push(format!(
                "LONG_FUNCTIONS lists {file} fn {name} without a reason"
            ));
        }
    }
    problems
}

#[test]
fn no_function_is_over_100_lines() {
    let root = workspace();
    let measured: Vec<(String, Vec<FnLength>)> = non_test_sources()
        .into_iter()
        .map(|file| {
            let text =
                std::fs::read_to_string(root.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let lengths = function_lengths(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            (file, lengths)
        })
        .collect();
    assert!(
        measured.iter().any(|(f, _)| f == "driver/src/main.rs")
            && measured.iter().any(|(f, _)| f == "triton-proto/build.rs"),
        "the workspace's sources were found"
    );
    let problems = length_problems(&measured, LONG_FUNCTIONS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The length check flags a function of 101 lines and passes one of 100, wherever a function can
/// be; it leaves test code alone; and its list only shrinks.
#[test]
fn the_length_check_sees_a_101_line_function() {
    // A function of `lines` lines from `fn` to its closing brace.
    let body = |lines: usize| format!("{{\n{}}}\n", "    let _ = 1;\n".repeat(lines - 2));
    let text = format!(
        "/// Doc comments and attributes do not count.\n#[inline]\npub fn long() {}\
         fn short() {}\
         struct S;\nimpl S {{\n    pub(crate) async fn method() {}}}\n\
         trait T {{\n    fn provided() {}    fn required();\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn huge() {}}}\n\
         #[cfg(all(test, unix))]\nfn helper() {}",
        body(101),
        body(100),
        body(101),
        body(101),
        body(500),
        body(300),
    );
    let found = function_lengths(&text).expect("the snippet parses");
    let seen: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(
        seen,
        [
            ("long", 3, 101),
            ("short", 104, 100),
            ("S::method", 206, 101),
            ("T::provided", 309, 101),
        ]
    );
    let measured = vec![("src/lib.rs".to_string(), found)];
    assert_eq!(
        length_problems(&measured, &[]),
        [
            "src/lib.rs:3 fn long: 101 lines (at most 100: split it)",
            "src/lib.rs:206 fn S::method: 101 lines (at most 100: split it)",
            "src/lib.rs:309 fn T::provided: 101 lines (at most 100: split it)",
        ]
    );
    let listed = [
        ("src/lib.rs", "long", "to be split"),
        ("src/lib.rs", "S::method", "to be split"),
        ("src/lib.rs", "T::provided", "to be split"),
    ];
    assert!(length_problems(&measured, &listed).is_empty());
    let stale = [
        ("src/lib.rs", "long", " "),
        ("src/lib.rs", "S::method", "to be split"),
        ("src/lib.rs", "T::provided", "to be split"),
        ("src/lib.rs", "short", "to be split"),
        ("src/lib.rs", "gone", "to be split"),
    ];
    assert_eq!(
        length_problems(&measured, &stale),
        [
            "LONG_FUNCTIONS lists src/lib.rs fn long without a reason",
            "LONG_FUNCTIONS lists src/lib.rs fn short, now 100 lines: take it off the list",
            "LONG_FUNCTIONS lists src/lib.rs fn gone, which is gone: take it off the list",
        ]
    );
}
