// Package prommetrics exports a reserve.Limiter's measurements to
// Prometheus. It lives apart from package reserve so that the core does not
// import the Prometheus client.
//
//	m := prommetrics.New(prometheus.DefaultRegisterer, prommetrics.Options{})
//	limiter, err := reserve.New(rdb, reserve.Options{Metrics: m})
//
// Metrics (all prefixed pacer_):
//
//	reservations_total{source,band}    counter   reservations granted; source is "redis", "local" (fallback) or "lease", band the binding band
//	units_total{source,unit}           counter   cost reserved, per unit ("permits" for a single Limit, "tokens", ...)
//	moved_total{why}                   counter   sleepers that took a fresh slot: "pause" (a pause covered theirs), "late" (they woke too late), "lost" (Redis lost the state that granted theirs) or "back" (the local fallback granted theirs, and Redis answered before it)
//	wait_seconds{source,band}          histogram wait granted, buckets from 1 ms to 30 min, by source and binding band
//	redis_call_duration_seconds{op}    histogram every call to Redis, by operation (docs/otel.md lists them)
//	redis_errors_total{op}             counter   calls that failed
//	fallback_active                    gauge     1 while pacing locally (summed over Limiters)
//	fallback_switches_total{to}        counter   switches; to is "local" or "redis"
//	pauses_total                       counter   Pause calls (a provider's 429)
//	evictable                          gauge     1 when the Redis server's maxmemory-policy may evict pacer's keys
//	fair_turn_seconds{lane}            histogram fair requests' wait for their turn, before they were booked
//	fair_deferred_total{lane}          counter   times a fair queue was told to ask again
//	seats_held{band}                   gauge     seats this process holds on in-flight bands (reserve.Band.InFlight), by band
//	seats_waiters{band}                gauge     calls of this process waiting for seats, by band
//	seats_wait_seconds{source,band,got} histogram time calls waited for their seats; got is "handoff" (handed by a call that ended) or "free"
//
// The band label says why a reservation waited (reserve.Grant.Band): the
// name of the band whose queue or window set its slot ("permits" for a
// single Limit, "second", "day", ... for a Policy), "(pause)" when a pause
// did (reserve.PauseBinding, as otelpacer, reserve's errors and pacer
// status and web name it), and "none" when the slot was free at once. The
// rate of reservations_total by band shows which band is binding. Its
// values are the names of the bands of the policies in use, plus those two,
// so the label stays as small as the policies are: a band named "none"
// would share that series (none can be named "(pause)"). The source label
// is reserve.Source's: "redis" (a script on Redis), "local" (the local
// fallback) or "lease" (a slot of this process's lease on a hot key,
// which Redis granted); Metrics.Reserved, for callers that report a grant
// without its band, counts it under "none".
//
// Keys are not labels by default: a crawler has millions. Options.KeyLabel
// maps a key to a label value (for instance its host, or "other"), and adds
// a "key" label to reservations_total, units_total, wait_seconds,
// pauses_total and the seats metrics. The first Options.MaxKeyValues
// values (DefaultMaxKeyValues, 100, by default) get series of their own;
// later ones are counted as OtherKeyValue, "(other)". The seats metrics' band is the
// in-flight band's name. Tenants are not labels by default either:
// Options.TenantLabel adds a "tenant" label to the fair metrics, lane being
// "urgent", "normal" or "batch", its values bounded by
// Options.MaxTenantValues as the key label's are.
//
// docs/grafana/pacer-prometheus.json is a Grafana dashboard of these
// metrics; docs/grafana/README.md says how to import it and what each of its
// panels answers.
package prommetrics
