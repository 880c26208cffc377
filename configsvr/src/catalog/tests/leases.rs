//! Lease grants, renewals, releases, expiry and token growth.

use shoal_proto::ErrorCode;

use super::*;

fn acquire(holder: &str, ttl_ms: u64) -> Command {
    Command::AcquireLease { name: BALANCER_LEASE.into(), holder: holder.into(), ttl_ms }
}

fn granted(r: Reply) -> (u64, u64) {
    match r {
        Reply::Lease { token, expires_at_ms } => (token, expires_at_ms),
        other => panic!("not a lease: {other:?}"),
    }
}

#[test]
fn acquire_renew_release() {
    let mut fx = Fx::new();
    let (t1, exp) = granted(fx.ok(acquire("a", 1_000)));
    assert_eq!(exp, T0 + 1_000);
    let e = fx.err(acquire("b", 1_000));
    assert_eq!(e, CatalogError::LeaseBusy { lease: BALANCER_LEASE.into(), holder: "a".into(), expires_at_ms: exp });
    assert_eq!(e.code(), ErrorCode::LockBusy);

    // Re-acquiring or renewing while live keeps the token.
    fx.now += 500;
    assert_eq!(granted(fx.ok(acquire("a", 1_000))), (t1, T0 + 1_500));
    let renew = |holder: &str, token, ttl_ms| Command::RenewLease {
        name: BALANCER_LEASE.into(),
        holder: holder.into(),
        token,
        ttl_ms,
    };
    assert_eq!(granted(fx.ok(renew("a", t1, 2_000))), (t1, T0 + 2_500));
    let acquired = |fx: &Fx| fx.cat.leases().get(BALANCER_LEASE).map(|l| l.acquired_at_ms);
    assert_eq!(acquired(&fx), Some(T0), "renewals keep when the lease was acquired");
    assert_eq!(fx.err(renew("b", t1, 2_000)).code(), ErrorCode::LockBusy);
    assert_eq!(fx.err(renew("a", t1 + 1, 2_000)).code(), ErrorCode::LockBusy);
    let missing = Command::RenewLease { name: "nope".into(), holder: "a".into(), token: t1, ttl_ms: 10 };
    assert_eq!(fx.err(missing).code(), ErrorCode::LockBusy);

    // Renewals do not flood the changelog.
    let logged = fx.cat.changelog().entries().len();
    fx.ok(renew("a", t1, 2_000));
    assert_eq!(fx.cat.changelog().entries().len(), logged);

    let release =
        |holder: &str, token| Command::ReleaseLease { name: BALANCER_LEASE.into(), holder: holder.into(), token };
    assert_eq!(fx.err(release("b", t1)).code(), ErrorCode::LockBusy);
    fx.ok(release("a", t1));
    fx.noop(release("a", t1));
    // Free again: the next grant has a new, higher token, even for the same holder.
    let (t2, _) = granted(fx.ok(acquire("a", 1_000)));
    assert!(t2 > t1);
}

#[test]
fn expiry_hands_the_lease_over_with_a_new_token() {
    let mut fx = Fx::new();
    let (t1, exp) = granted(fx.ok(acquire("a", 1_000)));
    fx.now = exp; // expired at exactly expires_at_ms
    let renew = Command::RenewLease { name: BALANCER_LEASE.into(), holder: "a".into(), token: t1, ttl_ms: 1_000 };
    assert_eq!(fx.err(renew).code(), ErrorCode::LockBusy, "an expired lease is not renewed");
    let (t2, _) = granted(fx.ok(acquire("b", 1_000)));
    assert!(t2 > t1);
    fx.now += 1_000;
    let (t3, _) = granted(fx.ok(acquire("a", 1_000)));
    assert!(t3 > t2);
    assert_eq!(fx.cat.leases().get(BALANCER_LEASE).map(|l| l.acquired_at_ms), Some(fx.now), "a new grant, a new time");
    assert_eq!(fx.cat.leases().last_token(), t3);
}

#[test]
fn lease_argument_bounds() {
    let mut fx = Fx::new();
    assert_eq!(fx.err(acquire("a", 0)).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(acquire("a", LEASE_TTL_MS_MAX + 1)).code(), ErrorCode::BadValue);
    assert_eq!(fx.err(acquire("", 10)).code(), ErrorCode::BadValue);
    let long = Command::AcquireLease { name: "x".repeat(257), holder: "a".into(), ttl_ms: 10 };
    assert_eq!(fx.err(long).code(), ErrorCode::BadValue);
}

#[test]
fn lease_table_is_bounded_and_evicts_expired_leases() {
    let mut fx = Fx::new();
    for i in 0..LEASES_MAX {
        fx.ok(Command::AcquireLease { name: format!("l{i}"), holder: "a".into(), ttl_ms: 1_000 + i as u64 });
    }
    let one_more = Command::AcquireLease { name: "extra".into(), holder: "a".into(), ttl_ms: 1_000 };
    assert_eq!(fx.err(one_more.clone()).code(), ErrorCode::BadValue);
    fx.now += 1_009; // l0..=l9 have expired
    fx.ok(one_more);
    assert_eq!(fx.cat.leases().iter().count(), LEASES_MAX - 10 + 1);
}
