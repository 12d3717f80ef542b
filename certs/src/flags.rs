//! Command-line flags every component shares.

/// A component's flags at their declared defaults, no environment variable read: what a
/// component that composes another (`local`, a test) starts from.
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("defaults")).mut_args(|arg| arg.env(None));
    T::from_arg_matches(&command.try_get_matches_from(["defaults"])?)
}
