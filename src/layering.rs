//! The layers of the crate, checked: a top-level module may use only modules on lower layers,
//! so dependencies run one way with the data (ingest → pipeline → store, delivery beside the
//! pipeline, the model at the bottom) and no import circle can form between modules.
//! `docs/ARCHITECTURE.md` explains each layer.

/// Top-level modules by layer, lowest first. A module may use modules of lower layers only.
const LAYERS: &[&[&str]] = &[
    &["model", "supervise"],
    &["config", "live", "telemetry"],
    &["store"],
    &["error", "pipeline", "access"],
    &["delivery"],
    &["replay"],
    &["state"],
    &["ingest", "admin", "dashboard"],
    &["identity"],
    &["server", "receive"],
    // Test support for fuzz targets and property tests: drives the whole router.
    &["fuzzing"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a source file belongs to (`src/store/group.rs` → `store`).
fn module_of(path: &std::path::Path, src: &std::path::Path) -> Option<String> {
    let relative = path.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// Every top-level module a file names through `crate::`: `crate::store::…`, and each module
/// of a grouped `crate::{store::…, model::{…}}`.
fn uses_of(text: &str) -> Vec<&str> {
    let mut used = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => used.extend(grouped_modules(group)),
            None => used.extend(leading_name(rest)),
        }
    }
    used
}

/// The first path segment of each item of a `{…}` group (`group` starts after the brace).
fn grouped_modules(group: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && !c.is_whitespace() => {
                item_start = false;
                names.extend(leading_name(&group[i..]));
            }
            _ => {}
        }
    }
    names
}

/// The identifier `text` starts with, if any.
fn leading_name(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (end > 0).then(|| &text[..end])
}

#[test]
fn grouped_and_plain_uses_are_both_seen() {
    let text =
        "use crate::store::Store;\nuse crate::{model::ids::Mpid, pipeline::{catalog, fanout}};";
    assert_eq!(uses_of(text), ["store", "model", "pipeline"]);
}

fn source_files(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn modules_use_only_lower_layers() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let Some(module) = module_of(file, &src) else {
            continue;
        };
        // The crate root and the binary wire everything; this file names modules in its table.
        if ["lib", "main", "layering"].contains(&module.as_str()) {
            continue;
        }
        let own = layer_of(&module)
            .unwrap_or_else(|| panic!("module `{module}` has no layer in LAYERS; add it"));
        let text = std::fs::read_to_string(file).expect("read source");
        for used in uses_of(&text) {
            if used == module {
                continue;
            }
            match layer_of(used) {
                Some(layer) if layer < own => {}
                _ => wrong.push(format!("{}: {module} uses {used}", file.display())),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}
