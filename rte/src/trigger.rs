//! What asked for a scan: counted in the metrics, published in the object's annotation, and
//! coalesced by the agent's rate limit.

/// What asked for a scan; published as the `k8stopoawareschedwg/rte-update` annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The start-up scan or the periodic timer.
    Periodic,
    /// The notify file was touched.
    Reactive,
}

impl Trigger {
    /// The annotation value upstream uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Reactive => "reactive",
        }
    }

    /// One trigger standing for two coalesced ones: an event wins over the timer, because the
    /// scan it causes is the one that reacts to it.
    pub(crate) fn merge(self, other: Self) -> Self {
        if self == Self::Reactive || other == Self::Reactive { Self::Reactive } else { Self::Periodic }
    }
}
