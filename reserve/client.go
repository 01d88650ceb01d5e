package reserve

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/redis/go-redis/v9"
)

// tunedClient returns the client the Limiter talks to Redis through: rdb
// itself when it is set up the way pacer needs, else a client of pacer's
// own made from rdb's options, with owned true (Close closes it). rdb itself
// is left as it is.
//
// pacer needs three things from a go-redis client:
//   - no retries of its own (MaxRetries -1): after a read timeout go-redis
//     resends the command, and a reservation script sent twice reserves two
//     slots, which costs the fleet a slot each time;
//   - ContextTimeoutEnabled: the deadline of each call (Options.CallTimeout,
//     or the caller's) then bounds the socket read itself. Without it a call
//     to a hung Redis waits for the client's ReadTimeout (3 s) and pacer
//     would need a goroutine per call to stop waiting sooner;
//   - one dial per attempt (DialerRetries 1): go-redis retries a refused
//     dial five times 100 ms apart, longer than a call may take, so the
//     real cause (connection refused, no such host) would reach the logs
//     as a timeout. pacer's own FailAfter and probes do the retrying.
//
// A Cluster client keeps its MaxRedirects (MOVED and ASK need them); it
// resends a script only after a connection error while the call's deadline
// has not passed.
func tunedClient(rdb redis.UniversalClient) (c redis.UniversalClient, owned bool, err error) {
	switch r := rdb.(type) {
	case *redis.Client:
		o := *r.Options()
		if o.MaxRetries <= 0 && o.ContextTimeoutEnabled && o.DialerRetries <= 1 {
			return rdb, false, nil
		}
		o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries = -1, true, 1
		// The push processor New made for rdb is rdb's own (a second
		// client cannot register its handlers again), and so is its
		// maintenance-notifications config.
		o.PushNotificationProcessor = nil
		if m := o.MaintNotificationsConfig; m != nil {
			mc := *m
			o.MaintNotificationsConfig = &mc
		}
		return redis.NewClient(&o), true, nil
	case *redis.ClusterClient:
		o := *r.Options()
		if o.MaxRetries <= 0 && o.ContextTimeoutEnabled && o.DialerRetries <= 1 {
			return rdb, false, nil
		}
		o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries = -1, true, 1
		o.PushNotificationProcessor = nil
		if m := o.MaintNotificationsConfig; m != nil {
			mc := *m
			o.MaintNotificationsConfig = &mc
		}
		return redis.NewClusterClient(&o), true, nil
	case *redis.Ring:
		o := *r.Options()
		if o.MaxRetries <= 0 && o.ContextTimeoutEnabled && o.DialerRetries <= 1 {
			return rdb, false, nil
		}
		o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries = -1, true, 1
		return redis.NewRing(&o), true, nil
	case nil:
		return nil, false, fmt.Errorf("%w: nil redis client", ErrInvalidOptions)
	default:
		return nil, false, fmt.Errorf("%w: unsupported client type %T: pass a *redis.Client (also from redis.NewFailoverClient), *redis.ClusterClient or *redis.Ring", ErrInvalidOptions, rdb)
	}
}

// describeClient says where rdb points, for an error or a log line: "redis
// at host:port", the unix socket, the Cluster's or Ring's seed addresses,
// or that Sentinel names the master.
func describeClient(rdb redis.UniversalClient) string {
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		switch {
		case o.Addr == "FailoverClient": // redis.NewFailoverClient's
			return "redis through Sentinel (check FailoverOptions.SentinelAddrs and MasterName)"
		case o.Network == "unix":
			return "redis at unix socket " + o.Addr
		}
		return "redis at " + o.Addr
	case *redis.ClusterClient:
		if addrs := r.Options().Addrs; len(addrs) > 0 {
			return "redis cluster at " + strings.Join(addrs, ", ")
		}
		return "redis cluster (ClusterOptions.ClusterSlots)"
	case *redis.Ring:
		addrs := make([]string, 0, len(r.Options().Addrs))
		for name, addr := range r.Options().Addrs {
			addrs = append(addrs, name+"="+addr)
		}
		slices.Sort(addrs)
		return "redis ring at " + strings.Join(addrs, ", ")
	}
	return fmt.Sprintf("redis (%T)", rdb)
}

// checkEviction asks the server for its maxmemory-policy and warns when it
// may evict pacer's keys: an evicted bucket reads as full, a burst. Every key
// pacer writes has a TTL, so the volatile-* policies pick them first, and
// the allkeys-* policies may too. A server that refuses CONFIG (a managed
// Redis, an ACL without it) is not checked.
func (l *Limiter) checkEviction(ctx context.Context) {
	res, err := l.call(ctx, names.OpConfig, "", func(ctx context.Context) (any, error) {
		return l.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	})
	if err != nil {
		return
	}
	m, ok := res.(map[string]string)
	if !ok {
		return
	}
	policy := m["maxmemory-policy"]
	if policy == "" || policy == "noeviction" {
		return
	}
	if strings.HasPrefix(policy, "volatile-") || strings.HasPrefix(policy, "allkeys-") {
		l.opts.Metrics.Evictable(policy)
		l.opts.Logger.Warn("pacer: the Redis server may evict pacer's keys under memory pressure; an evicted bucket comes back full (a burst). Use maxmemory-policy noeviction, or a Redis of its own for pacer",
			"maxmemory-policy", policy, "limiter", l.id)
	}
}
