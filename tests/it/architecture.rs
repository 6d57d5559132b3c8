//! The import rules of docs/architecture.md (issue 34): no file of `src/` imports from a layer
//! above its own, the two store rules hold, and no files import each other in a circle.
//!
//! The graph has one node per file (`lib.rs` and `main.rs` are the crate root) and an edge for
//! every path a file names through `use crate::…`, `use super::…` or `use self::…`, and every
//! inline `crate::…` or `super::…` path, resolved to the deepest file that exists. A module's
//! paths into its own submodules are containment, not edges, so `self::…` and a parent's
//! `child::…` paths never count. A file's `#[cfg(test)] mod … { … }` blocks and its `//`
//! comments are left out (the text of strings is not, so a `crate::x` in a string counts). The
//! lead's measuring script builds the same graph (it cuts a file at its first test module,
//! which gives the same edges today); keep the two in step.
//!
//! No engine is needed: this reads source text only, once, in `tests/it`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module path prefix and its layer. A file belongs to the longest
/// prefix that matches its module path; `""` is the crate root (`lib.rs`, `main.rs`) only, so a
/// new top-level module fails the test until it has a row here. docs/architecture.md mirrors
/// this table.
const LAYERS: &[(&str, u8)] = &[
    // 1. foundation
    ("clock", 1),
    ("ids", 1),
    ("error", 1),
    ("db_url", 1),
    ("config", 1),
    ("flow", 1),
    ("run", 1),
    ("inbox", 1),
    ("schedule", 1),
    ("retention", 1),
    ("bulk", 1),
    ("trace", 1),
    // 2. tools and approvals
    ("tool", 2),
    ("approval", 2),
    // 3. the engine contract and the engines
    ("store", 3),
    // 4. the core: engine handle, registry, config, clock, wake-ups, the end-formatter
    ("core", 4),
    // 5. what runs on the core
    ("worker", 5),
    ("schedule::tick", 5),
    ("metrics", 5),
    // 6. the user-facing facade
    ("client", 6),
    ("status", 6),
    ("tool::executor", 6),
    ("metrics::serve", 6),
    // 7. the dashboard
    ("web", 7),
    // 8. the command line and the crate root
    ("cli", 8),
    ("", 8),
];

/// The engines: they never import each other, and no other store file imports them.
const ENGINES: &[&str] = &["store::sqlite", "store::postgres"];

/// How to mend a broken rule, said in every failure.
const FIX: &str = "Fix: move the item down (to the importing file's layer or below), or pass it \
                   in from above (a parameter, or a trait the lower layer owns).";

/// A module path inside the crate (`["store", "sqlite", "runs"]`); the crate root is empty.
type Module = Vec<String>;

/// The file graph of a source tree.
struct Graph {
    /// Each module and its file, relative to the package (`src/store/mod.rs`).
    files: BTreeMap<Module, String>,
    /// Each module and the modules it imports (never itself, the root or its own submodules).
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

#[test]
fn no_import_goes_up_the_layers() {
    let graph = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let unlisted: Vec<String> = graph
        .files
        .iter()
        .filter(|(module, _)| layer(module).is_none())
        .map(|(_, file)| format!("  {file} (no row in LAYERS)"))
        .collect();
    let wrong = forbidden_edges(&graph);
    assert!(
        unlisted.is_empty() && wrong.is_empty(),
        "{} import(s) go up the layers or break a store rule (docs/architecture.md, Layers and \
         Import rules), {} file(s) have no layer:\n{}\n{}\n{FIX}",
        wrong.len(),
        unlisted.len(),
        wrong.join("\n"),
        unlisted.join("\n"),
    );
}

#[test]
fn no_circles_between_modules() {
    let graph = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let circles: Vec<String> = circles(&graph)
        .iter()
        .map(|circle| {
            let files: Vec<&str> = circle.iter().map(|m| graph.files[m].as_str()).collect();
            format!("  {} files: {}", files.len(), files.join(", "))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "{} circle(s) of files that import each other (each line is one circle; every file in \
         it reaches every other):\n{}\n{FIX}",
        circles.len(),
        circles.join("\n"),
    );
}

/// Every edge that breaks a rule, as `src/a.rs -> src/b.rs (layer x -> y)`.
fn forbidden_edges(graph: &Graph) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, tos) in &graph.edges {
        for to in tos {
            let line =
                |why: String| format!("  {} -> {} ({why})", graph.files[from], graph.files[to]);
            if let (Some(a), Some(b)) = (layer(from), layer(to))
                && b > a
            {
                wrong.push(line(format!("layer {a} -> {b}")));
            }
            match (engine_of(from), engine_of(to)) {
                (Some(a), Some(b)) if a != b => {
                    wrong.push(line("an engine imports the other engine".to_string()));
                }
                (None, Some(_)) if from.first().is_some_and(|top| top == "store") => {
                    wrong.push(line(
                        "a store file outside the engines imports an engine".to_string(),
                    ));
                }
                _ => {}
            }
        }
    }
    wrong
}

/// The layer of a module: the row of the longest matching prefix in `LAYERS`.
fn layer(module: &Module) -> Option<u8> {
    if module.is_empty() {
        return LAYERS
            .iter()
            .find(|(prefix, _)| prefix.is_empty())
            .map(|&(_, n)| n);
    }
    LAYERS
        .iter()
        .filter(|(prefix, _)| !prefix.is_empty())
        .map(|&(prefix, n)| (prefix.split("::").collect::<Vec<_>>(), n))
        .filter(|(prefix, _)| {
            module.len() >= prefix.len() && module.iter().zip(prefix).all(|(a, b)| a == b)
        })
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, n)| n)
}

/// Which engine directory a module lives in, if any.
fn engine_of(module: &Module) -> Option<&'static str> {
    ENGINES.iter().copied().find(|engine| {
        let prefix: Vec<&str> = engine.split("::").collect();
        module.len() >= prefix.len() && module.iter().zip(&prefix).all(|(a, b)| a == b)
    })
}

/// The circles: strongly connected components of more than one file, each sorted by module
/// path, found with Tarjan's algorithm.
fn circles(graph: &Graph) -> Vec<Vec<Module>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        found: Vec<Vec<Module>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in graph.files.keys() {
        if !walk.index.contains_key(module) {
            walk.visit(module);
        }
    }
    walk.found.sort();
    walk.found
}

impl Graph {
    /// Reads every `.rs` file under `src` and builds the graph.
    fn of(src: &Path) -> Graph {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        paths.sort();
        let package = src.parent().unwrap_or(src);
        let mut sources = BTreeMap::new();
        for path in &paths {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let relative = path.strip_prefix(src).unwrap_or(path);
            let shown = path
                .strip_prefix(package)
                .unwrap_or(path)
                .display()
                .to_string();
            // lib.rs and main.rs are both the root; the root's paths are all containment.
            sources.entry(module_of(relative)).or_insert((shown, text));
        }
        Graph::from_sources(sources)
    }

    /// Builds the graph from each module's file name and source text.
    fn from_sources(sources: BTreeMap<Module, (String, String)>) -> Graph {
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (module, (_, text)) in &sources {
            for path in referenced_paths(text) {
                let Some(target) = target_of(module, &path) else {
                    continue;
                };
                let to = deepest_file(&sources, &target);
                let contained = to.len() >= module.len() && to[..module.len()] == module[..];
                if !to.is_empty() && !contained {
                    edges.entry(module.clone()).or_default().insert(to);
                }
            }
        }
        let files = sources
            .into_iter()
            .map(|(module, (file, _))| (module, file))
            .collect();
        Graph { files, edges }
    }
}

/// Collects the `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a file under `src/` defines: `store/mod.rs` is `store`, `lib.rs` the root.
fn module_of(relative: &Path) -> Module {
    let mut parts: Module = relative
        .with_extension("")
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

/// The module a path names, seen from `module`: `crate::a::b` is `a::b`, `super::x` is the
/// parent's `x`. `None` for paths that cannot leave the module (`self::…`) or the crate.
fn target_of(module: &Module, path: &[String]) -> Option<Module> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("super") => {
            let supers = path.iter().take_while(|part| *part == "super").count();
            let keep = module.len().saturating_sub(supers);
            let mut target = module[..keep].to_vec();
            target.extend_from_slice(&path[supers..]);
            Some(target)
        }
        _ => None,
    }
}

/// The deepest module with a file that `target` lies in (the root if none).
fn deepest_file(sources: &BTreeMap<Module, (String, String)>, target: &[String]) -> Module {
    (1..=target.len())
        .rev()
        .map(|n| &target[..n])
        .find(|prefix| sources.contains_key(*prefix))
        .map(<[String]>::to_vec)
        .unwrap_or_default()
}

/// Every module path a source text names that may leave its file: the items of each `use`
/// (flattened), each inline `crate::…` path and each inline `super::…` path. Tests and `//`
/// comments are left out first.
fn referenced_paths(text: &str) -> Vec<Vec<String>> {
    let code = strip_comments(&without_tests(text));
    let chars: Vec<char> = code.chars().collect();
    let mut paths = Vec::new();
    for statement in use_statements(&chars) {
        flatten_use(&[], &statement, &mut paths);
    }
    paths.extend(inline_paths(&chars, "crate", false));
    paths.extend(inline_paths(&chars, "super", true));
    paths
}

/// The text without its `#[cfg(test)] mod name { … }` blocks, each cut to its closing brace
/// (code after a test module still counts).
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some((start, body)) = test_module(rest) {
        out.push_str(&rest[..start]);
        rest = &rest[body..];
        rest = &rest[block_end(rest)..];
    }
    out.push_str(rest);
    out
}

/// Where the first `#[cfg(test)]` that opens an inline `mod name {` starts, and the byte just
/// after its `{`.
fn test_module(text: &str) -> Option<(usize, usize)> {
    let marker = "#[cfg(test)]";
    let mut from = 0;
    while let Some(found) = text[from..].find(marker) {
        let start = from + found;
        let rest = text[start + marker.len()..].trim_start();
        if let Some(after_mod) = rest.strip_prefix("mod")
            && after_mod.starts_with(char::is_whitespace)
        {
            let after_ws = after_mod.trim_start();
            let name_len = after_ws
                .find(|c: char| !is_word(c))
                .unwrap_or(after_ws.len());
            let after_name = after_ws[name_len..].trim_start();
            if name_len > 0 && after_name.starts_with('{') {
                return Some((start, text.len() - after_name.len() + 1));
            }
        }
        from = start + marker.len();
    }
    None
}

/// The byte just after the `}` that closes a block opened just before `text` (the end of
/// `text` if it never closes). Braces in strings, character literals and comments do not
/// count.
fn block_end(text: &str) -> usize {
    let b = text.as_bytes();
    let find = |from: usize, what: &str| text[from.min(b.len())..].find(what).map(|at| from + at);
    let mut depth = 1;
    let mut i = 0;
    while i < b.len() {
        i = match b[i] {
            b'{' => {
                depth += 1;
                i + 1
            }
            b'}' if depth == 1 => return i + 1,
            b'}' => {
                depth -= 1;
                i + 1
            }
            b'/' if b.get(i + 1) == Some(&b'/') => find(i, "\n").unwrap_or(b.len()),
            b'/' if b.get(i + 1) == Some(&b'*') => find(i + 2, "*/").map_or(b.len(), |e| e + 2),
            b'"' => string_end(b, i + 1),
            b'r' if i == 0 || !is_word(char::from(b[i - 1])) || b[i - 1] == b'b' => {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    find(i + 2 + hashes, &close).map_or(b.len(), |e| e + close.len())
                } else {
                    i + 1
                }
            }
            b'\'' => char_end(text, i),
            _ => i + 1,
        };
    }
    b.len()
}

/// The byte after the `"` that ends a string whose text starts at `from`.
fn string_end(b: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The byte after a character literal that starts at `at` (`'{'`, `'\''`), or just after the
/// quote when it opens a lifetime (`'a`).
fn char_end(text: &str, at: usize) -> usize {
    let rest = &text[at + 1..];
    if let Some(escaped) = rest.strip_prefix('\\') {
        // The escape's first character, then up to the closing quote.
        let skip = escaped.chars().next().map_or(0, char::len_utf8);
        return escaped[skip..]
            .find('\'')
            .map_or(text.len(), |e| at + 2 + skip + e + 1);
    }
    match rest.chars().next() {
        Some(c) if rest[c.len_utf8()..].starts_with('\'') => at + 1 + c.len_utf8() + 1,
        _ => at + 1,
    }
}

/// The text with every `//` to the end of its line removed (in strings too; a `use` inside a
/// string is rare enough, and the measuring script does the same).
fn strip_comments(text: &str) -> String {
    text.split('\n')
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A letter, digit or underscore (what may stand in an identifier).
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `chars[at..]` starts with `word`.
fn starts_with(chars: &[char], at: usize, word: &str) -> bool {
    word.chars()
        .enumerate()
        .all(|(i, c)| chars.get(at + i) == Some(&c))
}

/// The tree of each `use` statement: the text between `use` and its `;`.
fn use_statements(chars: &[char]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let word_starts = at == 0 || !is_word(chars[at - 1]);
        let spaced = chars.get(at + 3).is_some_and(|c| c.is_whitespace());
        if word_starts
            && spaced
            && starts_with(chars, at, "use")
            && let Some(end) = chars[at + 3..].iter().position(|&c| c == ';')
        {
            out.push(chars[at + 3..at + 3 + end].iter().collect());
            at += 3 + end + 1;
            continue;
        }
        at += 1;
    }
    out
}

/// Flattens a use tree (`a::{b, c::{d}}, e as f`) into its paths, each after `prefix`.
fn flatten_use(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    let mut items = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in tree.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    items.push(current);
    let segments = |text: &str| -> Vec<String> {
        text.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    for item in items {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut path = prefix.to_vec();
        if let (Some(open), Some(close)) = (item.find('{'), item.rfind('}')) {
            path.extend(segments(item[..open].trim_end_matches(':').trim()));
            flatten_use(&path, &item[open + 1..close], out);
        } else {
            let name = item.split(" as ").next().unwrap_or(item).trim();
            path.extend(segments(name));
            out.push(path);
        }
    }
}

/// Every inline path that starts with `head::` (`crate::a::b`, `super::super::x`), its
/// segments up to the last identifier. With `repeat`, `head::` may repeat (`super::super::`),
/// and a path must not follow `:` (so `crate::x::super` is not one).
fn inline_paths(chars: &[char], head: &str, repeat: bool) -> Vec<Vec<String>> {
    let ident_at = |at: usize| -> usize {
        let mut end = at;
        while chars.get(end).is_some_and(|&c| is_word(c)) {
            end += 1;
        }
        end
    };
    let lead = format!("{head}::");
    let step = lead.chars().count();
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let before = at.checked_sub(1).map(|i| chars[i]);
        let boundary = before.is_none_or(|c| !(is_word(c) || repeat && c == ':'));
        if !boundary || !starts_with(chars, at, &lead) {
            at += 1;
            continue;
        }
        let mut path = vec![head.to_string()];
        let mut pos = at + step;
        while repeat && starts_with(chars, pos, &lead) {
            path.push(head.to_string());
            pos += step;
        }
        // The identifier chain after the heads: `a::b::c`, as long as it goes.
        let mut chain = Vec::new();
        let mut end = ident_at(pos);
        if end > pos {
            chain.push(chars[pos..end].iter().collect::<String>());
            while starts_with(chars, end, "::") && ident_at(end + 2) > end + 2 {
                let next = ident_at(end + 2);
                chain.push(chars[end + 2..next].iter().collect());
                end = next;
            }
        } else if path.len() > 1 {
            // `super::super::{…}`: the last head is the path's end.
            end = pos - 2;
        } else {
            at += 1;
            continue;
        }
        path.extend(chain);
        out.push(path);
        at = end;
    }
    out
}

#[test]
fn the_parser_reads_nested_multi_line_and_inline_paths_and_skips_comments() {
    let text = "use crate::{a::{b, c}, d as e};\n\
                use crate::{\n    f::g,\n    h::{\n        i,\n    },\n};\n\
                pub(crate) use super::super::x;\n\
                use super::{y, z::*};\n\
                // use crate::commented::out;\n\
                fn call() { crate::x::y(1); let _ = super::w::v::<u8>(); } // crate::late\n\
                /// See [`crate::doc`].\n\
                #[cfg(test)]\nmod tests {\n    use crate::only_in_tests;\n    \
                const B: &str = \"}\"; const O: char = '{'; const Q: char = '\\''; \
                const R: &str = r#\"}\"#; fn f<'a>(x: &'a str) -> &'a str { x } // }\n}\n\
                fn after_tests() { crate::after::tests(); }\n";
    let paths: BTreeSet<String> = referenced_paths(text)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "crate::a::b",
        "crate::a::c",
        "crate::d",
        "crate::f::g",
        "crate::h::i",
        "crate::x::y",
        "crate::after::tests",
        "super::super::x",
        "super::y",
        "super::z::*",
        "super::w::v",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(paths, want);

    // Resolution: `super` from a plain file and a `mod.rs` alike, the deepest existing file,
    // containment and the root never edges.
    let module = |s: &str| -> Module {
        s.split("::")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    let file = |m: &str, text: &str| (module(m), (m.to_string(), text.to_string()));
    let graph = Graph::from_sources(BTreeMap::from([
        file("", "mod a; pub use crate::a::Thing;"),
        file(
            "a",
            "mod b; use self::b::X; use crate::c::deep::Y; use b::Z;",
        ),
        file("a::b", "use super::super::c; fn f() { super::Q; }"),
        file("c", "use crate::{a::b::W, Nothing};"),
    ]));
    let edges: Vec<String> = graph
        .edges
        .iter()
        .flat_map(|(from, tos)| {
            tos.iter()
                .map(move |to| format!("{} -> {}", from.join("::"), to.join("::")))
        })
        .collect();
    // A child naming its parent is an edge; the parent naming its child is not.
    assert_eq!(edges, ["a -> c", "a::b -> a", "a::b -> c", "c -> a::b"]);
    let circles: Vec<Vec<String>> = circles(&graph)
        .iter()
        .map(|c| c.iter().map(|m| m.join("::")).collect())
        .collect();
    assert_eq!(circles, [["a", "a::b", "c"]]);
}
