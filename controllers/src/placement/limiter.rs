//! Which pods are explained and which explanations go out: a pod is explained again at most once
//! per interval (its Event could not go out sooner, and explaining a pod against every NRT is
//! the costly part), and not at all while what it was explained from (the NRTs, its requests)
//! is unchanged since its Event said it; an explanation goes out only when it says something new
//! and the interval has passed since the pod's last, and no more than a token bucket allows
//! cluster-wide.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use numaresources_api::fit::explain::ReasonKind;

/// What becomes of one explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Published now.
    Send,
    /// The pod's last Event says the same.
    Same,
    /// The pod had one less than the interval ago (a later pass sends it).
    TooSoon,
    /// The cluster-wide budget is spent (a later pass sends it).
    RateLimited,
}

/// The per-pod memory and the cluster-wide bucket.
#[derive(Debug)]
pub(crate) struct Limiter {
    per_pod: Duration,
    rate: f64,
    burst: f64,
    tokens: f64,
    refilled: Option<Instant>,
    /// Each pod's last Event: when, and a hash of what it said.
    sent: HashMap<String, (Instant, u64)>,
    /// Each pod's last explanation.
    checked: HashMap<String, Checked>,
    /// The explanations sent once (rejected pods).
    once: HashSet<String>,
}

/// A pod's last explanation.
#[derive(Debug, Clone, Copy)]
struct Checked {
    at: Instant,
    first_reason: Option<ReasonKind>,
    /// What it was explained from, once its Event says it (sent, or the same as the last one).
    settled: Option<Basis>,
}

/// A digest of what an explanation is computed from: equal bases give equal explanations.
pub(crate) type Basis = u64;

/// The most once-sent explanations remembered (past it, the memory starts over: a rejected pod
/// still there gets its Event once more).
const ONCE_REMEMBERED: usize = 10_000;

impl Limiter {
    pub(crate) fn new(per_pod: Duration, rate: f64, burst: f64) -> Self {
        Self {
            per_pod,
            rate,
            burst,
            tokens: burst,
            refilled: None,
            sent: HashMap::new(),
            checked: HashMap::new(),
            once: HashSet::new(),
        }
    }

    /// Whether pod `uid` is to be explained `now` from `basis`: never explained, or not for an
    /// interval and its Event does not already say what `basis` gives.
    pub(crate) fn due(&self, uid: &str, now: Instant, basis: Basis) -> bool {
        self.checked.get(uid).is_none_or(|checked| {
            now.saturating_duration_since(checked.at) >= self.per_pod && checked.settled != Some(basis)
        })
    }

    /// Records that pod `uid` was explained `now`, its first reason `reason`.
    pub(crate) fn explained(&mut self, uid: &str, now: Instant, reason: Option<ReasonKind>) {
        self.checked.insert(uid.to_owned(), Checked { at: now, first_reason: reason, settled: None });
    }

    /// Records that pod `uid`'s Event says what `basis` gives (it went out, or said the same).
    pub(crate) fn settled(&mut self, uid: &str, basis: Basis) {
        if let Some(checked) = self.checked.get_mut(uid) {
            checked.settled = Some(basis);
        }
    }

    /// The first reason of every pod explained and not forgotten.
    pub(crate) fn reasons(&self) -> impl Iterator<Item = Option<ReasonKind>> + '_ {
        self.checked.values().map(|checked| checked.first_reason)
    }

    /// Whether pod `uid`'s explanation `message` goes out `now` (and takes a token if so).
    pub(crate) fn admit(&mut self, uid: &str, message: &str, now: Instant) -> Admission {
        let said = digest(message);
        if let Some((at, last)) = self.sent.get(uid) {
            if *last == said {
                return Admission::Same;
            }
            if now.saturating_duration_since(*at) < self.per_pod {
                return Admission::TooSoon;
            }
        }
        let elapsed = self.refilled.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst);
        self.refilled = Some(now);
        if self.tokens < 1.0 {
            return Admission::RateLimited;
        }
        self.tokens -= 1.0;
        self.sent.insert(uid.to_owned(), (now, said));
        Admission::Send
    }

    /// Like [`Self::admit`] for an explanation that is sent once: remembered apart from the
    /// pods [`Self::forget_except`] keeps (a failed pod stays until it is deleted).
    pub(crate) fn admit_once(&mut self, key: &str, message: &str, now: Instant) -> Admission {
        if self.once.contains(key) {
            return Admission::Same;
        }
        let admitted = self.admit(key, message, now);
        if admitted == Admission::Send {
            self.sent.remove(key);
            if self.once.len() >= ONCE_REMEMBERED {
                self.once.clear();
            }
            self.once.insert(key.to_owned());
        }
        admitted
    }

    /// Forgets the pods not in `live` (bound, deleted, or schedulable again).
    pub(crate) fn forget_except(&mut self, live: &HashSet<String>) {
        self.sent.retain(|uid, _| live.contains(uid));
        self.checked.retain(|uid, _| live.contains(uid));
    }
}

fn digest(message: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    message.hash(&mut hasher);
    hasher.finish()
}

/// The CPU time explanations may take: `share` of one core on average, accrued up to `cap` (so a
/// burst of newly Pending pods is explained at once, and a steady stream no faster than that).
#[derive(Debug)]
pub(crate) struct Budget {
    share: f64,
    cap: Duration,
    left: f64,
    refilled: Option<Instant>,
}

impl Budget {
    pub(crate) fn new(share: f64, cap: Duration) -> Self {
        Self { share, cap, left: cap.as_secs_f64(), refilled: None }
    }

    /// Whether another explanation may start `now`.
    pub(crate) fn allows(&mut self, now: Instant) -> bool {
        let elapsed = self.refilled.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.left = (self.left + elapsed.as_secs_f64() * self.share).min(self.cap.as_secs_f64());
        self.refilled = Some(now);
        self.left > 0.0
    }

    /// Takes what an explanation took.
    pub(crate) fn spend(&mut self, took: Duration) {
        self.left -= took.as_secs_f64();
    }
}
