//! A component's configuration refused with every problem at once, so an operator fixes a
//! Deployment in one edit rather than one restart per mistake.

/// Every problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {}", .0.join("; "))]
pub struct InvalidConfig(pub Vec<String>);

impl InvalidConfig {
    /// `Ok(value)` when `problems` is empty, else every problem.
    pub fn check<T>(value: T, problems: Vec<String>) -> Result<T, Self> {
        if problems.is_empty() { Ok(value) } else { Err(Self(problems)) }
    }
}
