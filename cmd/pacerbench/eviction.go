package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// eviction is one row of the eviction table: callers loop {Wait} on one key
// while Redis runs out of memory under one maxmemory-policy.
type eviction struct {
	Variant    string
	Policy     string // maxmemory-policy during the run
	Limit      limit
	Goroutines int
	Run        time.Duration
	Calls      int64
	// Warned is the policy New reported as able to evict pacer's keys
	// (Metrics.Evictable), or "".
	Warned string
	// Evicted is INFO stats' evicted_keys over the run; Refused counts the
	// filler writes Redis refused with OOM (noeviction).
	Evicted, Refused int64
	// Fallbacks and Local are pacer's switches to local pacing and the
	// reservations granted locally; Errors the Waits that failed.
	Fallbacks, Local, Errors int64
	// Full is when the memory ran out (the bucket was gone, or the first
	// OOM), from the start; Room when maxmemory was lifted again.
	Full, Room time.Duration
	// The most calls in any 100 ms and 1 s of the whole run, the most in
	// any 1 s that ended before Full, and the calls in [Full, Full + 1 s).
	Busiest100ms, Busiest1s, Before1s, After1s int
}

// evictLimit is the eviction phase's limit: a burst large enough that a
// bucket that comes back full shows.
var evictLimit = limit{Rate: 200, Burst: 20}

const evictGoroutines = 16

// evictPolicies are the eviction phase's rows: the policy that evicts
// pacer's keys first (every key pacer writes has a TTL, the filler none),
// and the one docs/security.md asks for.
var evictPolicies = []string{"volatile-lru", "noeviction"}

// runEviction runs evictGoroutines callers of Wait on one key for
// c.EvictRun under policy; halfway, it makes Redis run out of memory (see
// fill), for c.EvictRun/6 under noeviction. Then it lifts maxmemory.
func (b *bench) runEviction(ctx context.Context, v variant, policy string) (eviction, error) {
	c := b.cfg
	r := eviction{Variant: v.Name, Policy: policy, Limit: evictLimit, Goroutines: evictGoroutines, Run: c.EvictRun}
	saved, err := b.admin.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return r, fmt.Errorf("pacerbench: CONFIG GET maxmemory: %w", err)
	}
	defer func() {
		// Restore the server, whatever happened.
		ctx := context.WithoutCancel(ctx)
		for _, k := range []string{"maxmemory", "maxmemory-policy"} {
			_ = b.admin.ConfigSet(ctx, k, saved[k]).Err()
		}
		_ = b.flush(ctx)
	}()
	if err := b.flush(ctx); err != nil {
		return r, err
	}
	if err := b.admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
		return r, fmt.Errorf("pacerbench: CONFIG SET maxmemory-policy: %w", err)
	}
	// b.open flushes again, so New runs on an empty database, and reads the
	// policy just set.
	l, counts, err := b.open(ctx, v, evictLimit, 1)
	if err != nil {
		return r, err
	}
	defer l.close()
	p, ok := l.(*pacerLimiter)
	if !ok {
		return r, fmt.Errorf("pacerbench: eviction: %s is not pacer", v.Name)
	}
	const key = "evict"
	bucket := p.l.RedisKey(key)
	evicted0, err := infoInt(ctx, b.admin, "stats", "evicted_keys")
	if err != nil {
		return r, err
	}

	start := time.Now()
	runCtx, cancel := context.WithDeadline(ctx, start.Add(c.EvictRun))
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		calls []int64
	)
	for range evictGoroutines {
		wg.Go(func() {
			var mine []int64
			var errs int64
			for runCtx.Err() == nil {
				if err := p.wait(runCtx, key); err != nil {
					if !endOfRun(runCtx, err) {
						errs++
					}
					continue
				}
				mine = append(mine, time.Now().UnixNano())
			}
			mu.Lock()
			calls = append(calls, mine...)
			r.Errors += errs
			mu.Unlock()
		})
	}

	var fillErr error
	select {
	case <-time.After(c.EvictRun / 2):
		hold := time.Duration(0)
		if policy == "noeviction" {
			hold = c.EvictRun / 6
		}
		fillErr = b.fill(ctx, &r, start, bucket, hold)
	case <-runCtx.Done():
	}
	wg.Wait()
	if fillErr != nil {
		return r, fillErr
	}
	if r.Full == 0 {
		return r, fmt.Errorf("pacerbench: eviction, %s: the memory never ran out", policy)
	}

	evicted1, err := infoInt(ctx, b.admin, "stats", "evicted_keys")
	if err != nil {
		return r, err
	}
	r.Evicted = evicted1 - evicted0
	r.Warned = counts.warned()
	r.Fallbacks, r.Local = counts.fallbacks.Load(), counts.local.Load()
	slices.Sort(calls)
	r.Calls = int64(len(calls))
	r.Busiest100ms = busiest(calls, 100*time.Millisecond)
	r.Busiest1s = busiest(calls, time.Second)
	full := start.Add(r.Full).UnixNano()
	before := calls[:sortSearch(calls, full-int64(time.Second))]
	r.Before1s = busiest(before, time.Second)
	r.After1s = sortSearch(calls, full+int64(time.Second)) - sortSearch(calls, full)
	return r, nil
}

// fill makes Redis run out of memory: maxmemory 2 MB above what it uses,
// then 8 KB keys without a TTL, 32 at a time, until bucket is gone (an
// eviction) or a write is refused (OOM). After an OOM, maxmemory goes down
// to 1 byte for hold, so that every write is refused (at the edge, Redis
// would take some writes again as buffers are freed). Then maxmemory is
// lifted (0).
func (b *bench) fill(ctx context.Context, r *eviction, start time.Time, bucket string, hold time.Duration) error {
	used, err := usedMemory(ctx, b.admin)
	if err != nil {
		return err
	}
	if err := b.admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err(); err != nil {
		return fmt.Errorf("pacerbench: CONFIG SET maxmemory: %w", err)
	}
	defer func() {
		_ = b.admin.ConfigSet(context.WithoutCancel(ctx), "maxmemory", "0").Err()
		r.Room = time.Since(start)
	}()
	value := strings.Repeat("x", 8<<10)
	for i := 0; i < 1<<14; i += 32 { // 128 MB at most
		cmds, _ := b.admin.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for j := range 32 {
				pipe.Set(ctx, "filler:"+strconv.Itoa(i+j), value, 0)
			}
			return nil
		})
		oom := false
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				if !strings.HasPrefix(err.Error(), "OOM") {
					return fmt.Errorf("pacerbench: filling the memory: %w", err)
				}
				r.Refused++
				oom = true
			}
		}
		if oom {
			r.Full = time.Since(start)
			if hold > 0 {
				if err := b.admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
					return fmt.Errorf("pacerbench: CONFIG SET maxmemory: %w", err)
				}
				time.Sleep(hold)
			}
			return nil
		}
		n, err := b.admin.Exists(ctx, bucket).Result()
		if err != nil {
			return fmt.Errorf("pacerbench: EXISTS: %w", err)
		}
		if n == 0 {
			r.Full = time.Since(start)
			return nil
		}
	}
	return errors.New("pacerbench: 128 MB written and the memory did not run out")
}

// infoInt reads an integer field of an INFO section.
func infoInt(ctx context.Context, admin *redis.Client, section, field string) (int64, error) {
	info, err := admin.Info(ctx, section).Result()
	if err != nil {
		return 0, fmt.Errorf("pacerbench: INFO %s: %w", section, err)
	}
	n, err := strconv.ParseInt(redisproc.InfoField(info, field), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("pacerbench: INFO %s: %s: %w", section, field, err)
	}
	return n, nil
}

// sortSearch returns the index of the first of the sorted calls at or after t.
func sortSearch(calls []int64, t int64) int {
	i, _ := slices.BinarySearch(calls, t)
	return i
}
