//! How the plugin's text looks: bars, quantities for people, and colour only where a person
//! reads it (a terminal) and never when `NO_COLOR` is set (<https://no-color.org>).

use std::io::IsTerminal;

/// Cells of a usage bar.
const BAR_WIDTH: usize = 10;

/// Whether to colour: stdout is a terminal and `NO_COLOR` is unset or empty.
pub fn colour_wanted() -> bool {
    colour_for(std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR").as_deref())
}

/// The decision itself, for tests.
pub fn colour_for(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

/// A palette: ANSI sequences, or nothing.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    enabled: bool,
}

impl Paint {
    /// A palette that paints when `enabled`.
    pub fn new(enabled: bool) -> Self {
        Self { enabled }
    }

    fn wrap(&self, code: &str, text: &str) -> String {
        if self.enabled { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }

    /// Bold (headings).
    pub fn bold(&self, text: &str) -> String {
        self.wrap("1", text)
    }

    /// Red (stale, full, refused).
    pub fn red(&self, text: &str) -> String {
        self.wrap("31", text)
    }

    /// Yellow (getting full).
    pub fn yellow(&self, text: &str) -> String {
        self.wrap("33", text)
    }

    /// Green (room left, fits).
    pub fn green(&self, text: &str) -> String {
        self.wrap("32", text)
    }

    /// A bar of how much is available: `[######----]`, coloured by how much is left.
    pub fn bar(&self, available: i64, allocatable: i64) -> String {
        let filled = if allocatable <= 0 {
            0
        } else {
            let ratio = available.clamp(0, allocatable) as f64 / allocatable as f64;
            (ratio * BAR_WIDTH as f64).round() as usize
        };
        let text = format!("[{}{}]", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled));
        match filled {
            _ if allocatable <= 0 => text,
            0..=1 => self.red(&text),
            2..=4 => self.yellow(&text),
            _ => self.green(&text),
        }
    }
}

/// An amount (thousandths) for people: CPUs as a count (`12`, `1.5`), bytes in binary units
/// with at most one decimal (`15.5Gi`), other resources as a count.
pub fn human(resource: &str, millis: i64) -> String {
    if resource == "cpu" || !is_bytes(resource) {
        let whole = millis / 1000;
        let rest = millis % 1000;
        return if rest == 0 { whole.to_string() } else { format!("{}", millis as f64 / 1000.0) };
    }
    let bytes = millis / 1000;
    const UNITS: [(&str, i64); 4] = [("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)];
    for (suffix, size) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            let text = format!("{value:.1}");
            return format!("{}{suffix}", text.strip_suffix(".0").unwrap_or(&text));
        }
    }
    bytes.to_string()
}

/// Whether a resource is counted in bytes.
pub fn is_bytes(resource: &str) -> bool {
    resource == "memory" || resource.starts_with("hugepages-") || resource == "ephemeral-storage"
}

/// A duration in seconds as kubectl prints ages: `45s`, `3m`, `5h`, `2d`.
pub use numaresources_api::duration::kubectl_age as age;

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_for(true, None));
        assert!(colour_for(true, Some(OsStr::new(""))), "an empty NO_COLOR does not count");
        assert!(!colour_for(true, Some(OsStr::new("1"))));
        assert!(!colour_for(false, None));
        assert_eq!(Paint::new(false).bar(3, 12), "[###-------]");
        assert_eq!(Paint::new(true).bar(12, 12), "\x1b[32m[##########]\x1b[0m");
    }

    #[test]
    fn amounts_for_people() {
        assert_eq!(human("cpu", 12_000), "12");
        assert_eq!(human("cpu", 1_500), "1.5");
        assert_eq!(human("memory", 16_642_998_272_000), "15.5Gi");
        assert_eq!(human("hugepages-1Gi", 2 * (1 << 30) * 1000), "2Gi");
        assert_eq!(human("vendor.com/gpu", 2_000), "2");
        assert_eq!(age(59), "59s");
        assert_eq!(age(600), "10m");
    }
}
