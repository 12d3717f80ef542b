//! The long flags of a `numaresources` subcommand, read from its clap derive in
//! `cmd/src/<subcommand>.rs` (and the global options of `cmd/src/cli.rs`).
//!
//! Why read the source: this crate cannot run the `numaresources` binary (Cargo gives
//! `CARGO_BIN_EXE_*` only to the package that owns the binary, and a nested `cargo run` from a test
//! would wait on the build lock of the `cargo test` that started it). So the reader does what clap
//! does: every field is a flag named by its `long = "…"` or, without one, by the field name in
//! kebab case. Anything it does not understand (a flattened struct not named `crate::<module>::<Struct>` or
//! `numaresources_<crate>::<module>::<Struct>`, a positional
//! field, a field without `long`) fails the test instead of being skipped, and a few flags known to
//! exist must be found, so a change in the source layout cannot make a check pass vacuously.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use numaresources_tests::workspace_root;

/// A long flag of the binary and its default value, if any.
#[derive(Debug, Clone)]
pub struct Flag {
    pub default: Option<String>,
    /// Whether clap accepts it more than once (a `Vec` field).
    pub repeatable: bool,
}

/// One field of a clap-derived struct.
#[derive(Debug)]
struct Field {
    name: String,
    ty: String,
    attributes: Vec<String>,
}

/// The flags one subcommand accepts: its own options plus the global ones.
#[derive(Debug)]
pub struct Subcommand {
    pub name: String,
    pub accepted: BTreeMap<String, Flag>,
}

impl Subcommand {
    /// Reads `numaresources <name>`: the variant `<Name>(Box<<Name>Args>)` of `cli.rs` and the
    /// struct `<Name>Args` of `cmd/src/<name>.rs`. Every flag of `known` must be found.
    pub fn read(name: &str, known: &[&str]) -> Self {
        let variant = name[..1].to_uppercase() + &name[1..];
        let args = format!("{variant}Args");
        let cmd = workspace_root().join("cmd/src");
        let own = std::fs::read_to_string(cmd.join(format!("{name}.rs"))).unwrap();
        let cli = std::fs::read_to_string(cmd.join("cli.rs")).unwrap();
        assert!(
            cli.contains(&format!("{variant}(Box<{args}>)")),
            "cli.rs no longer has the `{name}` subcommand as read here"
        );
        let mut accepted = BTreeMap::new();
        flags_of(&own, &args, false, &mut accepted);
        flags_of(&cli, "Cli", true, &mut accepted);
        for flag in known {
            assert!(
                accepted.contains_key(*flag),
                "--{flag} not found in the source: the reader is broken; got {accepted:?}"
            );
        }
        Self { name: name.to_owned(), accepted }
    }

    /// The container's arguments after the subcommand, as flag → value; fails on a missing or
    /// other subcommand, a flag this subcommand does not accept, or one given twice that clap
    /// takes once.
    pub fn container_flags(&self, container: &Container) -> BTreeMap<String, String> {
        assert!(container.command.is_none(), "use args only: the image's entrypoint is the numaresources binary");
        let args = container.args.as_deref().unwrap_or_default();
        assert_eq!(args.first(), Some(&self.name), "the first argument is the subcommand");
        let mut flags = BTreeMap::new();
        for arg in &args[1..] {
            let (flag, value) = arg
                .strip_prefix("--")
                .and_then(|a| a.split_once('='))
                .unwrap_or_else(|| panic!("argument {arg:?}: write flags as --name=value"));
            let known = self.accepted.get(flag).unwrap_or_else(|| {
                panic!(
                    "--{flag} is not a flag of `numaresources {}`; it accepts: {:?}",
                    self.name,
                    self.accepted.keys()
                )
            });
            let previous = flags.insert(flag.to_owned(), value.to_owned());
            assert!(previous.is_none() || known.repeatable, "--{flag} given twice");
        }
        flags
    }

    /// A flag's value in `flags` (from [`Self::container_flags`]), else its default.
    pub fn value(&self, flags: &BTreeMap<String, String>, flag: &str) -> String {
        flags
            .get(flag)
            .cloned()
            .or_else(|| self.accepted[flag].default.clone())
            .unwrap_or_else(|| panic!("--{flag} has neither a value in the manifest nor a default"))
    }
}

/// The fields of `struct <name> { … }` in `source`, with their `#[…]` attributes (doc and line
/// comments dropped). A small reader for the shapes clap derives use: attributes are scanned with
/// bracket depth and string literals skipped; a field runs to the next comma outside `<…>`/`(…)`.
fn struct_fields(source: &str, name: &str) -> Vec<Field> {
    let start = source
        .find(&format!("struct {name} {{"))
        .or_else(|| source.find(&format!("struct {name}<")))
        .unwrap_or_else(|| panic!("`struct {name} {{` not found: update this test's reader"));
    let body_start = start + source[start..].find('{').unwrap() + 1;
    let body_end = body_start + source[body_start..].find("\n}").expect("end of struct");
    let body: String = source[body_start..body_end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let chars: Vec<char> = body.chars().collect();
    let mut fields = Vec::new();
    let mut attributes = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
        } else if chars[i] == '#' {
            let begin = i;
            i = attribute_end(&chars, i);
            attributes.push(chars[begin..=i.min(chars.len() - 1)].iter().collect::<String>());
            i += 1;
        } else {
            let begin = i;
            let mut depth = 0;
            while i < chars.len() && !(chars[i] == ',' && depth == 0) {
                match chars[i] {
                    '<' | '(' => depth += 1,
                    '>' | ')' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            let declaration: String = chars[begin..i].iter().collect();
            let declaration = declaration.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            let (field, ty) = declaration
                .split_once(':')
                .unwrap_or_else(|| panic!("cannot read the field {declaration:?} of {name}"));
            fields.push(Field {
                name: field.trim().to_owned(),
                ty: ty.trim().to_owned(),
                attributes: std::mem::take(&mut attributes),
            });
            i += 1;
        }
    }
    assert!(!fields.is_empty(), "no fields read from {name}");
    fields
}

/// The index of the `]` closing the attribute that starts at `begin` (brackets inside string
/// literals do not count).
fn attribute_end(chars: &[char], begin: usize) -> usize {
    let (mut i, mut depth, mut in_string) = (begin, 0, false);
    while i < chars.len() {
        match chars[i] {
            '\\' if in_string => i += 1,
            '"' => in_string = !in_string,
            '[' if !in_string => depth += 1,
            ']' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The value of `key = "…"` inside an attribute, if present.
fn attribute_string(attribute: &str, key: &str) -> Option<String> {
    let at = attribute.find(&format!("{key} = \""))?;
    let rest = &attribute[at + key.len() + 4..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Whether an attribute lists `word` as a bare argument (`long`, `global = true`, `flatten`).
fn attribute_has(attribute: &str, word: &str) -> bool {
    let inner = attribute.split_once('(').map_or("", |(_, rest)| rest.trim_end_matches(")]"));
    inner.split(',').any(|part| part.trim() == word)
}

/// The long flags of the fields of `struct <name>` in `source`. `only_global` keeps the ones
/// marked `global = true` (the only top-level options accepted after a subcommand).
pub fn flags_of(source: &str, name: &str, only_global: bool, flags: &mut BTreeMap<String, Flag>) {
    for field in struct_fields(source, name) {
        let args: Vec<&String> = field.attributes.iter().filter(|a| a.starts_with("#[arg(")).collect();
        let command: Vec<&String> = field.attributes.iter().filter(|a| a.starts_with("#[command(")).collect();
        if command.iter().any(|a| attribute_has(a, "subcommand")) || args.iter().any(|a| attribute_has(a, "skip")) {
            continue;
        }
        if command.iter().any(|a| attribute_has(a, "flatten")) {
            // Flattened structs are followed in the same file, in `cmd/src/<module>.rs` when
            // named `crate::<module>::<Struct>`, or in `<crate>/src/<module>.rs` when named
            // `numaresources_<crate>::<module>::<Struct>` (a component's own flags).
            // A generic struct is read as its declaration (`Flags<Defaults>`: `struct Flags<…> {`).
            let inner = field.ty.trim_start_matches("Box<").trim_end_matches('>');
            let inner = inner.split_once('<').map_or(inner, |(generic, _)| generic);
            let (crate_dir, path) = match inner.split_once("::") {
                Some(("crate", path)) => ("cmd", path),
                Some((krate, path)) if krate.starts_with("numaresources_") => {
                    (krate.trim_start_matches("numaresources_"), path)
                }
                _ => ("", inner),
            };
            match path.rsplit_once("::").filter(|_| !crate_dir.is_empty()) {
                Some((module, name)) => {
                    let file =
                        workspace_root().join(crate_dir).join("src").join(format!("{}.rs", module.replace("::", "/")));
                    let other = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                    flags_of(&other, name, only_global, flags);
                }
                None => flags_of(source, inner, only_global, flags),
            }
            continue;
        }
        assert!(
            args.len() == 1,
            "{name}.{}: expected one #[arg(...)] attribute (a positional or unusual field): update this test",
            field.name
        );
        let arg = args[0];
        assert!(
            attribute_has(arg, "long") || attribute_string(arg, "long").is_some(),
            "{name}.{}: not a --long flag: update this test",
            field.name
        );
        if only_global && !arg.contains("global = true") {
            continue;
        }
        let long = attribute_string(arg, "long").unwrap_or_else(|| field.name.replace('_', "-"));
        let flag = Flag { default: attribute_string(arg, "default_value"), repeatable: field.ty.starts_with("Vec<") };
        assert!(flags.insert(long.clone(), flag).is_none(), "--{long} declared twice");
    }
}
