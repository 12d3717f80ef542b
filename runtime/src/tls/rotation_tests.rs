use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn names() -> Vec<String> {
    service_names("numaresources-webhook", "numaresources")
}

/// Short lifetimes so that years of rotations fit in a test: CA 30 days (rotated with 10 left),
/// leaves 7 days (re-issued with 2 left), one hour of propagation.
fn policy() -> RotationPolicy {
    RotationPolicy {
        ca_validity: 30 * DAY,
        ca_renew_before: 10 * DAY,
        leaf_validity: 7 * DAY,
        leaf_renew_before: 2 * DAY,
        propagation: HOUR,
    }
}

fn start() -> SystemTime {
    SystemTime::now()
}

/// What `advance_ca` does to `ca` when `leaves` are the serving certificates written.
fn ca_step(ca: &CaState, leaves: &[&PemPair], p: &RotationPolicy, now: SystemTime) -> CaStep {
    let written: Vec<Option<&str>> = leaves.iter().map(|leaf| Some(leaf.cert_pem.as_str())).collect();
    advance_ca(Some(ca), &written, p, now).unwrap().1
}

fn subject_of(pem: &str) -> String {
    Parsed::from_pem(pem).unwrap().subject
}

fn issuer_of(pem: &str) -> String {
    Parsed::from_pem(pem).unwrap().issuer
}

#[test]
fn a_first_run_creates_a_ca_alone_and_issues_a_leaf_for_the_service_names() {
    let now = start();
    let (ca, step) = advance_ca(None, &[], &policy(), now).unwrap();
    assert_eq!(step, CaStep::Created);
    assert_eq!(ca.previous_cert_pem, None);
    assert_eq!(plan_leaf(&ca, None, &names(), &policy(), now), LeafStep::Issue("no serving certificate yet"));
    let leaf = issue_leaf(&ca, &names(), &policy(), now).unwrap();
    assert_eq!(issuer_of(&leaf.cert_pem), subject_of(&ca.cert_pem));
    assert_eq!(Parsed::from_pem(&leaf.cert_pem).unwrap().names, names());
    assert_eq!(plan_leaf(&ca, Some(&leaf), &names(), &policy(), now), LeafStep::Keep);
    assert_eq!(ca_step(&ca, &[&leaf], &policy(), now), CaStep::Unchanged);
}

#[test]
fn the_secret_data_round_trips_and_a_broken_secret_names_its_problem() {
    let now = start();
    let (ca, _) = advance_ca(None, &[], &policy(), now).unwrap();
    let rotated = CaState { previous_cert_pem: Some(ca.cert_pem.clone()), ..ca.clone() };
    let data = rotated.to_secret_data();
    assert_eq!(data[keys::CA_BUNDLE].matches("BEGIN CERTIFICATE").count(), 2);
    let back = CaState::from_secret_data(&data).unwrap();
    assert_eq!((back.cert_pem, back.previous_cert_pem), (rotated.cert_pem.clone(), rotated.previous_cert_pem));
    assert_eq!(unix_seconds(back.rotated_at), unix_seconds(rotated.rotated_at));

    let mut missing = data.clone();
    missing.remove(keys::CA_KEY);
    assert!(CaState::from_secret_data(&missing).unwrap_err().to_string().contains("ca.key"));
    let mut garbage = data;
    garbage.insert(keys::CA_CERT.to_owned(), "not a certificate".to_owned());
    assert!(CaState::from_secret_data(&garbage).is_err());
}

#[test]
fn leaves_are_reissued_for_every_reason_and_only_then() {
    let p = policy();
    let now = start();
    let (ca, _) = advance_ca(None, &[], &p, now).unwrap();
    let leaf = issue_leaf(&ca, &names(), &p, now).unwrap();
    // (when, names asked for, expected)
    let cases: [(SystemTime, Vec<String>, LeafStep); 4] = [
        (now + 4 * DAY, names(), LeafStep::Keep),
        (now + 5 * DAY + HOUR, names(), LeafStep::Issue("the serving certificate is due for renewal")),
        (now + 8 * DAY, names(), LeafStep::Issue("the serving certificate has expired")),
        (
            now,
            vec!["other.numaresources.svc".to_owned()],
            LeafStep::Issue("the serving certificate does not cover every service name"),
        ),
    ];
    for (when, wanted, expected) in cases {
        assert_eq!(plan_leaf(&ca, Some(&leaf), &wanted, &p, when), expected);
    }
    let (stranger, _) = advance_ca(None, &[], &p, now + HOUR).unwrap();
    let foreign = issue_leaf(&stranger, &names(), &p, now + HOUR).unwrap();
    assert_eq!(
        plan_leaf(&ca, Some(&foreign), &names(), &p, now + HOUR),
        LeafStep::Issue("the serving certificate comes from a CA we no longer trust")
    );
    let mismatched = PemPair { cert_pem: leaf.cert_pem.clone(), key_pem: foreign.key_pem };
    assert_eq!(
        plan_leaf(&ca, Some(&mismatched), &names(), &p, now),
        LeafStep::Issue("the serving key does not match its certificate")
    );
}

#[test]
fn a_rotation_publishes_both_cas_then_reissues_leaves_then_retires_the_old_ca() {
    let p = policy();
    let t0 = start();
    let (old, _) = advance_ca(None, &[], &p, t0).unwrap();
    let leaf = issue_leaf(&old, &names(), &p, t0 + 19 * DAY).unwrap();

    // 21 days in, 9 left: rotate. Both CAs are trusted; the leaf stays for now.
    let t1 = t0 + 21 * DAY;
    let (rotated, step) = advance_ca(Some(&old), &[Some(leaf.cert_pem.as_str())], &p, t1).unwrap();
    assert_eq!(step, CaStep::Rotated);
    assert_eq!(rotated.previous_cert_pem.as_deref(), Some(old.cert_pem.as_str()));
    assert_eq!(rotated.bundle().matches("BEGIN CERTIFICATE").count(), 2);
    assert_eq!(plan_leaf(&rotated, Some(&leaf), &names(), &p, t1 + HOUR / 2), LeafStep::Keep);
    assert_eq!(ca_step(&rotated, &[&leaf], &p, t1 + HOUR / 2), CaStep::Unchanged);

    // One propagation later the new CA is everywhere: re-issue from it.
    let t2 = t1 + HOUR;
    assert_eq!(
        plan_leaf(&rotated, Some(&leaf), &names(), &p, t2),
        LeafStep::Issue("the CA was rotated and the new one has reached every client")
    );
    let new_leaf = issue_leaf(&rotated, &names(), &p, t2).unwrap();
    assert_eq!(issuer_of(&new_leaf.cert_pem), subject_of(&rotated.cert_pem));
    // The old CA stays until the new leaf has reached every server.
    assert_eq!(ca_step(&rotated, &[&new_leaf], &p, t2 + HOUR / 2), CaStep::Unchanged);
    let (retired, step) = advance_ca(Some(&rotated), &[Some(new_leaf.cert_pem.as_str())], &p, t2 + HOUR).unwrap();
    assert_eq!(step, CaStep::PreviousRetired);
    assert_eq!(retired.bundle().matches("BEGIN CERTIFICATE").count(), 1);
    // An old leaf still written somewhere holds the old CA back.
    assert_eq!(ca_step(&rotated, &[&new_leaf, &leaf], &p, t2 + HOUR), CaStep::Unchanged);
}

#[test]
fn an_expired_or_unreadable_ca_is_replaced_outright() {
    let p = policy();
    let t0 = start();
    let (old, _) = advance_ca(None, &[], &p, t0).unwrap();
    let (fresh, step) = advance_ca(Some(&old), &[], &p, t0 + 31 * DAY).unwrap();
    assert_eq!((step, fresh.previous_cert_pem.is_none()), (CaStep::Created, true));
    let broken = CaState { cert_pem: "garbage".to_owned(), ..old };
    assert_eq!(advance_ca(Some(&broken), &[], &p, t0).unwrap().1, CaStep::Created);
}

/// What a client trusting `bundle` makes of a server presenting `leaf` at `now`.
fn handshake_succeeds(bundle: &str, leaf: &str, now: SystemTime) -> bool {
    let leaf = Parsed::from_pem(leaf).unwrap();
    let trusted = pem::certificates(bundle.as_bytes(), "bundle").unwrap().iter().any(|der| {
        let (_, ca) = x509_parser::parse_x509_certificate(der).unwrap();
        ca.subject().to_string() == leaf.issuer
            && crate::tls::time::from_unix_seconds(ca.validity().not_after.timestamp()) > now
    });
    trusted && leaf.not_before <= now && now < leaf.not_after
}

/// Months of a controller reconciling every half hour (half a propagation), with every consumer lagging up to one
/// propagation behind: any leaf a server may still present is trusted by any bundle a client may
/// still hold, at every moment.
#[test]
fn no_handshake_fails_across_months_of_renewals_and_rotations_with_lagging_consumers() {
    let p = policy();
    let t0 = start();
    let step = HOUR / 2;
    // (time written, bundle) and (time written, leaf), newest last.
    let mut bundles: Vec<(SystemTime, String)> = Vec::new();
    let mut leaves: Vec<(SystemTime, String)> = Vec::new();
    let mut ca: Option<CaState> = None;
    let mut leaf: Option<PemPair> = None;
    let (mut rotations, mut issues) = (0, 0);
    let mut now = t0;
    while now < t0 + 120 * DAY {
        let written = [leaf.as_ref().map(|l| l.cert_pem.as_str())];
        let (next, ca_step) = advance_ca(ca.as_ref(), &written, &p, now).unwrap();
        if ca_step == CaStep::Rotated {
            rotations += 1;
        }
        if ca_step != CaStep::Unchanged {
            bundles.push((now, next.bundle()));
        }
        if let LeafStep::Issue(_) = plan_leaf(&next, leaf.as_ref(), &names(), &p, now) {
            let issued = issue_leaf(&next, &names(), &p, now).unwrap();
            leaves.push((now, issued.cert_pem.clone()));
            leaf = Some(issued);
            issues += 1;
        }
        ca = Some(next);

        // Anything written within the last propagation may or may not have arrived yet.
        let in_flight = |history: &[(SystemTime, String)]| -> Vec<String> {
            let settled = history.iter().rposition(|(at, _)| *at + p.propagation <= now).unwrap_or(0);
            history[settled..].iter().map(|(_, pem)| pem.clone()).collect()
        };
        for bundle in in_flight(&bundles) {
            for served in in_flight(&leaves) {
                assert!(
                    handshake_succeeds(&bundle, &served, now),
                    "day {:.2}: a client's bundle does not trust a leaf a server may present",
                    now.duration_since(t0).unwrap().as_secs_f64() / 86_400.0
                );
            }
        }
        now += step;
    }
    assert!(rotations >= 5, "the CA rotated {rotations} times in 120 days");
    assert!(issues > rotations * 2, "leaves were issued {issues} times");
}

#[test]
fn the_service_names_cover_every_way_a_client_addresses_the_service() {
    assert_eq!(
        service_names("numaresources-webhook", "ns"),
        [
            "numaresources-webhook.ns.svc",
            "numaresources-webhook.ns.svc.cluster.local",
            "numaresources-webhook",
            "numaresources-webhook.ns"
        ]
    );
}

#[test]
fn a_rotation_in_progress_finishes_even_when_the_new_ca_is_already_due() {
    // CAs living less than the renew window: each is due as soon as it exists.
    let p = RotationPolicy { ca_validity: 5 * DAY, ..policy() };
    let t0 = start();
    let (old, _) = advance_ca(None, &[], &p, t0).unwrap();
    let (rotated, step) = advance_ca(Some(&old), &[], &p, t0 + HOUR).unwrap();
    assert_eq!(step, CaStep::Rotated);
    let leaf = issue_leaf(&rotated, &names(), &p, t0 + 2 * HOUR).unwrap();
    let (retired, step) = advance_ca(Some(&rotated), &[Some(leaf.cert_pem.as_str())], &p, t0 + 3 * HOUR).unwrap();
    assert_eq!(step, CaStep::PreviousRetired);
    assert_eq!(retired.cert_pem, rotated.cert_pem);
}

#[test]
fn the_next_decision_is_the_earliest_pending_moment() {
    let p = policy();
    let t0 = start();
    let (ca, _) = advance_ca(None, &[], &p, t0).unwrap();
    let leaf = issue_leaf(&ca, &names(), &p, t0).unwrap();
    let seconds = |t: SystemTime| unix_seconds(t);
    // Nothing changes until the leaf is due: 7 days of life, renewed with 2 left.
    let next = next_decision(&ca, &[&leaf.cert_pem], &p, t0).unwrap();
    assert_eq!(seconds(next), seconds(not_after(&leaf.cert_pem).unwrap() - 2 * DAY));
    assert_eq!(plan_leaf(&ca, Some(&leaf), &names(), &p, next - Duration::from_secs(1)), LeafStep::Keep);
    assert!(matches!(plan_leaf(&ca, Some(&leaf), &names(), &p, next), LeafStep::Issue(_)));

    // During a rotation: the moment leaves may move to the new CA, then the moment the old CA
    // may leave the bundle.
    let t1 = t0 + 21 * DAY;
    let (rotated, _) = advance_ca(Some(&ca), &[Some(leaf.cert_pem.as_str())], &p, t1).unwrap();
    let renewed = issue_leaf(&ca, &names(), &p, t1).unwrap();
    assert_eq!(next_decision(&rotated, &[&renewed.cert_pem], &p, t1), Some(t1 + HOUR));
    let t2 = t1 + HOUR;
    let moved = issue_leaf(&rotated, &names(), &p, t2).unwrap();
    assert!(issued_by(&moved.cert_pem, &rotated.cert_pem) && !issued_by(&moved.cert_pem, &ca.cert_pem));
    let retire_at = next_decision(&rotated, &[&moved.cert_pem], &p, t2).unwrap();
    assert_eq!(seconds(retire_at), seconds(t2 + HOUR));
    assert_eq!(ca_step(&rotated, &[&moved], &p, retire_at), CaStep::PreviousRetired);
    assert_eq!(next_decision(&CaState { cert_pem: "garbage".to_owned(), ..ca }, &[], &p, t0), None);
}

#[test]
fn a_ca_that_cannot_issue_is_replaced_and_its_certificate_stays_trusted_for_the_overlap() {
    let p = policy();
    let t0 = start();
    let (ca, _) = advance_ca(None, &[], &p, t0).unwrap();
    let leaf = issue_leaf(&ca, &names(), &p, t0).unwrap();
    let (stranger, _) = advance_ca(None, &[], &p, t0 + HOUR).unwrap();
    // A key that is not the certificate's, one that is no key, and a serving certificate in place
    // of the CA (with its own, matching, key).
    let unusable = [
        CaState { key_pem: stranger.key_pem.clone(), ..ca.clone() },
        CaState { key_pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_owned(), ..ca.clone() },
        CaState { cert_pem: leaf.cert_pem.clone(), key_pem: leaf.key_pem.clone(), ..ca.clone() },
    ];
    let now = t0 + 2 * HOUR;
    for (index, broken) in unusable.iter().enumerate() {
        let (replaced, step) = advance_ca(Some(broken), &[Some(leaf.cert_pem.as_str())], &p, now).unwrap();
        if index < 2 {
            assert_eq!(step, CaStep::Replaced, "case {index}");
            assert_eq!(replaced.previous_cert_pem.as_deref(), Some(ca.cert_pem.as_str()), "case {index}");
            // The existing leaf stays valid until the new bundle has propagated, then moves.
            assert_eq!(plan_leaf(&replaced, Some(&leaf), &names(), &p, now + HOUR / 2), LeafStep::Keep);
            assert!(matches!(plan_leaf(&replaced, Some(&leaf), &names(), &p, now + HOUR), LeafStep::Issue(_)));
        } else {
            assert_eq!(step, CaStep::Created, "a serving certificate is no CA to keep trusting");
            assert_eq!(replaced.previous_cert_pem, None);
        }
        assert!(issue_leaf(&replaced, &names(), &p, now).is_ok(), "case {index}: the new CA issues");
    }
}

#[test]
fn an_absurd_rotated_at_neither_panics_nor_stalls_the_rotation() {
    let p = policy();
    let t0 = start();
    let (old, _) = advance_ca(None, &[], &p, t0).unwrap();
    let leaf = issue_leaf(&old, &names(), &p, t0 + 20 * DAY).unwrap();
    let t1 = t0 + 21 * DAY;
    let (rotated, _) = advance_ca(Some(&old), &[Some(leaf.cert_pem.as_str())], &p, t1).unwrap();
    let mut data = rotated.to_secret_data();
    data.insert(keys::ROTATED_AT.to_owned(), i64::MAX.to_string());
    let absurd = CaState::from_secret_data(&data).unwrap();
    assert_eq!(plan_leaf(&absurd, Some(&leaf), &names(), &p, t1), LeafStep::Keep);
    assert!(next_decision(&absurd, &[&leaf.cert_pem], &p, t1).is_some());
    // advance_ca brings it back to now: the overlap runs one propagation from here.
    let (clamped, step) = advance_ca(Some(&absurd), &[Some(leaf.cert_pem.as_str())], &p, t1).unwrap();
    assert_eq!((step, unix_seconds(clamped.rotated_at)), (CaStep::Unchanged, unix_seconds(t1)));
    assert!(matches!(plan_leaf(&clamped, Some(&leaf), &names(), &p, t1 + HOUR), LeafStep::Issue(_)));
}

#[test]
fn a_missing_leaf_holds_the_previous_ca_in_the_bundle() {
    let p = policy();
    let t0 = start();
    let (old, _) = advance_ca(None, &[], &p, t0).unwrap();
    let (rotated, _) = advance_ca(Some(&old), &[], &p, t0 + 21 * DAY).unwrap();
    let t2 = t0 + 21 * DAY + HOUR;
    let moved = issue_leaf(&rotated, &names(), &p, t2).unwrap();
    let later = t2 + 2 * HOUR;
    assert_eq!(
        advance_ca(Some(&rotated), &[Some(moved.cert_pem.as_str()), None], &p, later).unwrap().1,
        CaStep::Unchanged
    );
    assert_eq!(ca_step(&rotated, &[&moved, &moved], &p, later), CaStep::PreviousRetired);
}

#[test]
fn a_leaf_of_the_previous_ca_is_replaced_before_it_expires_even_if_the_overlap_keeps_restarting() {
    let p = policy();
    let t0 = start();
    let (old, _) = advance_ca(None, &[], &p, t0).unwrap();
    let leaf = issue_leaf(&old, &names(), &p, t0).unwrap();
    let (rotated, _) = advance_ca(Some(&old), &[], &p, t0 + 21 * DAY).unwrap();
    let end = not_after(&leaf.cert_pem).unwrap();
    // The overlap restarted a minute ago, every time.
    let at = |now: SystemTime| {
        plan_leaf(&rotated.republished(now - Duration::from_secs(60)), Some(&leaf), &names(), &p, now)
    };
    assert_eq!(at(end - 2 * HOUR), LeafStep::Keep);
    assert_eq!(at(end - HOUR), LeafStep::Issue("the serving certificate from the previous CA is about to expire"));
    let next = next_decision(&rotated.republished(end - 2 * HOUR), &[&leaf.cert_pem], &p, end - 2 * HOUR);
    assert_eq!(next.map(unix_seconds), Some(unix_seconds(end - HOUR)));
}

#[test]
fn the_certificate_that_issued_a_leaf_is_found_in_a_bundle() {
    let p = policy();
    let t0 = start();
    let (a, _) = advance_ca(None, &[], &p, t0).unwrap();
    let (b, _) = advance_ca(None, &[], &p, t0 + HOUR).unwrap();
    let leaf = issue_leaf(&b, &names(), &p, t0 + HOUR).unwrap();
    let bundle = format!("{}{}", a.cert_pem, b.cert_pem);
    assert_eq!(issuer_in(&bundle, &leaf.cert_pem).map(|pem| subject_of(&pem)), Some(subject_of(&b.cert_pem)));
    assert_eq!(issuer_in(&a.cert_pem, &leaf.cert_pem), None);
    assert_eq!(issuer_in("garbage", &leaf.cert_pem), None);
    let (replaced, step) = replace_ca(Some(&b.cert_pem), &p, t0 + 2 * HOUR).unwrap();
    assert_eq!(step, CaStep::Replaced);
    assert!(issued_by(&leaf.cert_pem, replaced.previous_cert_pem.as_deref().unwrap()));
    assert_eq!(replace_ca(Some(&leaf.cert_pem), &p, t0).unwrap().1, CaStep::Created, "a leaf is no CA");
    assert_eq!(replace_ca(Some(&b.cert_pem), &p, t0 + 31 * DAY).unwrap().1, CaStep::Created, "expired");
}
