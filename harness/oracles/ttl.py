"""TTL (Flink's TtlVerifyUpdateFunction): every read of the TTL state equals what the update history
says it must be — the last value while ``last_ts + ttl > now``, nothing after (or, with
ReturnExpiredIfNotCleanedUp, possibly the stale value once). Under clock skew between subtasks,
reads within the largest injected skew of the expiry instant may go either way: bounds, not
equality."""

from __future__ import annotations

from harness.events import FaultStart
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict

__all__ = ["check_ttl"]


def check_ttl(art: RunArtifacts, spec: JobSpec) -> Verdict:
    cfg = spec.contract.oracle_config.get("ttl")
    if cfg is None:
        return Verdict.unknown(
            "ttl",
            f"job {spec.graph.name!r} declares no TTL reads to verify "
            "(JobBuilder.oracle_config('ttl', TtlReads(...)), as job ttl_verify does)",
        )
    ttl = int(cfg.ttl_ms)
    stale_ok = cfg.visibility == "ReturnExpiredIfNotCleanedUp"
    skew = max(
        [
            abs(int((e.details or {}).get("skew_ms", 0)))
            for e in art.of_type(FaultStart)  # a clock skew fault says its skew_ms
        ]
        or [0]
    )
    problems, reads, ambiguous, at_expiry = [], 0, 0, 0
    for c in art.committed:
        key, seq, observed, last_value, last_ts, now = c.record
        reads += 1
        if last_ts is None:
            if observed is not None:
                problems.append(f"key {key!r} seq {seq}: read {observed!r} before any write")
            continue
        expiry = last_ts + ttl
        at_expiry += now == expiry  # the boundary: expired exactly now (Flink: expiry <= now)
        if abs(now - expiry) < skew or (skew and now == expiry):
            ambiguous += 1
            ok = observed in (None, last_value)
        elif now < expiry:
            ok = observed == last_value
        else:
            ok = observed is None or (stale_ok and observed == last_value)
        if not ok:
            state = "alive" if now < expiry else "expired"
            problems.append(
                f"key {key!r} seq {seq}: read {observed!r} at t={now} but the last write was "
                f"{last_value!r} at t={last_ts} (ttl {ttl} ms: {state})"
                + (f" in transaction {c.txn}" if c.txn else "")
            )
    if reads == 0:
        return Verdict.unknown("ttl", "no committed TTL read to judge", reads=0)
    extra = f" ({ambiguous} within the {skew} ms skew bound)" if skew else ""
    return Verdict.of(
        "ttl",
        problems,
        f"{reads} TTL reads match the update-history model{extra}",
        "{n} TTL reads disagree with the update-history model",
        reads=reads,
        at_expiry=at_expiry,
        ambiguous=ambiguous,
        skew_ms=skew,
    )


register_oracle("ttl", check_ttl)
