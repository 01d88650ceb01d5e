// Package otelpacer exports a reserve.Limiter's measurements and the story
// of each Wait to OpenTelemetry. It lives apart from package reserve, in a
// module of its own, so that the core does not import OpenTelemetry.
//
// A Telemetry is both the Limiter's Options.Metrics and its Options.Tracer:
//
//	tel, err := otelpacer.New(otelpacer.Options{}) // the global providers
//	if err != nil {
//		log.Fatal(err)
//	}
//	limiter, err := reserve.New(rdb, reserve.Options{Metrics: tel, Tracer: tel})
//
// (Example shows it whole.) Give it to pacehttp.Options.Tracer too, so that
// the requests of a pacehttp Transport, which reserve and sleep rather than
// Wait, get their wait spans.
//
// # Metrics
//
// Their names follow ASP.NET Core's aspnetcore.rate_limiting.*, adapted
// (docs/otel.md lists them with their Prometheus names):
//
//	pacer.rate_limiting.requests              counter   {request}   reservations granted, by pacer.source and pacer.band
//	pacer.rate_limiting.request.time_in_queue histogram s           the wait granted, by pacer.source and pacer.band
//	pacer.rate_limiting.queued_requests       updown    {request}   Waits sleeping now (Tracer)
//	pacer.rate_limiting.units                 counter   {unit}      cost reserved, by pacer.unit and pacer.source
//	pacer.rate_limiting.refused               counter   {request}   Waits refused (WaitTooLongError), by pacer.band and pacer.rate_limiting.reason (Tracer)
//	pacer.rate_limiting.moved                 counter   {request}   sleepers that took a fresh slot, by pacer.moved.reason
//	pacer.rate_limiting.pauses                counter   {pause}     keys paused (a provider's 429)
//	pacer.rate_limiting.fallback.active       updown    {limiter}   Limiters pacing locally, Redis being unavailable
//	pacer.rate_limiting.fallback.switches     counter   {switch}    switches, by pacer.fallback.to
//	pacer.redis.call.duration                 histogram s           calls to Redis, by pacer.redis.operation (and error.type)
//	pacer.rate_limiting.fair.turn             histogram s           fair requests' wait for their turn, by pacer.lane
//	pacer.rate_limiting.fair.deferred         counter   {request}   times a fair queue was told to ask again, by pacer.lane
//	pacer.redis.evictable                     gauge                 1 when Redis may evict pacer's keys
//	pacer.adaptive.rate                       gauge     {request}/s a learned rate (adaptive.Config.Observer)
//	pacer.rate_limiting.seats.held            updown    {seat}      seats held on in-flight bands now, by pacer.band
//	pacer.rate_limiting.seats.waiters         updown    {request}   calls waiting for seats now, by pacer.band
//	pacer.rate_limiting.seats.time_in_queue   histogram s           the wait for seats, by pacer.seats.got (handoff, free), pacer.source and pacer.band
//
// pacer.band is the binding band: the band whose queue or window set the
// slot, "(pause)" when a pause did (reserve.PauseBinding), "none" when the
// slot was free at once. Keys are not attributes by default, since a
// crawler has millions: Options.KeyAttribute maps a key to the value of a
// pacer.key attribute (its host, or "other"), and Options.TenantAttribute a
// tenant to pacer.tenant on the fair metrics. The first
// Options.MaxKeyValues values (DefaultMaxKeyValues, 100, by default) get
// series of their own; later ones are recorded as OtherKeyValue,
// "(other)"; Options.MaxTenantValues bounds pacer.tenant's the same way.
// The instruments marked
// Tracer count only when the Telemetry is the Limiter's Tracer too.
//
// # Traces
//
// Every Wait is a span named pacer.wait, a child of the span in the Wait's
// context, with the attribute pacer.key. Its events tell the wait:
// reserved (the slot, the wait, the binding band, the source), slept (the
// sleep planned), moved (a pause covered the slot, or the sleeper woke too
// late: the reason and the fresh slot's band) and woke (how late). At its
// end it carries pacer.band, pacer.source and pacer.wait (seconds), so
// that a slow request's trace reads "1.2 s waiting for the tokens band of
// api.openai.com". A Wait that fails ends with the span's status Error and
// the error recorded; a refusal (a *reserve.WaitTooLongError) adds
// pacer.band, pacer.deadline (whether the maximum was the context's
// deadline), pacer.refused.wait and pacer.max_wait.
package otelpacer
